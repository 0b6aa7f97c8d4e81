"""Why a job can never run: one sentence per unschedulable job, "" for the others."""

import dataclasses

import numpy as np

from apportion.core.cluster import Cluster, NodeGroup, parse_cluster_shorthand
from apportion.core.jobs import JobTable
from apportion.core.queues import Queue, QueueConfig
from apportion.core.throughputs import ThroughputTable
from apportion.policies import make_policy
from apportion.sim import simulate
from apportion.sim.result import JobStatus
from apportion.sim.simulator import job_throughputs
from apportion.sim.unschedulable import unschedulable_reasons

SCALES = (1, 2, 4, 8, 16)
# resnet50 runs on v100 and k80; k80only only on k80; tpuonly on no type this cluster has
THROUGHPUTS = ThroughputTable(
    kinds=("resnet50", "k80only", "tpuonly"),
    gpu_types=("v100", "k80"),
    scales=SCALES,
    steps_per_s=np.array([[1.0, 0.5], [np.nan, 0.5], [np.nan, np.nan]])[:, :, None] * np.array(SCALES)[None, None, :],
)
CLUSTER = parse_cluster_shorthand("v100:8,k80:4")


def workload(kinds, gpus, queues=None) -> JobTable:
    n = len(kinds)
    return JobTable.build(
        job_id=[f"job-{i}" for i in range(n)], submit_time_s=[0.0] * n, kind_names=kinds, num_gpus=gpus,
        total_steps=[100.0] * n, queue=queues, kinds=THROUGHPUTS.kinds,
    )


def reasons_of(jobs: JobTable, never_run=None) -> list[str]:
    rates = job_throughputs(jobs, CLUSTER, THROUGHPUTS)
    mask = np.zeros(len(jobs), dtype=bool) if never_run is None else np.asarray(never_run)
    return unschedulable_reasons(jobs, CLUSTER, rates, mask).tolist()


def test_a_job_that_can_run_has_no_reason():
    assert reasons_of(workload(["resnet50", "k80only"], [8, 4])) == ["", ""]


def test_a_job_larger_than_every_type_that_runs_its_kind():
    assert reasons_of(workload(["resnet50", "k80only"], [16, 8])) == [
        "needs 16 GPUs; the largest type that runs resnet50 has 8 (v100)",
        "needs 8 GPUs; the largest type that runs k80only has 4 (k80)",
    ]


def test_a_kind_no_type_of_the_cluster_runs():
    assert reasons_of(workload(["tpuonly"], [1])) == ["no GPU type in the cluster runs tpuonly"]


def test_a_job_limited_to_types_the_cluster_lacks_or_that_do_not_run_its_kind():
    jobs = dataclasses.replace(
        workload(["resnet50", "resnet50", "k80only", "resnet50"], [1, 1, 1, 8]),
        allowed=np.array([[True, False], [False, True], [False, True], [False, True]]),
        allowed_types=("a100", "v100"),
    )
    assert reasons_of(jobs) == [
        "it may run only on a100, and the cluster has none of them",
        "",
        "no GPU type in the cluster runs k80only among the types it may use (v100)",
        "",
    ]
    jobs = dataclasses.replace(jobs, allowed=np.array([[False, True]] * 4))
    assert reasons_of(dataclasses.replace(jobs, num_gpus=np.array([1, 1, 1, 16])))[3] == (
        "needs 16 GPUs; the largest allowed type that runs resnet50 has 8 (v100)"
    )


def test_a_job_the_policy_never_runs_names_its_queue():
    jobs = workload(["resnet50", "resnet50"], [4, 4], queues=["small", "big"])
    assert reasons_of(jobs, never_run=[True, False]) == [
        "queue 'small' may not borrow and its quota is smaller than 4 GPUs on every type that runs resnet50", "",
    ]


def test_many_alike_jobs_share_one_sentence_and_each_case_keeps_its_own():
    kinds = ["resnet50", "tpuonly"] * 500 + ["resnet50"]
    gpus = [16, 1] * 500 + [1]
    reasons = reasons_of(workload(kinds, gpus))
    assert reasons[:2] == ["needs 16 GPUs; the largest type that runs resnet50 has 8 (v100)",
                           "no GPU type in the cluster runs tpuonly"]
    assert reasons[:1000] == reasons[:2] * 500 and reasons[1000] == ""


def test_a_replay_records_the_reasons_of_its_unschedulable_jobs():
    jobs = workload(["resnet50", "resnet50", "tpuonly"], [1, 16, 1])
    result = simulate(jobs, CLUSTER, THROUGHPUTS, make_policy("fifo"))
    assert result.status.tolist() == [JobStatus.COMPLETED, JobStatus.UNSCHEDULABLE, JobStatus.UNSCHEDULABLE]
    assert result.unschedulable_reason.tolist() == [
        "", "needs 16 GPUs; the largest type that runs resnet50 has 8 (v100)", "no GPU type in the cluster runs tpuonly",
    ]


def test_a_replay_under_quotas_names_the_queue_that_may_not_borrow():
    queues = QueueConfig((Queue("fixed", nominal={"v100": 2}, borrowing=False), Queue("open")))
    jobs = workload(["resnet50", "resnet50"], [4, 4], queues=["fixed", "open"])
    result = simulate(jobs, CLUSTER, THROUGHPUTS, make_policy("hierarchical", queues=queues))
    assert result.status.tolist() == [JobStatus.UNSCHEDULABLE, JobStatus.COMPLETED]
    assert result.unschedulable_reason[0] == (
        "queue 'fixed' may not borrow and its quota is smaller than 4 GPUs on every type that runs resnet50"
    )


# v100: two nodes of 4 GPUs, 16 cores and 64 GiB; k80: one node of 4 GPUs, 8 cores and 256 GiB
NODES = Cluster((NodeGroup("v100", 8, 4, cpus_per_node=16, memory_gib_per_node=64),
                 NodeGroup("k80", 4, 4, cpus_per_node=8, memory_gib_per_node=256)))


def room_reasons(kinds, gpus, cpus, memory_gib) -> list[str]:
    jobs = dataclasses.replace(workload(kinds, gpus), cpus=np.asarray(cpus, dtype=float),
                               memory_gib=np.asarray(memory_gib, dtype=float))
    rates = job_throughputs(jobs, NODES, THROUGHPUTS)
    return unschedulable_reasons(jobs, NODES, rates, np.zeros(len(jobs), dtype=bool)).tolist()


def test_a_job_asking_more_cores_or_memory_than_any_node_of_its_types_has():
    assert room_reasons(["resnet50", "k80only", "resnet50", "resnet50"], [1, 1, 1, 1],
                        cpus=[24, 12, 8, 0], memory_gib=[0, 0, 300, 0]) == [
        "needs 24 CPU cores; the most a node of a type that runs resnet50 has is 16 (v100)",
        "needs 12 CPU cores; the most a node of a type that runs k80only has is 8 (k80)",
        "needs 300 GiB of memory; the most a node of a type that runs resnet50 has is 256 (k80)",
        "",
    ]


def test_a_gang_whose_share_beside_each_gpu_too_few_nodes_can_hold():
    """80 cores over 8 GPUs is 10 beside each: a 16-core v100 node holds one such share, so the
    two v100 nodes give the job 2 GPUs (the k80 type has too few GPUs for it anyway). 32 cores,
    4 beside each, fit: four GPUs a node, all 8."""
    assert room_reasons(["resnet50", "resnet50"], [8, 8], cpus=[80, 32], memory_gib=[0, 0]) == [
        "needs 80 CPU cores with its 8 GPUs, 10 beside each; the nodes of the types that run resnet50 have "
        "room for that beside 2 of their GPUs at most",
        "",
    ]


def test_cores_and_memory_that_fit_apart_but_on_no_one_node():
    """12 cores fit only a v100 node, 128 GiB only the k80 node; 24 cores and 300 GiB fit none."""
    assert room_reasons(["resnet50", "resnet50"], [1, 1], cpus=[12, 24], memory_gib=[128, 300]) == [
        "needs 12 CPU cores and 128 GiB of memory with its GPU; no node of a type that runs resnet50 has room for both",
        "needs 24 CPU cores; the most a node of a type that runs resnet50 has is 16 (v100); and it needs 300 GiB of "
        "memory; the most a node of a type that runs resnet50 has is 256 (k80)",
    ]
