"""Why a job can never run: one sentence per unschedulable job, "" for the others."""

import dataclasses

import numpy as np

from apportion.core.cluster import parse_cluster_shorthand
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
