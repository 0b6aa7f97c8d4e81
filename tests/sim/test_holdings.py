"""Who held which GPUs when (SimResult.holdings, what report.html's Gantt chart draws): replays
worked out by hand, and on a seeded workload the same time, preemptions and moves the result counts."""

import numpy as np
import pytest

from apportion.core.cluster import parse_cluster_shorthand
from apportion.core.jobs import JobTable
from apportion.core.throughputs import ThroughputTable
from apportion.experiment import WorkloadSettings, load_inputs, run_policy
from apportion.policies import make_policy
from apportion.sim import SimConfig, simulate

# one step a second on a v100, half that on a k80
SPEEDS = ThroughputTable(kinds=("a",), gpu_types=("v100", "k80"), scales=(1, 2),
                         steps_per_s=np.array([[[1.0, 2.0], [0.5, 1.0]]]))
TWO_JOBS = JobTable.build(job_id=["a", "b"], submit_time_s=[0, 0], kind_names=["a", "a"], num_gpus=[1, 1],
                          total_steps=[1000, 1000], kinds=("a",))
ROUNDS = SimConfig(round_s=360, restart_cost_s=0)


def segments(holdings) -> list[tuple[int, int, float, float]]:
    return list(zip(holdings.job.tolist(), holdings.gpu_type.tolist(), holdings.start_s.tolist(),
                    holdings.end_s.tolist()))


def test_a_replay_records_nothing_unless_asked():
    result = simulate(TWO_JOBS, parse_cluster_shorthand("v100:1"), SPEEDS, make_policy("fifo"), ROUNDS)

    assert result.holdings is None


def test_two_jobs_sharing_one_gpu_take_turns_a_round_each():
    # max-min fairness gives each half the GPU: a runs rounds 0, 2, 4 (done at 1440 + 280),
    # b rounds 1, 3 and, once a has finished, the round from 1800 (done at 1800 + 280)
    result = simulate(TWO_JOBS, parse_cluster_shorthand("v100:1"), SPEEDS, make_policy("max-min-fairness"), ROUNDS,
                      record_holdings=True)
    holdings = result.holdings

    assert segments(holdings) == [
        (0, 0, 0.0, 360.0), (0, 0, 720.0, 1080.0), (0, 0, 1440.0, 1720.0),
        (1, 0, 360.0, 720.0), (1, 0, 1080.0, 1440.0), (1, 0, 1800.0, 2080.0),
    ]
    assert list(zip(holdings.preempted_job.tolist(), holdings.preempted_s.tolist())) == [
        (0, 360.0), (1, 720.0), (0, 1080.0), (1, 1440.0)]
    assert holdings.moved_job.tolist() == []
    assert holdings.busy_by_type.tolist() == [[1]] * len(result.timeline)


def test_jobs_that_swap_gpu_types_every_round_are_moves_with_a_segment_per_type():
    # each job alternates v100 (1 step/s) and k80 (0.5 step/s): a finishes its last 100 steps on
    # the k80 from 1080 (at 1280), b its last 280 on the v100 (at 1360)
    result = simulate(TWO_JOBS, parse_cluster_shorthand("v100:1,k80:1"), SPEEDS, make_policy("max-min-fairness"),
                      ROUNDS, record_holdings=True)
    holdings = result.holdings

    assert segments(holdings) == [
        (0, 0, 0.0, 360.0), (0, 1, 360.0, 720.0), (0, 0, 720.0, 1080.0), (0, 1, 1080.0, 1280.0),
        (1, 1, 0.0, 360.0), (1, 0, 360.0, 720.0), (1, 1, 720.0, 1080.0), (1, 0, 1080.0, 1360.0),
    ]
    assert list(zip(holdings.moved_job.tolist(), holdings.moved_s.tolist())) == [
        (0, 360.0), (1, 360.0), (0, 720.0), (1, 720.0), (0, 1080.0), (1, 1080.0)]
    assert holdings.preempted_job.tolist() == []
    assert holdings.busy_by_type.tolist() == [[1, 1]] * 4


@pytest.mark.parametrize("policy", ["las", "max-min-fairness"])
def test_holdings_add_up_to_what_the_result_counts(policy):
    inputs = load_inputs(WorkloadSettings(jobs=80, rate_per_hour=30, cluster="v100:4,p100:4,k80:4"))
    result = run_policy(inputs, policy, record_holdings=True)
    holdings, n = result.holdings, len(result.jobs)

    held = np.zeros_like(result.time_on_type)
    np.add.at(held, (holdings.job, holdings.gpu_type), holdings.end_s - holdings.start_s)
    assert held == pytest.approx(result.time_on_type, abs=1e-6)
    assert np.all(holdings.end_s > holdings.start_s)
    finished = np.isfinite(result.finish_s[holdings.job])
    assert np.all(holdings.end_s[finished] <= result.finish_s[holdings.job][finished] + 1e-9)
    assert np.bincount(holdings.preempted_job, minlength=n).tolist() == result.preemptions.tolist()
    assert np.bincount(holdings.moved_job, minlength=n).tolist() == result.moves.tolist()
    assert holdings.busy_by_type.sum(axis=1).tolist() == result.timeline[:, 1].astype(int).tolist()
