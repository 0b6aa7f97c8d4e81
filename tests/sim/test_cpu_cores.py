"""CPU-aware division of node cores in a replay: worked out by hand on a node of 2 GPUs and 6 cores."""

import dataclasses

import numpy as np
import pytest

from apportion.core.cluster import Cluster, NodeGroup
from apportion.core.cpu_speed import CoreCurves
from apportion.core.jobs import JobTable
from apportion.core.throughputs import ThroughputTable
from apportion.policies import make_policy
from apportion.sim import SimConfig, simulate
from apportion.sim.cpu_cores import CoreDivision

POINTS = [1.0, 2.0, 4.0, 6.0]
SENSITIVE = [0.25, 0.5, 1.0, 1.0]  # full speed from 4 cores per GPU; 0.75 at 3
INSENSITIVE = [1.0, 1.0, 1.0, 1.0]
ONE_STEP_A_SECOND = ThroughputTable(kinds=("a",), gpu_types=("v100",), scales=(1, 2),
                                    steps_per_s=np.array([[[1.0, 2.0]]]))
SIX_CORES = Cluster((NodeGroup("v100", 2, 2, cpus_per_node=6),))


def two_jobs(curves=(SENSITIVE, INSENSITIVE)) -> JobTable:
    return JobTable.build(job_id=["sensitive", "insensitive"], submit_time_s=[0.0, 0.0], kind_names=["a", "a"],
                          num_gpus=[1, 1], total_steps=[3600.0, 3600.0], kinds=("a",),
                          cpu_curves=None if curves is None else CoreCurves(np.array(POINTS), np.array(curves)))


def replay(workload, split, cluster=SIX_CORES):
    return simulate(workload, cluster, ONE_STEP_A_SECOND, make_policy("fifo"), SimConfig(cpu_split=split))


@pytest.mark.parametrize("split", ["aware", "greedy"])
def test_the_aware_split_finishes_the_sensitive_job_1200_s_sooner(split):
    # proportional: 3 cores each; the sensitive job trains at 0.75 step/s, also once alone (3 cores
    # a GPU still): 3600 / 0.75 = 4800 s. Aware: 4 cores and 1 core, both at full speed: 3600 s.
    even = replay(two_jobs(), "proportional")
    aware = replay(two_jobs(), split)
    assert even.finish_s.tolist() == [4800.0, 3600.0]
    assert aware.finish_s.tolist() == [3600.0, 3600.0]
    assert even.finish_s[0] - aware.finish_s[0] == 1200.0


def test_aware_never_slows_a_job_below_its_proportional_speed_where_greedy_may():
    # 6 cores, 3 a GPU. "quick" gains 0.25 a core up to 4; "slow" 0.1 from 1 to 2 cores, then 0.2.
    # greedy: from 1 core each, the 4 left go to the steepest gains, judged step by step from the
    # start of each curve (slow's later steps count at its first, 0.1): quick 3 more, slow 1 more.
    curves = CoreCurves(np.array(POINTS), np.array([[0.25, 0.5, 1.0, 1.0], [0.1, 0.2, 0.6, 1.0]]))
    workload = dataclasses.replace(two_jobs(), cpu_curves=curves)
    both_on_the_node = np.array([0, 1])
    speeds = {split: CoreDivision.of(workload, SIX_CORES, split).speed(both_on_the_node, np.array([0, 1])).tolist()
              for split in ("proportional", "greedy", "aware")}
    assert speeds["proportional"] == pytest.approx([0.75, 0.4])
    assert speeds["greedy"] == pytest.approx([1.0, 0.2])  # 1.2 GPUs busy, but slow at half its speed
    assert speeds["aware"] == pytest.approx([0.75, 0.4])  # each keeps what its share gave it: nothing spare


def test_the_data_stall_is_the_gpu_time_lost_waiting_for_batches():
    even = replay(two_jobs(), "proportional")
    assert even.data_stall.tolist() == [0.25, 0.0]
    assert even.summary["data_stall"] == pytest.approx(1200.0 / (4800.0 + 3600.0))  # GPU-weighted
    assert even.summary["cpu_split"] == "proportional"
    aware = replay(two_jobs(), "aware")
    assert aware.summary["data_stall"] == 0.0


def test_a_job_on_two_nodes_goes_at_the_pace_of_its_slower_part():
    cluster = Cluster((NodeGroup("v100", 4, 2, cpus_per_node=6), NodeGroup("v100", 2, 2, cpus_per_node=2)))
    curves = CoreCurves(np.array(POINTS), np.array([SENSITIVE, SENSITIVE]))
    division = CoreDivision.of(dataclasses.replace(two_jobs(), cpu_curves=curves), cluster, "proportional")
    gpu_job = np.array([0, -1, 1, -1, 0, -1])  # job 0 on node 0 (3 cores a GPU) and node 2 (1 core a GPU)
    assert division.speed(gpu_job, np.array([1, 0])).tolist() == [0.75, 0.25]


def test_a_replay_without_curves_is_the_same_whatever_the_split():
    plain = two_jobs(curves=None)
    assert CoreDivision.of(plain, SIX_CORES, "aware") is None
    even, aware = replay(plain, "proportional"), replay(plain, "aware")
    assert even.finish_s.tolist() == aware.finish_s.tolist() == [3600.0, 3600.0]
    assert even.data_stall is None and "data_stall" not in even.summary


def test_curves_need_nodes_with_cores_and_a_known_split():
    with pytest.raises(ValueError, match="cpus_per_node"):
        replay(two_jobs(), "aware", cluster=Cluster((NodeGroup("v100", 2, 2),)))
    with pytest.raises(ValueError, match="one of proportional, aware, greedy, got 'even'"):
        replay(two_jobs(), "even")


ONE_GPU_THREE_CORES = Cluster((NodeGroup("v100", 1, 1, cpus_per_node=3),))


@pytest.mark.parametrize("split", ["proportional", "aware"])
def test_srtf_ranks_a_job_by_the_time_it_takes_at_the_cores_it_gets(split):
    # One GPU with 3 cores. The sensitive job has 3000 steps: 3000 s at full speed, but 3 cores give
    # it 0.75 step/s, so 4000 s; the insensitive one has 3600 steps, 3600 s. Ranked at full speed
    # the sensitive job would run first (3000 < 3600): finishes 4000 and 7600, average 5800 s. At
    # the speed it gets it is the longer one: 3600 and 7600, average 5600 s.
    workload = dataclasses.replace(two_jobs(), total_steps=np.array([3000.0, 3600.0]))
    result = simulate(workload, ONE_GPU_THREE_CORES, ONE_STEP_A_SECOND, make_policy("srtf"),
                      SimConfig(cpu_split=split))
    assert result.finish_s.tolist() == [7600.0, 3600.0]
    assert result.summary["avg_jct_s"] == 5600.0
