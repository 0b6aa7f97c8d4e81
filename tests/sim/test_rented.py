"""Replays on a rented cluster, worked out by hand: one job at 1 step/s on one-V100 instances, hourly rounds."""

import numpy as np
import pytest

from apportion.core.jobs import JobTable
from apportion.core.market import ON_DEMAND, SPOT, Market
from apportion.core.throughputs import ThroughputTable
from apportion.policies.provisioning import make_provisioning
from apportion.sim import SimConfig
from apportion.sim.rented import RentalConfig, simulate_rented

ONE_STEP_PER_S = ThroughputTable(("k",), ("v100",), (1,), np.ones((1, 1, 1)))
HOURLY = SimConfig(round_s=3600.0, restart_cost_s=60.0)
NO_TRANSFER = RentalConfig(checkpoint_gb=0.0)


def market(prices, markets, regions=None, preempt=(), times=(0.0, 3600.0, 7200.0)) -> Market:
    k = len(prices)
    return Market(
        name=np.array([f"i{i}" for i in range(k)], dtype=object), cloud=np.full(k, "aws", dtype=object),
        region=np.array(regions or ["us-east-1"] * k, dtype=object), gpu_type=np.full(k, "v100", dtype=object),
        gpus=np.ones(k, dtype=np.int64), market=np.array(markets), times_s=np.array(times),
        price_per_hour=np.array(prices, dtype=np.float64),
        preempt_type=np.array([t for t, _ in preempt], dtype=np.int64), preempt_s=np.array([s for _, s in preempt]),
        egress_usd_per_gb=np.full(k, 0.09), inter_region_usd_per_gb=np.full(k, 0.02),
    )


def one_job(steps: float, deadline_s: float | None = None, budget_usd: float | None = None) -> JobTable:
    return JobTable.build(job_id=["j"], submit_time_s=[0.0], kind_names=["k"], num_gpus=[1], total_steps=[steps],
                          kinds=("k",), deadline_after_submit_s=None if deadline_s is None else [deadline_s],
                          budget_usd=None if budget_usd is None else [budget_usd])


def replay(prices, markets, policy, jobs, rental=NO_TRANSFER, **kwargs):
    return simulate_rented(jobs, market(prices, markets, **kwargs), ONE_STEP_PER_S, make_provisioning(policy),
                           HOURLY, rental)


# A: $2/h always; B: $4/h for the first hour, then $1/h
TWO_ON_DEMAND = [[2.0, 2.0, 2.0], [4.0, 1.0, 1.0]]


def test_static_keeps_the_cheapest_on_demand_type_of_the_start():
    result = replay(TWO_ON_DEMAND, [ON_DEMAND, ON_DEMAND], "static", one_job(3 * 3600))
    assert result.finish_s[0] == 10800.0
    assert result.summary["dollars"] == pytest.approx(6.0)  # three hours on A
    assert result.summary["dollars_by_type"] == {"aws/us-east-1/i0/on-demand": pytest.approx(6.0)}


def test_cheapest_now_switches_once_and_the_dollars_add_up():
    result = replay(TWO_ON_DEMAND, [ON_DEMAND, ON_DEMAND], "cheapest-now", one_job(3 * 3600))
    # an hour on A ($2), then at 3600 s B finishes the 7200 steps left for (60 + 7200) s × $1/h
    assert result.moves[0] == 1
    assert result.finish_s[0] == 3600 + 60 + 7200
    assert result.summary["dollars"] == pytest.approx(2.0 + 7260 / 3600)
    assert result.summary["dollars_on_demand"] == pytest.approx(2.0 + 7260 / 3600)


def test_a_move_to_another_region_pays_the_transfer_and_its_egress():
    rental = RentalConfig(checkpoint_gb=10.0, transfer_gbps=1.0)  # 80 s, 10 GB × $0.02
    result = replay(TWO_ON_DEMAND, [ON_DEMAND, ON_DEMAND], "cheapest-now", one_job(3 * 3600), rental,
                    regions=["us-east-1", "us-west-2"])
    assert result.finish_s[0] == 3600 + 60 + 80 + 7200
    assert result.summary["dollars_egress"] == pytest.approx(0.2)
    assert result.summary["dollars"] == pytest.approx(2.0 + (60 + 80 + 7200) / 3600 + 0.2)
    assert result.summary["checkpoint_transfers"] == 1


def test_a_spot_preemption_restarts_the_job_from_its_checkpoint_and_pays_the_restart():
    # spot $1/h preempted at 1800 s; on-demand $3/h; the job needs 4800 steps
    result = replay([[3.0] * 3, [1.0] * 3], [ON_DEMAND, SPOT], "spot-fallback", one_job(4800), preempt=[(1, 1800.0)])
    # 1800 steps on spot ($0.5), then at 3600 s spot was preempted too recently: on-demand, 60 s restart
    assert result.summary["spot_preemptions"] == 1 and result.preemptions[0] == 1
    assert result.finish_s[0] == 3600 + 60 + 3000
    assert result.summary["dollars_spot"] == pytest.approx(0.5)
    assert result.summary["dollars_on_demand"] == pytest.approx(3060 / 3600 * 3.0)


def test_deadline_aware_waits_for_spot_while_slack_allows_then_switches_to_on_demand():
    # spot $1/h for the first hour only (preempted at 100 s), then not offered; on-demand $3/h;
    # 7200 steps due within 4 h: waiting at 3600 s still leaves 7200 s ≥ 60 + 7100 after the next round,
    # at 7200 s it does not, so it moves to on-demand then and finishes at 7200 + 60 + 7100 = 14360 s
    prices = [[3.0, 3.0, 3.0], [1.0, np.nan, np.nan]]
    result = replay(prices, [ON_DEMAND, SPOT], "deadline-aware", one_job(7200, deadline_s=14400.0),
                    preempt=[(1, 100.0)])
    assert result.finish_s[0] == 14360.0
    assert result.summary["deadlines_met"] == 1 and result.summary["deadlines_missed"] == 0
    assert result.summary["dollars"] == pytest.approx(100 / 3600 + 7160 / 3600 * 3.0)
    # without a deadline, spot-fallback would have gone to on-demand an hour earlier
    early = replay(prices, [ON_DEMAND, SPOT], "spot-fallback", one_job(7200, deadline_s=14400.0), preempt=[(1, 100.0)])
    assert early.finish_s[0] == 3600 + 60 + 7100


def test_deadline_aware_goes_to_on_demand_at_once_without_slack():
    result = replay([[3.0] * 3, [1.0] * 3], [ON_DEMAND, SPOT], "deadline-aware", one_job(3600, deadline_s=3700.0))
    assert result.summary["dollars_spot"] == 0.0 and result.finish_s[0] == 3600.0


def test_a_job_stops_when_its_spending_reaches_its_budget():
    result = replay(TWO_ON_DEMAND, [ON_DEMAND, ON_DEMAND], "static", one_job(3 * 3600, budget_usd=3.0))
    # $2 after the first hour, $4 after the second: stopped at the third round's start
    assert result.summary["out_of_budget"] == 1 and result.summary["completed"] == 0
    assert result.summary["dollars"] == pytest.approx(4.0)


def test_an_unknown_provisioning_policy_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown provisioning policy 'cheap'.*static"):
        make_provisioning("cheap")


class Chooses:
    """A provisioning policy that always answers with ``types``."""

    name = "test"

    def __init__(self, types) -> None:
        self.types = types

    def choose(self, view):
        return np.array(self.types[: len(view.usable)])


@pytest.mark.parametrize("types, why", [([5], "that does not exist"), ([-2], "that does not exist"),
                                        ([1], "a job cannot use")])
def test_a_policy_that_chooses_a_type_it_may_not_is_refused_naming_it(types, why):
    prices = [[2.0, 2.0, 2.0], [float("nan")] * 3]  # type 1 is not offered
    with pytest.raises(ValueError, match=f"provisioning policy 'test' chose an instance type {why}"):
        simulate_rented(one_job(3600), market(prices, [ON_DEMAND, ON_DEMAND]), ONE_STEP_PER_S, Chooses(types),
                        HOURLY, NO_TRANSFER)
