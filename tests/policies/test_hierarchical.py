"""Hierarchical fairness: queues by weight and nominal quota, then each queue's own policy.

Every expected number below is worked out by hand in its comment.
"""

import numpy as np
import pytest

from apportion.core.cluster import parse_cluster_shorthand
from apportion.core.errors import InputError
from apportion.core.jobs import JobTable
from apportion.core.queues import Queue, QueueConfig
from apportion.core.throughputs import ThroughputTable
from apportion.core.views import ClusterView, JobView, ThroughputView
from apportion.policies import make_policy
from apportion.policies.hierarchical import Hierarchical
from apportion.sim import simulate
from apportion.sim.result import JobStatus


def view(queue, *, num_gpus=None, user=None, submit=None, running_type=None) -> JobView:
    n = len(queue)
    return JobView(
        index=np.arange(n),
        submit_time_s=np.arange(n, dtype=float) if submit is None else np.asarray(submit, dtype=float),
        kind=np.zeros(n, dtype=np.int64),
        num_gpus=np.ones(n, dtype=np.int64) if num_gpus is None else np.asarray(num_gpus),
        priority=np.ones(n),
        total_steps=np.full(n, 1000.0),
        steps_done=np.zeros(n),
        attained_service_s=np.zeros(n),
        first_start_s=np.full(n, np.nan),
        running_type=np.full(n, -1) if running_type is None else np.asarray(running_type),
        queue=np.asarray(queue, dtype=object),
        user=np.full(n, "", dtype=object) if user is None else np.asarray(user, dtype=object),
        now_s=100.0,
    )


def cluster(**capacity) -> ClusterView:
    return ClusterView(tuple(capacity), np.asarray(list(capacity.values()), dtype=float), np.full(len(capacity), np.nan))


def rates(n, row) -> ThroughputView:
    return ThroughputView(np.tile(np.asarray(row, dtype=float), (n, 1)))


def config(*queues: Queue) -> QueueConfig:
    return QueueConfig(tuple(queues))


def gpus_of(allocation, jobs, queue_name):
    rows = jobs.queue == queue_name
    return (allocation.share[rows] * jobs.num_gpus[rows, None]).sum(axis=0)


def assert_feasible(allocation, jobs, capacity):
    assert np.all(allocation.share >= 0)
    assert np.all(allocation.share.sum(axis=1) <= 1 + 1e-9)
    assert np.all(allocation.gpus_used(jobs.num_gpus) <= np.asarray(capacity) + 1e-6)


def test_a_queue_with_twice_the_weight_gets_twice_the_share_when_both_are_backlogged():
    # 6 identical one-GPU jobs in each queue, 6 GPUs: weights 2:1 -> 4 and 2 GPUs (2/3 and 1/3)
    jobs = view(["research"] * 6 + ["prod"] * 6)
    policy = make_policy("hierarchical", queues=config(Queue("research", 2.0), Queue("prod", 1.0)))

    allocation = policy.allocate(jobs, cluster(v100=6), rates(12, [1.0]))

    assert gpus_of(allocation, jobs, "research")[0] == pytest.approx(4.0, rel=1e-5)
    assert gpus_of(allocation, jobs, "prod")[0] == pytest.approx(2.0, rel=1e-5)
    # inside each (fair) queue, identical jobs share equally
    np.testing.assert_allclose(allocation.share[:6, 0], 2 / 3, rtol=1e-5)
    np.testing.assert_allclose(allocation.share[6:, 0], 1 / 3, rtol=1e-5)
    assert_feasible(allocation, jobs, [6])


def test_weighted_shares_hold_in_normalised_throughput_on_two_gpu_types():
    # v100:4, k80:4. "a" jobs run 3 steps/s on a v100 and 1 on a k80; "b" jobs 2 and 2.
    # An average GPU does 2 steps/s for both, so normalised a-jobs get [1.5, 0.5], b-jobs [1, 1].
    # Weights 2:1 with a on every v100 (it gains most there) and k80s K_a to a, the rest to b:
    #   U_a = 1.5·4 + 0.5·K_a = 2·U_b = 2·(4 − K_a)  ->  K_a = 0.8, U_a = 6.4, U_b = 3.2.
    jobs = view(["a"] * 6 + ["b"] * 6)
    steps = np.vstack([np.tile([3.0, 1.0], (6, 1)), np.tile([2.0, 2.0], (6, 1))])
    policy = Hierarchical(config(Queue("a", 2.0), Queue("b", 1.0)))

    shares = policy.entitle(jobs, cluster(v100=4, k80=4), ThroughputView(steps))
    allocation = policy.allocate(jobs, cluster(v100=4, k80=4), ThroughputView(steps))

    assert [q.name for q in shares.queues] == ["a", "b"]
    np.testing.assert_allclose(shares.throughput, [6.4, 3.2], rtol=1e-5)
    np.testing.assert_allclose(shares.capacity, [[4.0, 0.8], [0.0, 3.2]], rtol=1e-5, atol=1e-5)
    normalised = ThroughputView(steps).normalised(np.array([4.0, 4.0]))
    u = (allocation.share * normalised * jobs.num_gpus[:, None]).sum(axis=1)
    assert u[:6].sum() == pytest.approx(2 * u[6:].sum(), rel=1e-4)
    assert_feasible(allocation, jobs, [4, 4])


def test_idle_quota_is_lent_and_returned_when_the_lenders_jobs_arrive():
    # 8 GPUs, nominal 4 each. "lender" has no jobs: "borrower" (10 jobs) uses all 8.
    queues = config(Queue("lender", nominal={"v100": 4}), Queue("borrower", nominal={"v100": 4}))
    policy = make_policy("hierarchical", queues=queues)
    only_borrower = view(["borrower"] * 10)
    allocation = policy.allocate(only_borrower, cluster(v100=8), rates(10, [1.0]))
    assert gpus_of(allocation, only_borrower, "borrower")[0] == pytest.approx(8.0, rel=1e-5)

    # two lender jobs arrive: the next allocation gives it min(4, 2) = 2 back, borrower keeps 6
    two = view(["borrower"] * 10 + ["lender"] * 2)
    allocation = policy.allocate(two, cluster(v100=8), rates(12, [1.0]))
    assert gpus_of(allocation, two, "lender")[0] == pytest.approx(2.0, rel=1e-5)
    assert gpus_of(allocation, two, "borrower")[0] == pytest.approx(6.0, rel=1e-5)

    # six lender jobs: its whole quota of 4 comes back, and the borrower is down to its own 4
    six = view(["borrower"] * 10 + ["lender"] * 6)
    allocation = policy.allocate(six, cluster(v100=8), rates(16, [1.0]))
    assert gpus_of(allocation, six, "lender")[0] == pytest.approx(4.0, rel=1e-5)
    assert gpus_of(allocation, six, "borrower")[0] == pytest.approx(4.0, rel=1e-5)
    assert_feasible(allocation, six, [8])


def test_quota_comes_first_and_only_the_rest_is_shared_by_weight():
    # 8 GPUs; "q" has nominal 4 and weight 1, "w" no quota and weight 3, both backlogged.
    # q gets its 4 first; the other 4 are split 1:3 -> q 4 + 1 = 5, w 3.
    jobs = view(["q"] * 10 + ["w"] * 10)
    policy = Hierarchical(config(Queue("q", 1.0, nominal={"v100": 4}), Queue("w", 3.0)))

    shares = policy.entitle(jobs, cluster(v100=8), rates(20, [1.0]))

    np.testing.assert_allclose(shares.guarantee, [4.0, 0.0], rtol=1e-5)
    np.testing.assert_allclose(shares.capacity[:, 0], [5.0, 3.0], rtol=1e-5)


def test_a_queue_that_does_not_borrow_stays_within_its_quota_and_still_lends():
    # "strict" (nominal 2, borrowing false, 5 jobs) gets exactly 2; "open" takes the other 6
    jobs = view(["strict"] * 5 + ["open"] * 10)
    policy = Hierarchical(config(Queue("strict", nominal={"v100": 2}, borrowing=False), Queue("open")))

    allocation = policy.allocate(jobs, cluster(v100=8), rates(15, [1.0]))

    assert gpus_of(allocation, jobs, "strict")[0] == pytest.approx(2.0, rel=1e-5)
    assert gpus_of(allocation, jobs, "open")[0] == pytest.approx(6.0, rel=1e-5)


def test_a_queue_with_less_demand_than_its_share_leaves_the_rest_to_the_others():
    # weights 1:1 on 8 GPUs, but "small" has one job: it gets 1, "big" gets 7
    jobs = view(["small"] + ["big"] * 10)
    policy = Hierarchical(config(Queue("small"), Queue("big")))

    allocation = policy.allocate(jobs, cluster(v100=8), rates(11, [1.0]))

    assert allocation.share[0, 0] == pytest.approx(1.0, rel=1e-5)
    assert gpus_of(allocation, jobs, "big")[0] == pytest.approx(7.0, rel=1e-5)


def test_fifo_inside_a_queue_runs_its_oldest_job_first():
    # weights 1:1 on 3 GPUs -> 1.5 GPUs each. The fifo queue's oldest job gets a whole GPU,
    # the next one the half that is left (a time share), the youngest nothing.
    jobs = view(["line"] * 3 + ["fair"] * 3, submit=[5.0, 1.0, 3.0, 0.0, 0.0, 0.0])
    policy = Hierarchical(config(Queue("line", policy="fifo"), Queue("fair")))

    allocation = policy.allocate(jobs, cluster(v100=3), rates(6, [1.0]))

    np.testing.assert_allclose(allocation.share[:3, 0], [0.0, 1.0, 0.5], atol=1e-5)
    np.testing.assert_allclose(allocation.share[3:, 0], [0.5, 0.5, 0.5], rtol=1e-5)
    assert_feasible(allocation, jobs, [3])


def test_fifo_inside_a_queue_keeps_a_running_job_before_an_older_waiting_one():
    # Fifo is non-preemptive: the running (younger) job keeps its GPU
    jobs = view(["line"] * 2, submit=[0.0, 1.0], running_type=[-1, 0])
    policy = Hierarchical(config(Queue("line", policy="fifo")))

    allocation = policy.allocate(jobs, cluster(v100=1), rates(2, [1.0]))

    np.testing.assert_allclose(allocation.share[:, 0], [0.0, 1.0])


def test_users_within_a_queue_share_it_equally():
    # one queue, 2 GPUs: alice has one job, bob three. Each user gets 1 GPU: alice's job 1,
    # each of bob's 1/3.
    jobs = view(["team"] * 4, user=["alice", "bob", "bob", "bob"])
    policy = Hierarchical(config(Queue("team")))

    allocation = policy.allocate(jobs, cluster(v100=2), rates(4, [1.0]))

    np.testing.assert_allclose(allocation.share[:, 0], [1.0, 1 / 3, 1 / 3, 1 / 3], rtol=1e-5)


def test_jobs_of_unlisted_queues_share_the_default_queue():
    # "x" and "y" are not listed: together they are the default queue "" (weight 1) against
    # "listed" (weight 1): 2 GPUs each of 4
    jobs = view(["listed"] * 4 + ["x"] * 2 + ["y"] * 2)
    policy = Hierarchical(config(Queue("listed")))

    shares = policy.entitle(jobs, cluster(v100=4), rates(8, [1.0]))

    assert [q.name for q in shares.queues] == ["listed", ""]
    np.testing.assert_allclose(shares.capacity[:, 0], [2.0, 2.0], rtol=1e-5)


def test_the_combined_allocation_is_feasible_on_a_mixed_workload():
    rng = np.random.default_rng(7)
    n = 60
    queue = rng.choice(["a", "b", "c", "d", "other"], size=n)
    num_gpus = rng.choice([1, 2, 4], size=n)
    steps = rng.uniform(0.5, 4.0, size=(n, 3)) * (rng.random((n, 3)) > 0.2)
    steps[:, 0] = np.maximum(steps[:, 0], 0.5)  # everyone can run somewhere
    jobs = view(queue, num_gpus=num_gpus, user=rng.choice(["u", "v"], size=n), submit=rng.uniform(0, 100, n))
    queues = config(
        Queue("a", 2.0, "fair", {"v100": 4, "k80": 2}),
        Queue("b", 1.0, "fifo", {"p100": 3}),
        Queue("c", 0.5, "fifo", {"v100": 2}, borrowing=False),
        Queue("d", 3.0, "fair"),
    )
    capacity = {"v100": 8, "p100": 6, "k80": 5}
    policy = make_policy("hierarchical", queues=queues)

    allocation = policy.allocate(jobs, cluster(**capacity), ThroughputView(steps))

    assert_feasible(allocation, jobs, list(capacity.values()))
    # every queue gets what its quota is worth to it, and the cluster is busy
    c_rows = jobs.queue == "c"
    assert np.all(allocation.gpus_used(jobs.num_gpus)[:] <= np.array([8, 6, 5]) + 1e-6)
    assert allocation.gpus_used(jobs.num_gpus).sum() > 0.9 * sum(capacity.values())
    assert (allocation.share[c_rows] * jobs.num_gpus[c_rows, None])[:, 1:].sum() == pytest.approx(0.0, abs=1e-9)


def test_hierarchical_needs_a_queues_config():
    with pytest.raises(ValueError, match="hierarchical needs --queues FILE"):
        make_policy("hierarchical")


def test_a_nominal_gpu_type_missing_from_the_cluster_is_named():
    queues = QueueConfig((Queue("a", nominal={"a100": 2}),), source="q.yaml", lines={"queues[0].nominal.a100": 4})
    policy = Hierarchical(queues)

    with pytest.raises(InputError, match=r"q.yaml:4: field 'queues\[0\].nominal.a100': .*'a100'.*cluster: v100"):
        policy.allocate(view(["a"]), cluster(v100=2), rates(1, [1.0]))


def test_nominal_quotas_beyond_the_cluster_are_refused():
    queues = QueueConfig((Queue("a", nominal={"v100": 2}), Queue("b", nominal={"v100": 3})))
    with pytest.raises(InputError, match="nominal quotas of 'v100' add up to 5 GPUs but the cluster has 4"):
        queues.check_cluster(("v100",), np.array([4]))


# --- a whole replay -----------------------------------------------------------------------

SCALES = (1, 2, 4, 8)
ONE_STEP_A_SECOND = ThroughputTable(
    kinds=("a",), gpu_types=("v100",), scales=SCALES,
    steps_per_s=np.array(SCALES, dtype=float)[None, None, :],
)


def table(submit, queue, steps, num_gpus=None) -> JobTable:
    n = len(submit)
    return JobTable.build(
        job_id=[f"job-{i}" for i in range(n)],
        submit_time_s=submit,
        kind_names=["a"] * n,
        num_gpus=num_gpus or [1] * n,
        total_steps=steps,
        queue=queue,
        kinds=("a",),
    )


def test_a_replay_with_queues_completes_every_job():
    jobs = table([0.0, 0.0, 0.0, 100.0, 200.0, 400.0], ["a", "a", "b", "b", "c", "a"],
                 [3600.0, 1800.0, 7200.0, 900.0, 3600.0, 360.0], [1, 2, 1, 1, 2, 1])
    queues = config(Queue("a", 2.0, nominal={"v100": 2}), Queue("b", 1.0, "fifo"))
    result = simulate(jobs, parse_cluster_shorthand("v100:4"), ONE_STEP_A_SECOND,
                      make_policy("hierarchical", queues=queues))

    assert result.status.tolist() == [JobStatus.COMPLETED] * 6
    np.testing.assert_allclose(result.steps_done, jobs.total_steps)


def test_a_replay_gives_the_lenders_quota_back_at_the_next_round():
    # v100:2. "lender" (nominal 1) is idle until 1000 s; "borrower" runs two long jobs on both
    # GPUs. The lender's job starts at the first round after it arrives (1080 s) and then holds
    # its GPU all the time: it ends at 1080 + 3600.
    jobs = table([0.0, 0.0, 1000.0], ["borrower", "borrower", "lender"], [20000.0, 20000.0, 3600.0])
    queues = config(Queue("lender", nominal={"v100": 1}), Queue("borrower", nominal={"v100": 1}))
    result = simulate(jobs, parse_cluster_shorthand("v100:2"), ONE_STEP_A_SECOND,
                      make_policy("hierarchical", queues=queues))

    assert result.first_start_s.tolist() == [0.0, 0.0, 1080.0]
    assert result.finish_s[2] == pytest.approx(1080.0 + 3600.0)
    assert result.status.tolist() == [JobStatus.COMPLETED] * 3


def test_a_job_larger_than_its_non_borrowing_queues_quota_is_unschedulable_not_left_waiting():
    # "small" may not borrow and holds 1 v100: its 2-GPU job can never run. "open" borrows and
    # has no quota at all, so its 2-GPU job runs on what is idle. The first is reported
    # unschedulable on arrival; the others complete.
    jobs = table([0.0, 0.0, 0.0], ["small", "small", "open"], [3600.0, 3600.0, 3600.0], [2, 1, 2])
    queues = config(Queue("small", nominal={"v100": 1}, borrowing=False), Queue("open"))
    policy = make_policy("hierarchical", queues=queues)

    never = policy.never_runs(view(["small", "small", "open"], num_gpus=[2, 1, 2]), cluster(v100=4), rates(3, [1.0]))
    result = simulate(jobs, parse_cluster_shorthand("v100:4"), ONE_STEP_A_SECOND, policy)

    assert never.tolist() == [True, False, False]
    assert result.status.tolist() == [JobStatus.UNSCHEDULABLE, JobStatus.COMPLETED, JobStatus.COMPLETED]
    assert result.summary["unschedulable"] == 1 and result.summary["unfinished"] == 0
