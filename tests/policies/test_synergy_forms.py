"""Synergy's FIFO and LAS (``fifo:preemptive``, ``las:continuous``) beside apportion's, worked by hand."""

import numpy as np
import pytest

from apportion.core.cluster import Cluster, NodeGroup
from apportion.core.jobs import JobTable
from apportion.core.throughputs import ThroughputTable
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies import make_policy
from apportion.sim import SimConfig, simulate

TWO_GPUS = ClusterView(("v100",), np.array([2]), np.array([np.nan]))


def view(submit, num_gpus, attained, running_type) -> JobView:
    n = len(submit)
    return JobView(
        index=np.arange(n), submit_time_s=np.asarray(submit, dtype=float), kind=np.zeros(n, dtype=np.int64),
        num_gpus=np.asarray(num_gpus), priority=np.ones(n), total_steps=np.full(n, 1e6), steps_done=np.zeros(n),
        attained_service_s=np.asarray(attained, dtype=float), first_start_s=np.full(n, np.nan),
        running_type=np.asarray(running_type), queue=np.full(n, "", dtype=object),
        user=np.full(n, "", dtype=object), now_s=0.0,
    )


def test_preemptive_fifo_gives_an_earlier_job_that_now_fits_the_gpus_of_a_later_one():
    # job 0 (2 GPUs) came first but waited; job 1 (1 GPU, later) runs on one of the 2 GPUs, now free
    jobs = view([0, 10], [2, 1], [0.0, 500.0], running_type=[-1, 0])
    rates = ThroughputView(np.ones((2, 1)))
    assert make_policy("fifo").allocate(jobs, TWO_GPUS, rates).share[:, 0].tolist() == [0, 1]
    assert make_policy("fifo:preemptive").allocate(jobs, TWO_GPUS, rates).share[:, 0].tolist() == [1, 0]


def test_continuous_las_runs_the_job_with_less_service_even_within_a_tiresias_queue():
    # both under 1 GPU-hour: Tiresias keeps the earlier job 0 running; Synergy runs job 1 (less service)
    jobs = view([0, 10, 20], [1, 1, 1], [1800.0, 600.0, 2400.0], running_type=[0, 0, -1])
    rates = ThroughputView(np.ones((3, 1)))
    tiresias = make_policy("las").allocate(jobs, TWO_GPUS, rates).share[:, 0].tolist()
    synergy = make_policy("las:continuous").allocate(jobs, TWO_GPUS, rates).share[:, 0].tolist()
    assert tiresias == [1, 1, 0] and synergy == [1, 1, 0]
    jobs = view([0, 10, 20], [1, 1, 1], [1800.0, 600.0, 900.0], running_type=[0, 0, -1])
    assert make_policy("las").allocate(jobs, TWO_GPUS, rates).share[:, 0].tolist() == [1, 1, 0]
    assert make_policy("las:continuous").allocate(jobs, TWO_GPUS, rates).share[:, 0].tolist() == [0, 1, 1]


def test_continuous_las_asks_again_when_a_running_job_passes_a_waiting_one():
    # running: job 0 (1 GPU, 600 GPU-s) and job 1 (2 GPUs, 1000); waiting: 900 and 1500 GPU-s.
    # job 0 passes 900 after 300 s; job 1 passes 1500 after (1500 - 1000) / 2 = 250 s: the first.
    jobs = view([0, 1, 2, 3], [1, 2, 1, 1], [600.0, 1000.0, 900.0, 1500.0], running_type=[0, 0, -1, -1])
    running = np.array([True, True, False, False])
    assert make_policy("las:continuous").next_change_s(jobs, running) == pytest.approx(250.0)
    assert make_policy("las:continuous").next_change_s(jobs, np.ones(4, dtype=bool)) == float("inf")


def test_the_options_are_variants_and_exclude_tiresias_thresholds():
    assert make_policy("fifo", preemptive=True).name == make_policy("fifo:preemptive").name
    with pytest.raises(ValueError, match="thresholds"):
        make_policy("las:continuous", thresholds_gpu_s=(60.0,))


ONE_STEP_A_SECOND = ThroughputTable(kinds=("a",), gpu_types=("v100",), scales=(1, 2),
                                    steps_per_s=np.array([[[1.0, 2.0]]]))


def test_a_replay_under_preemptive_fifo_starts_the_earlier_job_when_it_fits():
    # 2 GPUs, rounds of 360 s, no restart cost. A (1 GPU, 3600 steps) and B (2 GPUs, 3600 steps at 2 a
    # second: 1800 s) at 0, C (1 GPU, 7200 s) at 1, started at the next round, 360. B cannot fit.
    # apportion's FIFO keeps C to its end at 7560, then runs B: 7560 + 1800 = 9360.
    # Synergy's gives B both GPUs when A ends at 3600: B ends 5400; C, 3960 s to go, ends 9360.
    jobs = JobTable.build(job_id=["A", "B", "C"], submit_time_s=[0.0, 0.0, 1.0], kind_names=["a"] * 3,
                          num_gpus=[1, 2, 1], total_steps=[3600.0, 3600.0, 7200.0], kinds=("a",))
    cluster = Cluster((NodeGroup("v100", 2, 2),))
    config = SimConfig(restart_cost_s=0.0)
    kept = simulate(jobs, cluster, ONE_STEP_A_SECOND, make_policy("fifo"), config)
    preempted = simulate(jobs, cluster, ONE_STEP_A_SECOND, make_policy("fifo:preemptive"), config)
    assert kept.finish_s.tolist() == [3600.0, 9360.0, 7560.0]
    assert preempted.finish_s.tolist() == [3600.0, 5400.0, 9360.0]
