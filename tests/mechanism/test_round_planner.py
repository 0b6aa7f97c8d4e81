"""The round planner: one round, from the jobs' state to who runs where, on small cases worked
out by hand. The policies here are stand-ins that hand back a fixed allocation and count how
often they are asked, so that what is checked is the planner's part: when it asks, Gavel's
priorities, placement, leases kept or lost, pairs, and GPU counts a policy chooses."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from apportion.core.allocation import Allocation
from apportion.core.cluster import parse_cluster_shorthand
from apportion.core.views import JobView
from apportion.mechanism.pair_clock import PairClock
from apportion.mechanism.round_planner import RoundPlanner, RoundState

ONE_V100_ONE_K80 = parse_cluster_shorthand("v100:1,k80:1")  # GPU 0 is the v100, GPU 1 the k80
ONE_V100 = parse_cluster_shorthand("v100:1")
TWO_V100 = parse_cluster_shorthand("v100:2")


def round_state(now_s: float, *, submit=(0.0,), time_alone=None, holder=(-1,), partner=None, num_gpus=None,
                index=None, num_types: int = 1, rates_version: int = 0) -> RoundState:
    """A round's state: jobs submitted at ``submit``, having held each type alone for ``time_alone``
    seconds ([n, T], default none), GPUs held by ``holder`` (positions, -1 idle) and shared by
    ``partner``; every job runs 1 step/s anywhere."""
    n = len(submit)
    index = np.arange(n) if index is None else np.asarray(index)
    holder = np.asarray(holder, dtype=np.int64)
    jobs = JobView(
        index=index, submit_time_s=np.asarray(submit, dtype=float), kind=np.zeros(n, dtype=np.int64),
        num_gpus=np.ones(n, dtype=np.int64) if num_gpus is None else np.asarray(num_gpus, dtype=np.int64),
        priority=np.ones(n), total_steps=np.full(n, 1e6), steps_done=np.zeros(n), attained_service_s=np.zeros(n),
        first_start_s=np.full(n, np.nan), running_type=np.full(n, -1), queue=np.full(n, ""), user=np.full(n, ""),
        now_s=now_s,
    )
    return RoundState(
        jobs=jobs, rates=np.ones((n, num_types)),
        time_alone_s=np.zeros((n, num_types)) if time_alone is None else np.asarray(time_alone, dtype=float),
        holder=holder, partner=np.full(len(holder), -1) if partner is None else np.asarray(partner, dtype=np.int64),
        rates_version=rates_version,
    )


class FixedShares:
    """A policy that allocates ``share`` ([n, T]) whatever it is shown, and counts the times it is asked."""

    def __init__(self, share, *, change_in_s: float = math.inf, pairs=None, pair_share=None, num_gpus=None,
                 space_sharing: bool = False, never=None) -> None:
        self.share = np.asarray(share, dtype=float)
        self.change_in_s = change_in_s
        self.pairs, self.pair_share = pairs, pair_share
        self.num_gpus = num_gpus
        self.space_sharing = space_sharing
        self.never = never
        self.calls = 0
        self.seen_capacity = None

    def allocate(self, jobs, cluster, throughputs) -> Allocation:
        self.calls += 1
        self.seen_capacity = cluster.capacity.tolist()
        pairs = None if self.pairs is None else np.asarray(self.pairs)
        pair_share = None if self.pair_share is None else np.asarray(self.pair_share, dtype=float)
        num_gpus = None if self.num_gpus is None else np.asarray(self.num_gpus)
        return Allocation(jobs.index, self.share, pairs, pair_share, num_gpus=num_gpus)

    def next_change_s(self, jobs, running) -> float:
        return self.change_in_s

    def never_runs(self, jobs, cluster, throughputs):
        self.seen_capacity = cluster.capacity.tolist()
        return np.asarray(self.never)


def test_a_job_alone_runs_on_the_type_it_is_allocated_and_starts_afresh():
    planner = RoundPlanner(FixedShares([[0.0, 1.0]]), ONE_V100_ONE_K80)

    decision = planner.plan(round_state(0.0, num_types=2))

    assert decision.chosen_type.tolist() == [1]
    assert decision.owner.tolist() == [-1, 0]  # the k80
    assert decision.second.tolist() == [-1, -1] and decision.partner.tolist() == [-1]
    assert decision.kept.tolist() == [False] and decision.was_running.tolist() == [False]
    assert decision.moved.tolist() == [False] and decision.preempted.tolist() == [False]
    assert decision.resolved and decision.reallocate_at == math.inf
    assert decision.num_gpus is None and decision.gpus_of(round_state(0.0).jobs).tolist() == [1]


def test_the_job_furthest_behind_its_share_runs():
    """One GPU, a third each, the received share counted from arrival. At 400 s job 0 (in the
    system 400 s) has held it 300 s: received 0.75, priority 1/3 ÷ 0.75 = 0.44; job 1 (since
    200 s) held it 50 s: 0.25, priority 1.33; job 2 (since 300 s) 50 s: 0.5, priority 0.67. Job 1 runs."""
    planner = RoundPlanner(FixedShares(np.full((3, 1), 1 / 3)), ONE_V100, received_since="arrival")

    decision = planner.plan(round_state(400.0, submit=[0.0, 200.0, 300.0], time_alone=[[300.0], [50.0], [50.0]],
                                        holder=[0]))

    assert decision.chosen_type.tolist() == [-1, 0, -1]
    assert decision.owner.tolist() == [1]
    assert decision.preempted.tolist() == [True, False, False]  # job 0 held the GPU and gives it up


def test_a_job_that_keeps_its_gpus_keeps_its_lease():
    planner = RoundPlanner(FixedShares([[1.0, 0.0]]), ONE_V100_ONE_K80)

    decision = planner.plan(round_state(100.0, time_alone=[[100.0, 0.0]], holder=[0, -1], num_types=2))

    assert decision.owner.tolist() == [0, -1]
    assert decision.was_running.tolist() == [True] and decision.kept.tolist() == [True]
    assert decision.moved.tolist() == [False] and decision.preempted.tolist() == [False]


def test_a_job_given_another_type_moves():
    """Job 0 holds the k80 and is allocated the v100: it runs, but not on the GPU it held."""
    planner = RoundPlanner(FixedShares([[1.0, 0.0]]), ONE_V100_ONE_K80)

    decision = planner.plan(round_state(100.0, time_alone=[[0.0, 100.0]], holder=[-1, 0], num_types=2))

    assert decision.chosen_type.tolist() == [0]
    assert decision.owner.tolist() == [0, -1]
    assert decision.kept.tolist() == [False] and decision.moved.tolist() == [True]


def test_a_job_allocated_nothing_is_preempted_and_its_gpu_goes_to_the_one_that_waited():
    planner = RoundPlanner(FixedShares([[0.0], [1.0]]), ONE_V100)

    decision = planner.plan(round_state(100.0, submit=[0.0, 50.0], time_alone=[[100.0], [0.0]], holder=[0]))

    assert decision.chosen_type.tolist() == [-1, 0]
    assert decision.owner.tolist() == [1]
    assert decision.preempted.tolist() == [True, False]
    assert decision.moved.tolist() == [False, False] and decision.kept.tolist() == [False, False]


def test_the_policy_is_asked_again_only_when_the_jobs_the_cluster_or_the_speeds_change():
    policy = FixedShares([[1.0]])
    planner = RoundPlanner(policy, ONE_V100)

    assert planner.plan(round_state(0.0)).resolved and policy.calls == 1
    assert not planner.plan(round_state(100.0, holder=[0])).resolved  # nothing changed: the mechanism alone
    assert policy.calls == 1
    assert planner.plan(round_state(200.0, holder=[0], rates_version=1)).resolved  # speeds measured anew
    assert not planner.plan(round_state(300.0, holder=[0], rates_version=1)).resolved
    assert planner.plan(round_state(400.0, holder=[0], index=[7], rates_version=1)).resolved  # another job
    assert planner.plan(round_state(500.0, holder=[0], index=[7], rates_version=1), TWO_V100).resolved
    assert policy.calls == 4


def test_the_policy_is_asked_again_when_it_said_its_answer_would_change_by_then():
    """It answers at 0 s that its answer may change in 250 s: rounds at 100 s and 200 s only run
    the mechanism (and do not put that off), the round at 300 s asks again."""
    policy = FixedShares([[1.0]], change_in_s=250.0)
    planner = RoundPlanner(policy, ONE_V100)

    assert planner.plan(round_state(0.0)).reallocate_at == 250.0
    assert [planner.plan(round_state(t, holder=[0])).resolved for t in (100.0, 200.0, 300.0)] == [False, False, True]
    assert policy.calls == 2
    assert planner.plan(round_state(400.0, holder=[0])).reallocate_at == 550.0


def test_invalidate_asks_the_policy_again_next_round():
    policy = FixedShares([[1.0]])
    planner = RoundPlanner(policy, ONE_V100)
    planner.plan(round_state(0.0))

    planner.invalidate()

    assert planner.plan(round_state(100.0, holder=[0])).resolved and policy.calls == 2


def pair_planner() -> RoundPlanner:
    """One GPU: jobs 10 and 11 share it half the time, job 12 has it alone the other half; the
    received share counted from arrival."""
    policy = FixedShares([[0.0], [0.0], [0.5]], pairs=[[0, 1]], pair_share=[[0.5]], space_sharing=True)
    return RoundPlanner(policy, ONE_V100, pair_rates=np.ones((1, 1, 1)), received_since="arrival")


def together(state: RoundState, pair_seconds: float) -> RoundState:
    """``state`` in which jobs 10 and 11 have run together ``pair_seconds`` on the v100."""
    clock = PairClock(1)
    clock.add(np.array([[10, 11]]), np.array([0]), np.array([pair_seconds]))
    return replace(state, together=clock)


def test_a_pair_that_ran_together_less_than_its_share_takes_the_gpu_together():
    """The pair ran 100 s of 400 (0.25 of its 0.5 share: priority 2); job 12 alone 300 s (0.75: 0.67)."""
    state = round_state(400.0, submit=[0.0, 0.0, 0.0], index=[10, 11, 12], time_alone=[[0.0], [0.0], [300.0]],
                        holder=[2])

    decision = pair_planner().plan(together(state, 100.0))

    assert decision.chosen_type.tolist() == [0, 0, -1]
    assert decision.partner.tolist() == [1, 0, -1]
    assert decision.owner.tolist() == [0] and decision.second.tolist() == [1]
    assert decision.preempted.tolist() == [False, False, True]


def test_a_pair_that_ran_together_more_than_its_share_waits_for_the_job_alone():
    """The pair ran 300 s of 400 (priority 0.67); job 12 alone 100 s (priority 2)."""
    state = round_state(400.0, submit=[0.0, 0.0, 0.0], index=[10, 11, 12], time_alone=[[0.0], [0.0], [100.0]],
                        holder=[0], partner=[1])

    decision = pair_planner().plan(together(state, 300.0))

    assert decision.chosen_type.tolist() == [-1, -1, 0]
    assert decision.partner.tolist() == [-1, -1, -1]
    assert decision.owner.tolist() == [2] and decision.second.tolist() == [-1]
    assert decision.preempted.tolist() == [True, True, False]


def test_a_pair_that_keeps_sharing_its_gpu_keeps_its_leases():
    state = round_state(400.0, submit=[0.0, 0.0, 0.0], index=[10, 11, 12], time_alone=[[0.0], [0.0], [300.0]],
                        holder=[0], partner=[1])

    decision = pair_planner().plan(together(state, 100.0))

    assert decision.kept.tolist() == [True, True, False]


def test_a_policy_that_sizes_jobs_runs_them_on_the_gpus_it_chose():
    """The job asks for one GPU; the policy gives it two, and both are its own this round."""
    planner = RoundPlanner(FixedShares([[1.0]], num_gpus=[2]), TWO_V100)
    state = round_state(0.0)

    decision = planner.plan(state)

    assert decision.owner.tolist() == [0, 0]
    assert decision.num_gpus.tolist() == [2] and decision.gpus_of(state.jobs).tolist() == [2]


def test_never_runs_is_the_policys_word_over_the_planners_cluster():
    policy = FixedShares([[1.0], [1.0]], never=[False, True])
    planner = RoundPlanner(policy, TWO_V100)
    jobs = round_state(0.0, submit=[0.0, 0.0]).jobs

    assert planner.never_runs(jobs, np.ones((2, 1))).tolist() == [False, True]
    assert policy.seen_capacity == [2]
    assert planner.never_runs(jobs, np.ones((2, 1)), ONE_V100).tolist() == [False, True]
    assert policy.seen_capacity == [1]


def test_a_policy_that_does_not_say_never_rules_a_job_out():
    class Silent:
        def allocate(self, jobs, cluster, throughputs):
            raise AssertionError("never_runs does not allocate")

    planner = RoundPlanner(Silent(), TWO_V100)

    assert planner.never_runs(round_state(0.0, submit=[0.0, 0.0]).jobs, np.ones((2, 1))).tolist() == [False, False]


# the received share from the last change of allocation (Gavel's rule) against from arrival

HALF_EACH = [[0.5], [0.5]]


def rounds_on_one_gpu(received_since: str) -> list[int]:
    """Jobs A and B, both in since t = 0, each allocated half of one v100. The policy first answers at
    t = 600, when A has held the GPU 100 s and B 500 s; by t = 800, A has run the 200 s since.
    Returns the job that runs at 600 and at 800 (0 = A, 1 = B)."""
    planner = RoundPlanner(FixedShares(HALF_EACH), ONE_V100, received_since=received_since)
    at_600 = planner.plan(round_state(600.0, submit=(0.0, 0.0), time_alone=[[100.0], [500.0]], holder=(1,)))
    at_800 = planner.plan(round_state(800.0, submit=(0.0, 0.0), time_alone=[[300.0], [500.0]], holder=(0,)))
    assert not at_800.resolved  # the same jobs and speeds: the policy is not asked again
    return [int(np.flatnonzero(d.chosen_type == 0)[0]) for d in (at_600, at_800)]


def test_from_arrival_the_job_that_held_less_of_its_whole_time_runs():
    # at 600: A 100/600 = 1/6 → priority 0.5 / (1/6) = 3; B 500/600 → 0.6: A runs
    # at 800: A 300/800 = 0.375 → 1.33; B 500/800 = 0.625 → 0.8: A runs again
    assert rounds_on_one_gpu("arrival") == [0, 0]


def test_from_the_last_allocation_the_job_that_held_nothing_since_runs():
    # at 600 the policy answers: both have held nothing since, equal priorities, A (first) runs
    # at 800: A 200/200 = 1 → priority 0.5; B 0/200 → 0.5 / 1e-9: B runs
    assert rounds_on_one_gpu("allocation") == [0, 1]
