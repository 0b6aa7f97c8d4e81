"""The Ray executor's parts that need no Ray: slots per node, bundles, ranks, environments, exit codes."""

from __future__ import annotations

import json

from apportion.executors.ray_executor import RayExecutor, _combined, _parse_name, slot_ids, slot_type
from apportion.executors.ray_nodes import SlotResource, capacity, declared, detect
from apportion.executors.ray_replica import local_ranks, node_environment


def node(alive=True, **resources):
    return {"Alive": alive, "Resources": resources, "NodeManagerAddress": "10.0.0.1"}


V100_NODE = node(CPU=16, GPU=4, **{"accelerator_type:V100": 1})
A100_NODE = node(CPU=32, GPU=8, **{"accelerator_type:A100-80G": 1})
K80_NODE = node(CPU=8, GPU=2, k80=2)


def test_accelerator_labels_name_the_types_and_each_gpu_is_a_slot():
    types = detect([V100_NODE, A100_NODE, node(CPU=4)], name_of=lambda accel: accel.split("-")[0].lower())

    assert [t.gpu_type for t in types] == ["v100", "a100"]
    assert types[0].bundle() == {"GPU": 1.0, "accelerator_type:V100": 0.001}
    assert capacity([V100_NODE, A100_NODE, V100_NODE], types) == {"v100": [4, 4], "a100": [8]}


def test_a_cluster_without_gpus_offers_its_cpus():
    types = detect([node(CPU=4), node(CPU=2), node(alive=False, CPU=64)])

    assert types == [SlotResource("cpu", "CPU")]
    assert capacity([node(CPU=4), node(CPU=2), node(alive=False, CPU=64)], types) == {"cpu": [4, 2]}


def test_a_custom_resource_takes_gpus_too_when_its_nodes_have_them():
    on_gpus = declared("k80", resource="k80", nodes=[K80_NODE])
    on_paper = declared("k80", resource="k80", nodes=[node(CPU=1, k80=2)])  # a test cluster: no GPUs

    assert on_gpus.bundle() == {"k80": 1.0, "GPU": 1.0}
    assert on_paper.bundle() == {"k80": 1.0}
    assert capacity([K80_NODE, node(CPU=1, GPU=1, k80=2)], [on_gpus]) == {"k80": [2, 1]}  # never more than its GPUs


def test_a_declared_accelerator_counts_only_the_nodes_so_labelled():
    v100 = declared("v100", accelerator_type="V100")

    assert capacity([V100_NODE, A100_NODE], [v100]) == {"v100": [4]}


def test_slot_ids_name_the_type_and_a_number():
    assert slot_ids({"v100": 2, "k80": 1}) == [("v100:0", "v100"), ("v100:1", "v100"), ("k80:0", "k80")]
    assert slot_type("a100-80g:12") == "a100-80g"


def test_actor_names_are_read_back_and_nothing_else_is():
    assert _parse_name("apportion.12.3.0") == (12, 3, 0)
    assert _parse_name("apportion.12.3") is None
    assert _parse_name("someone-else.1.1.0") is None


def test_an_attempts_code_is_its_worst_replicas():
    assert _combined({0: 0, 1: 0}) == 0
    assert _combined({0: 75, 1: 0}) == 75  # one was preempted after the checkpoint: resume
    assert _combined({0: 75, 1: 1}) == 1
    assert _combined({0: 0, 1: None}) is None  # one was killed: no exit record


def test_local_ranks_count_the_replicas_on_the_same_node():
    nodes = ["a", "b", "a", "a"]

    assert [local_ranks(nodes, r) for r in range(4)] == [(0, 3), (0, 1), (1, 3), (2, 3)]


def test_a_replica_keeps_its_nodes_environment_but_not_another_attempts_variables():
    base = {"PATH": "/node/bin", "HOME": "/home/ray", "RANK": "7", "APPORTION_JOB_ID": "9",
            "CUDA_VISIBLE_DEVICES": "3", "OMP_NUM_THREADS": "1"}
    env = node_environment(base, {"APPORTION_JOB_ID": "4", "LR": "0.1"})

    assert env == {"PATH": "/node/bin", "HOME": "/home/ray", "APPORTION_JOB_ID": "4", "LR": "0.1"}


def test_an_exit_record_is_read_from_every_ranks_file(tmp_path):
    executor = RayExecutor(tmp_path)  # files only: no Ray
    directory = tmp_path / "jobs" / "5"
    directory.mkdir(parents=True)
    (directory / "attempt-2.exit").write_text(json.dumps({"code": 75}))
    assert executor.exit_record(5, 2) == 75
    (directory / "attempt-2.rank-1.exit").write_text(json.dumps({"code": 3}))
    assert executor.exit_record(5, 2) == 3
    assert executor.exit_record(5, 1) is None  # rank 0 left none: it was killed
    assert executor.log_path(5, 2, rank=1) == directory / "attempt-2.rank-1.log"


def test_a_replica_stopped_with_kill_stop_still_gets_its_sigterm():
    """SIGTERM to a replica is followed by SIGCONT: a stopped job runs its handler (checkpoints, exits 75)."""
    import subprocess
    import sys

    from apportion.executors.ray_replica import Replica

    stops_itself = ("import os, signal, sys\n"
                    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(75))\n"
                    "print('stopping', flush=True); os.kill(os.getpid(), signal.SIGSTOP)\n")
    process = subprocess.Popen([sys.executable, "-c", stops_itself], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert process.stdout.readline() == b"stopping\n"
        replica = Replica({"rank": 0})
        replica.process = process
        assert replica.signal(15)
        assert process.wait(timeout=10) == 75
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
