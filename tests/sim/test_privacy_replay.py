"""Jobs that claim privacy budget: held out of the round until their claim is granted, ended
unschedulable when it is rejected. Replays worked out by hand on GPUs at 1 step/s, 360-second
rounds, no start cost; one block of ε 1."""

import numpy as np
from apportion.core.cluster import parse_cluster_shorthand
from apportion.core.jobs import JobTable
from apportion.core.privacy import Blocks, Claims
from apportion.core.throughputs import ThroughputTable
from apportion.policies import make_policy
from apportion.sim import SimConfig, simulate
from apportion.sim.privacy import PrivacySetup
from apportion.sim.result import JobStatus

ONE_STEP_A_SECOND = ThroughputTable(kinds=("a",), gpu_types=("v100",), scales=(1,), steps_per_s=np.array([[[1.0]]]))
BLOCK = Blocks(np.array(["b0"], dtype=object), np.zeros(1), np.ones(1), np.full(1, 1e-6))


def jobs(submit, steps) -> JobTable:
    n = len(submit)
    return JobTable.build(job_id=[chr(ord("A") + i) for i in range(n)], submit_time_s=submit, kind_names=["a"] * n,
                          num_gpus=[1] * n, total_steps=steps, kinds=("a",))


def claims(epsilons) -> Claims:
    """One claim per job on the block (None: the job claims nothing)."""
    asks = [e is not None for e in epsilons]
    start = np.concatenate([[0], np.cumsum(asks)])
    demand = np.array([[e, 0.0] for e in epsilons if e is not None]).reshape(-1, 2)
    return Claims(start, np.zeros(int(start[-1]), dtype=np.int64), demand, np.ones(len(epsilons)))


def replay(table, epsilons, policy, gpus=2, **unlock):
    setup = PrivacySetup(BLOCK, claims(epsilons), policy, **unlock)
    return simulate(table, parse_cluster_shorthand(f"v100:{gpus}"), ONE_STEP_A_SECOND, make_policy("fifo"),
                    SimConfig(restart_cost_s=0.0), privacy=setup.stage())


def test_dpf_t_holds_a_job_until_enough_budget_has_unlocked():
    """A asks for half the block, unlocked over 720 s: at 0 none is, at 360 half: A starts then."""
    result = replay(jobs([0.0], [100.0]), [0.5], "dpf-t", t_s=720.0)
    assert result.first_start_s.tolist() == [360.0]
    assert result.finish_s.tolist() == [460.0]
    assert result.privacy.delay_s.tolist() == [360.0]
    assert result.summary["privacy_granted"] == 1


def test_dpf_n_grants_the_smaller_claim_first_when_the_next_arrival_unlocks_the_rest():
    """N = 2: A (0.6) arrives at 0 with half unlocked and waits; B (0.3) arrives at 100, and at
    the round at 360 all is unlocked: both fit (0.9) and start together; C claims nothing."""
    result = replay(jobs([0.0, 100.0, 100.0], [100.0] * 3), [0.6, 0.3, None], "dpf-n", gpus=3, n=2)
    assert result.first_start_s.tolist() == [360.0, 360.0, 360.0]
    assert result.privacy.words.tolist() == ["granted", "granted", ""]


def test_a_rejected_claim_ends_its_job_unschedulable_with_the_reason():
    """fcfs: A takes 0.7 at once; B's 0.5 can never fit in the 0.3 left."""
    result = replay(jobs([0.0, 0.0], [100.0] * 2), [0.7, 0.5], "fcfs")
    assert result.status.tolist() == [JobStatus.COMPLETED, JobStatus.UNSCHEDULABLE]
    assert result.reasons[1] == "privacy claim cannot be granted: block b0 has not enough budget left"
    assert (result.summary["privacy_granted"], result.summary["privacy_rejected"]) == (1, 1)


def test_a_claim_that_times_out_ends_its_job_and_the_replay_ends():
    """N = 3 and a lone claim of 0.5: a third unlocks and no one else arrives; after the timeout it is rejected."""
    result = replay(jobs([0.0], [100.0]), [0.5], "dpf-n", n=3, timeout_s=1000.0)
    assert result.status.tolist() == [JobStatus.UNSCHEDULABLE]
    assert result.reasons[0] == "privacy claim not granted within 1000 s"


def test_a_claim_that_waits_for_ever_leaves_its_job_unfinished():
    result = replay(jobs([0.0], [100.0]), [0.5], "dpf-n", n=3)
    assert result.summary["privacy_waiting"] == 1
    assert result.summary["unfinished"] == 1



def test_claims_are_decided_at_their_arrival_not_batched_per_round():
    """N = 1, so a block is all unlocked at the first claim. A (0.6) arrives at 10 and is granted
    at once; B (0.5) at 20 can then never fit. Batched at the round at 360 (``decide="round"``),
    DPF would take the smaller B first and reject A: the round changed the decision."""
    table = jobs([10.0, 20.0], [100.0] * 2)
    at_arrival = replay(table, [0.6, 0.5], "dpf-n", n=1)
    assert at_arrival.privacy.words.tolist() == ["granted", "rejected"]
    assert at_arrival.first_start_s[0] == 360.0  # the job still waits for the GPU round
    per_round = replay(table, [0.6, 0.5], "dpf-n", n=1, decide="round")
    assert per_round.privacy.words.tolist() == ["rejected", "granted"]


def test_a_claims_delay_counts_from_its_jobs_arrival():
    """Decided once per round, A (arriving at 10) is granted at the round at 360: it waited 350 s,
    not 0. Decided at arrival, it is granted at 10: 0 s."""
    per_round = replay(jobs([10.0], [100.0]), [0.5], "fcfs", decide="round")
    assert per_round.privacy.delay_s.tolist() == [350.0]
    assert replay(jobs([10.0], [100.0]), [0.5], "fcfs").privacy.delay_s.tolist() == [0.0]


def test_a_claim_of_a_job_run_after_another_arrives_when_that_one_completed():
    """B (submitted at 10) runs after A (0 to 100 s): it is asked again at the next round, at 360,
    and its claim arrives then and is granted at once: a delay of 0, not the 350 s it waited for A."""
    from apportion.core.dependencies import Dependencies

    table = JobTable.build(job_id=["A", "B"], submit_time_s=[0.0, 10.0], kind_names=["a"] * 2, num_gpus=[1] * 2,
                           total_steps=[100.0, 100.0], kinds=("a",), after=Dependencies.of_lists([[], [0]]))
    result = replay(table, [None, 0.5], "fcfs")
    assert result.first_start_s.tolist() == [0.0, 360.0]
    assert result.privacy.delay_s.tolist()[1] == 0.0
