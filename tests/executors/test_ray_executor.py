"""The Ray executor on a real one-node Ray (4 CPUs, 2 "k80" slots, 4 GiB): a job's cores and memory are
reserved beside its slots, and a job whose cores do not fit beside another's waits, withdrawn, until they do."""

from __future__ import annotations

import sys
import time

import pytest

ray = pytest.importorskip("ray", reason="the Ray executor's tests need ray (pip install -e '.[ray]')")

from apportion.executors.base import Exit  # noqa: E402
from apportion.executors.ray_executor import RayExecutor  # noqa: E402
from apportion.executors.ray_nodes import declared  # noqa: E402

pytestmark = pytest.mark.ray

GIB = 2**30
NAMESPACE = "apportion-test-ray-executor"
SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


@pytest.fixture(scope="module")
def one_node():
    ray.init(num_cpus=4, resources={"k80": 2}, _memory=4 * GIB, namespace=NAMESPACE, include_dashboard=False,
             log_to_driver=False)
    yield
    ray.shutdown()


def wait_for(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


def first_line(executor: RayExecutor, job_id: int, attempt: int) -> str:
    path = executor.log_path(job_id, attempt)
    return path.read_text().partition("\n")[0] if path.exists() else ""


def test_a_job_gets_the_cores_it_asked_for_and_one_they_do_not_fit_beside_waits(one_node, tmp_path):
    from ray.util import get_placement_group, placement_group_table

    executor = RayExecutor(tmp_path, namespace=NAMESPACE, types=[declared("k80", resource="k80")], place_wait_s=2.0)
    ended: list[Exit] = []
    executor.start(1, 1, SLEEPER, {}, None, ("k80:0",), cpus=3, memory_gb=1)
    executor.start(2, 1, SLEEPER, {}, None, ("k80:1",), cpus=2)  # 3 + 2 cores: more than the node's 4

    line = wait_for(lambda: first_line(executor, 1, 1), 15, "job 1's replica to start")
    assert " holding 3 CPUs and 1 GiB;" in line
    assert placement_group_table(get_placement_group("apportion.1.1"))["bundles"] == {
        0: {"k80": 1.0, "CPU": 3.0, "memory": 1.0 * GIB}}

    ended += wait_for(lambda: executor.poll(), 10, "job 2 to be withdrawn")
    assert ended == [Exit(2, 1, None, unplaced="waiting for Ray to place 2 CPU cores beside its slots"
                                               " (2 s so far)")]
    assert first_line(executor, 2, 1) == "" and executor.is_alive(1)  # job 2 never ran beside job 1

    executor.kill(1)
    assert wait_for(lambda: executor.poll(), 10, "job 1 to end") == [Exit(1, 1, None)]
    executor.start(2, 2, SLEEPER, {}, None, ("k80:1",), cpus=2)  # its cores are free now
    assert " holding 2 CPUs;" in wait_for(lambda: first_line(executor, 2, 2), 15, "job 2's replica to start")
    executor.kill(2)
    wait_for(lambda: executor.poll(), 10, "job 2 to end")
