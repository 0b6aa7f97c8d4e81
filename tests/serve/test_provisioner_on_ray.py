"""Rented nodes on Ray: the autoscaler of a Ray cluster on this machine (Ray's fake multi-node
provider, which starts real raylets here) starts a node of the type RayAutoscalerProvisioner asks
for, and the executor's slots grow when it joins."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="the Ray autoscaler's test needs ray (pip install -e '.[ray]')")

from apportion.core.market import ON_DEMAND, Market  # noqa: E402
from apportion.executors.ray_executor import RayExecutor  # noqa: E402
from apportion.executors.ray_nodes import declared  # noqa: E402
from apportion.policies.provisioning import make_provisioning  # noqa: E402
from apportion.serve.app.on_ray import RayAutoscalerProvisioner  # noqa: E402
from apportion.serve.resources.rental.provisioner import Demand  # noqa: E402

pytestmark = pytest.mark.ray
K80_NODE = "aws/us-east-1/p2.xlarge/on-demand"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid: int) -> list[int]:
    """The processes ``pid`` started, and theirs (read from /proc)."""
    parent_of = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent_of[int(entry.name)] = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = [], [pid]
    while frontier:
        children = [p for p, parent in parent_of.items() if parent in frontier]
        found += children
        frontier = children
    return found


@pytest.fixture
def autoscaling_cluster(tmp_path, monkeypatch):
    """A head node with one CPU and an autoscaler that may start one node with two k80 slots."""
    from ray.cluster_utils import Cluster

    port = free_port()
    address = f"{ray.util.get_node_ip_address()}:{port}"
    config = {
        "cluster_name": "apportion-provisioner", "max_workers": 1, "upscaling_speed": 1.0,
        "idle_timeout_minutes": 1.0, "provider": {"type": "fake_multinode", "gcs_address": address},
        "auth": {"ssh_user": "nobody"}, "head_node_type": "ray.head.default",
        "available_node_types": {
            "ray.head.default": {"resources": {"CPU": 1}, "node_config": {}, "max_workers": 0},
            "k80_node": {"resources": {"CPU": 0, "k80": 2}, "node_config": {}, "min_workers": 0, "max_workers": 1},
        },
        "file_mounts": {}, "cluster_synced_files": [], "file_mounts_sync_continuously": False,
        "initialization_commands": [], "setup_commands": [], "head_setup_commands": [], "worker_setup_commands": [],
        "head_start_ray_commands": [], "worker_start_ray_commands": [],
    }
    path = tmp_path / "autoscaling.json"
    path.write_text(json.dumps(config))
    monkeypatch.setenv("RAY_FAKE_CLUSTER", "1")
    monkeypatch.setenv("AUTOSCALER_UPDATE_INTERVAL_S", "1")
    try:
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 1, "gcs_server_port": port, "include_dashboard": False, "autoscaling_config": str(path)})
    except (OSError, RuntimeError, ConnectionError) as err:  # Ray cannot start here at all: say why
        pytest.skip(f"a Ray cluster with an autoscaler cannot start on this machine: {err}")
    monitors = [p.process.pid for p in cluster.head_node.all_processes.get("monitor", [])]
    try:
        yield cluster, address, tmp_path
    finally:
        started = [pid for monitor in monitors for pid in descendants(monitor)]  # the raylets it started
        ray.shutdown()
        cluster.shutdown()
        for pid in started:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_node_asked_of_the_autoscaler_joins_and_its_slots_are_online(autoscaling_cluster):
    _, address, tmp_path = autoscaling_cluster
    executor = RayExecutor(tmp_path / "shared", address=address)
    executor.offer([declared("k80", resource="k80")])
    assert executor.capacity() == {"k80": 0}  # the head node has none
    market = Market(
        name=np.array(["p2.xlarge"], dtype=object), cloud=np.array(["aws"], dtype=object),
        region=np.array(["us-east-1"], dtype=object), gpu_type=np.array(["k80"], dtype=object),
        gpus=np.array([2]), market=np.array([ON_DEMAND]), times_s=np.array([0.0]), price_per_hour=np.array([[0.9]]),
    )
    provisioner = RayAutoscalerProvisioner(executor, market, make_provisioning("static"), ("k80",), {"k80": 2},
                                           round_s=60.0, poll_every_s=0.0)
    two_gpu_job = Demand(job_id=np.array([1]), gpus=np.array([2]), speed=np.array([[1.0]]),
                         remaining_steps=np.array([100.0]))
    provisioner.provision(two_gpu_job, time.time())
    assert provisioner.bundles == [{"k80": 2.0}]  # one node's worth: the executor's k80 slot resource, twice

    deadline = time.time() + 45
    while not provisioner.poll(time.time()) and time.time() < deadline:
        time.sleep(1)
    assert executor.capacity() == {"k80": 2}
    assert provisioner.capacity() == {"k80": 2} and provisioner.held() == {K80_NODE: 1}
