"""Share by user: the cluster divided among users first, then each user's jobs by the policy.

Every expected number below is worked out by hand in its comment.
"""

from dataclasses import replace

import numpy as np
import pytest

from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies import make_policy
from apportion.policies.by_user import ByUser, parse_user_weights, share_by_user, users_of, water_fill

ORDERING = ["fifo", "las", "srtf", "qssf"]
LP = ["max-min-fairness", "finish-time-fairness", "max-throughput", "min-makespan", "max-min-fairness:space-sharing"]


def view(users, *, running_type=None) -> JobView:
    n = len(users)
    return JobView(
        index=np.arange(n),
        submit_time_s=np.arange(n, dtype=float),  # in the order given: A's backlog first
        kind=np.zeros(n, dtype=np.int64),
        num_gpus=np.ones(n, dtype=np.int64),
        priority=np.ones(n),
        total_steps=np.full(n, 1000.0),
        steps_done=np.zeros(n),
        attained_service_s=np.zeros(n),
        first_start_s=np.full(n, np.nan),
        running_type=np.full(n, -1) if running_type is None else np.asarray(running_type),
        queue=np.full(n, "default", dtype=object),
        user=np.asarray(users, dtype=object),
        now_s=100.0,
        predicted_gpu_s=np.full(n, 1000.0),
        predicted_log_sd=np.full(n, 0.5),
    )


def gpus(gpus_count: int) -> ClusterView:
    return ClusterView(("v100",), np.array([float(gpus_count)]), np.array([np.nan]))


def rates(n: int) -> ThroughputView:
    return ThroughputView(np.ones((n, 1)))


def gpus_held(allocation, jobs: JobView, user: str) -> float:
    """GPUs the user's jobs hold on average (whole GPUs for an ordering policy)."""
    return float((allocation.share[jobs.user == user] * jobs.num_gpus[jobs.user == user, None]).sum())


def policy(spec: str):
    return make_policy(spec, durations="predicted") if spec == "qssf" else make_policy(spec)


@pytest.mark.parametrize("spec", ORDERING + LP)
def test_a_second_user_runs_beside_a_backlog(spec):
    # 4 GPUs; A has 6 one-GPU jobs, B one. Equal shares are 2 each; B needs only 1, so the
    # GPU it leaves goes to A: B's job runs the whole time, A holds 3.
    jobs = view(["A"] * 6 + ["B"])
    allocation = share_by_user(policy(spec)).allocate(jobs, gpus(4), rates(7))
    assert allocation.share[6].sum() == pytest.approx(1.0, abs=1e-6)
    assert gpus_held(allocation, jobs, "A") == pytest.approx(3.0, abs=1e-6)


@pytest.mark.parametrize("spec", ["fifo", "las", "srtf"])
def test_without_it_the_backlog_stands_ahead(spec):
    # The same jobs under the policy alone: A's four earliest jobs take the four GPUs.
    jobs = view(["A"] * 6 + ["B"])
    allocation = policy(spec).allocate(jobs, gpus(4), rates(7))
    assert allocation.share[6].sum() == 0.0
    assert gpus_held(allocation, jobs, "A") == 4.0


@pytest.mark.parametrize("spec", ORDERING + LP)
def test_weights_split_the_cluster(spec):
    # 6 GPUs; A (weight 2) and B (weight 1) have 6 jobs each and both could use all 6:
    # A is entitled to 2/3 of them (4), B to 1/3 (2).
    jobs = view(["A"] * 6 + ["B"] * 6)
    allocation = share_by_user(policy(spec), {"A": 2}).allocate(jobs, gpus(6), rates(12))
    assert gpus_held(allocation, jobs, "A") == pytest.approx(4.0, abs=1e-6)
    assert gpus_held(allocation, jobs, "B") == pytest.approx(2.0, abs=1e-6)


def test_under_fifo_another_users_first_job_preempts_the_backlog():
    # 2 GPUs held by A's running jobs, 3 more of A's waiting, then B's one. fifo alone never
    # preempts; shared by user, B's first job comes before A's second, which gives up its GPU.
    jobs = view(["A"] * 5 + ["B"], running_type=[0, 0, -1, -1, -1, -1])
    alone = make_policy("fifo").allocate(jobs, gpus(2), rates(6))
    assert alone.share[:, 0].tolist() == [1, 1, 0, 0, 0, 0]
    shared = share_by_user(make_policy("fifo")).allocate(jobs, gpus(2), rates(6))
    assert shared.share[:, 0].tolist() == [1, 0, 0, 0, 0, 1]


def test_within_a_user_the_policy_still_decides():
    # las: A's job 0 has attained past the first threshold, so A's job 1 ranks first within A.
    # 2 GPUs, one per user: A's job 1 and B's job.
    jobs = view(["A", "A", "B"])
    jobs.attained_service_s[0] = 10_000.0
    allocation = share_by_user(make_policy("las")).allocate(jobs, gpus(2), rates(3))
    assert allocation.share[:, 0].tolist() == [0, 1, 1]


def test_one_user_is_the_policy_alone():
    jobs = view(["A"] * 5)
    for spec in ("fifo", "max-min-fairness"):
        alone = make_policy(spec).allocate(jobs, gpus(3), rates(5)).share
        shared = share_by_user(make_policy(spec)).allocate(jobs, gpus(3), rates(5)).share
        assert shared == pytest.approx(alone)


def test_water_filling_gives_what_one_leaves_to_the_others():
    # 4 GPUs, demands 6 and 1: equal level 2; B takes its 1, A the other 3.
    assert water_fill(np.array([6.0, 1.0]), np.ones(2), 4.0).tolist() == pytest.approx([3.0, 1.0])
    # 9 GPUs, weights 2:1:1, demands 10, 10, 1: level 9/4 caps the third at 1; the 8 left
    # go 2:1, so 16/3 and 8/3.
    assert water_fill(np.array([10.0, 10.0, 1.0]), np.array([2.0, 1.0, 1.0]), 9.0).tolist() == pytest.approx(
        [16 / 3, 8 / 3, 1.0])
    # more GPUs than anyone needs: each gets its demand
    assert water_fill(np.array([1.0, 2.0]), np.ones(2), 10.0).tolist() == pytest.approx([1.0, 2.0])


def test_policies_that_share_their_own_way_are_left_alone():
    assert ByUser(make_policy("fifo")).mode == "turns"
    assert ByUser(make_policy("max-min-fairness", partitions=2)).mode == "split"
    assert ByUser(make_policy("optimus")).mode == "unchanged"
    assert ByUser(make_policy("goodput")).mode == "unchanged"


@pytest.mark.parametrize(("text", "message"), [
    ("alice", "must be USER=WEIGHT"),
    ("=2", "must be USER=WEIGHT"),
    ("alice=0", "alice's weight must be a positive number, got '0'"),
    ("alice=-1", "alice's weight must be a positive number"),
    ("alice=x", "alice's weight must be a positive number, got 'x'"),
    ("alice=inf", "alice's weight must be a positive number"),
    ("alice=nan", "alice's weight must be a positive number"),
])
def test_bad_weights_are_named(text, message):
    with pytest.raises(ValueError, match=message):
        parse_user_weights(text)


def test_weights_read():
    assert parse_user_weights("alice=2, bob=0.5,") == {"alice": 2.0, "bob": 0.5}


@pytest.mark.parametrize("spec", ["max-min-fairness", "finish-time-fairness"])
def test_a_policy_that_has_solved_already_is_still_shared(spec):
    # its solver cannot be copied per user, so the one policy allocates every user's part
    jobs = view(["A"] * 6 + ["B"])
    used = make_policy(spec)
    used.allocate(jobs, gpus(4), rates(7))
    allocation = share_by_user(used).allocate(jobs, gpus(4), rates(7))
    assert allocation.share[6].sum() == pytest.approx(1.0, abs=1e-6)
    assert gpus_held(allocation, jobs, "A") == pytest.approx(3.0, abs=1e-6)


def test_users_whose_jobs_each_take_the_cluster_take_turns():
    # 4 GPUs; A's jobs take 4 GPUs each, B's one each. Each user's first job has turn 0: A's came
    # first, so it runs; B's jobs do not fit beside it. Once it ends (100 s later), A's next job and
    # B's first tie at turn 0 again, and B, who held nothing, goes first: its jobs take the GPUs.
    policy = share_by_user(make_policy("fifo"))
    jobs = view(["A", "A", "B", "B"])
    jobs.num_gpus[:2] = 4
    first = policy.allocate(jobs, gpus(4), rates(4))
    assert first.share[:, 0].tolist() == [1, 0, 0, 0]
    later = replace(jobs.subset(np.arange(1, 4)), now_s=jobs.now_s + 100.0)
    second = policy.allocate(later, gpus(4), rates(3))
    assert second.share[:, 0].tolist() == [0, 1, 1]


def test_users_are_told_apart_wherever_their_jobs_sit():
    names, user_of = users_of(view(["b", "a", "b", "b", "c", "a"]))
    assert names.tolist() == ["a", "b", "c"] and user_of.tolist() == [1, 0, 1, 1, 2, 0]


def test_many_users_each_get_their_first_job_in():
    # 20 users with two jobs each, all of the first user's first; 20 GPUs: every user's first job
    users = [f"u{i:02d}" for i in range(20) for _ in range(2)]
    jobs = view(users)
    allocation = share_by_user(make_policy("fifo")).allocate(jobs, gpus(20), rates(40))
    assert allocation.share[0::2, 0].tolist() == [1] * 20 and allocation.share[1::2, 0].sum() == 0
