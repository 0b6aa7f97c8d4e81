"""The privacy-budget stage on small instances worked out by hand: unlocking, the order of
grants under each policy, rejection, and what a held or failed job is told."""

import numpy as np
import pytest

from apportion.core.privacy import Blocks, Claims
from apportion.mechanism.admission import Admission, AdmissionContext, AfterStage, Applicants
from apportion.mechanism.privacy_budget import ClaimState, Ledger, PrivacyStage
from apportion.mechanism.privacy_policies import PrivacyPolicy, water_fill


def one_block(epsilon=1.0, arrival_s=0.0):
    return Blocks(np.array(["b0"], dtype=object), np.array([arrival_s]), np.array([epsilon]), np.array([1e-6]))


def two_blocks():
    return Blocks(np.array(["x", "y"], dtype=object), np.zeros(2), np.ones(2), np.full(2, 1e-6))


def claims_of(rows):
    """Claims from [{block: ε}, ...] (δ 0)."""
    start = np.cumsum([0] + [len(row) for row in rows])
    block = np.array([b for row in rows for b in row], dtype=np.int64)
    demand = np.array([[e, 0.0] for row in rows for e in row.values()]).reshape(-1, 2)
    return Claims(start, block, demand, np.ones(len(rows)))


def ask(stage, claims, now):
    """Ask the stage about ``claims`` (their keys are their indices) at ``now``."""
    claims = np.asarray(claims, dtype=np.int64)
    return stage.admit(Applicants(claims, claim=claims), AdmissionContext(now, lambda keys: keys, str))


def waiting_and_asking(stage, new, now):
    waiting = np.flatnonzero(stage.state == ClaimState.WAITING)
    return ask(stage, np.concatenate([waiting, new]), now)


def test_dpf_n_unlocks_a_block_by_one_nth_with_each_claim_and_grants_the_smallest_first():
    # N = 3 on a block of ε 1: A (0.5) arrives, then B (0.2), then C (0.3)
    stage = PrivacyStage(one_block(), claims_of([{0: 0.5}, {0: 0.2}, {0: 0.3}]), PrivacyPolicy("dpf-n", n=3))
    verdict = ask(stage, [0], now=0.0)  # 1/3 unlocked: A's 0.5 does not fit
    assert verdict.hold.tolist() == [True]
    assert verdict.reasons == {0: "waiting for privacy budget on block b0 (dpf-n)"}
    verdict = ask(stage, [0, 1], now=1.0)  # 2/3 unlocked: B (0.2) first, then 0.47 left: not A
    assert verdict.admitted.tolist() == [False, True]
    verdict = ask(stage, [0, 2], now=2.0)  # all unlocked, 0.8 left: C (0.3), then A (0.5) exactly
    assert verdict.admitted.tolist() == [True, True]
    assert stage.history().unlocked[:, 0] == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert stage.history().consumed[:, 0] == pytest.approx([0.0, 0.2, 1.0])
    assert stage.delay_s().tolist() == [2.0, 0.0, 0.0]


def test_dpf_grants_more_small_claims_than_first_come_first_served():
    # a big claim first, then three small ones: fcfs gives the big one its 0.5 at once
    claims = claims_of([{0: 0.5}, {0: 0.3}, {0: 0.3}, {0: 0.3}])
    granted = {}
    for policy in (PrivacyPolicy("fcfs"), PrivacyPolicy("dpf-n", n=4)):
        stage = PrivacyStage(one_block(), claims, policy)
        for i in range(4):
            waiting_and_asking(stage, [i], now=float(i))
        waiting_and_asking(stage, [], now=4.0)
        granted[policy.name] = np.flatnonzero(stage.state == ClaimState.GRANTED).tolist()
    assert granted == {"fcfs": [0, 1], "dpf-n": [1, 2, 3]}


def test_dpf_t_unlocks_a_block_evenly_over_t_seconds_from_its_arrival():
    stage = PrivacyStage(one_block(arrival_s=100.0), claims_of([{0: 0.5}]), PrivacyPolicy("dpf-t", t_s=1000.0))
    assert ask(stage, [0], now=50.0).reasons == {0: "waiting for block b0 to arrive"}
    assert ask(stage, [0], now=549.0).hold.tolist() == [True]  # 44.9% unlocked
    assert ask(stage, [0], now=600.0).admitted.tolist() == [True]  # 50%
    assert stage.delay_s().tolist() == [600.0 - 549.0]  # from the first ask after its block arrived


def test_round_robin_shares_unlocked_budget_equally_among_the_waiting_claims():
    # N = 4: A and B (0.3 each) arrive together, half the block unlocks, and each holds 0.25
    stage = PrivacyStage(one_block(), claims_of([{0: 0.3}, {0: 0.3}, {0: 0.1}]), PrivacyPolicy("rr", n=4))
    assert ask(stage, [0, 1], now=0.0).hold.tolist() == [True, True]
    assert stage.accumulated[:, 0].tolist()[:2] == pytest.approx([0.25, 0.25])
    # C arrives: 3/4 unlocked, 0.25 not handed out; A and B need 0.05 each, C 0.1: all granted
    assert ask(stage, [0, 1, 2], now=1.0).admitted.tolist() == [True, True, True]


def test_water_fill_gives_small_needs_in_full_and_splits_the_rest_equally():
    given = water_fill(np.array([0.1, 0.5, 0.5, 0.2]), np.array([0, 0, 0, 1]), np.array([0.7, 1.0]))
    assert given.tolist() == pytest.approx([0.1, 0.3, 0.3, 0.2])


def test_pack_grants_more_claims_than_dpf_where_the_smallest_share_takes_the_scarce_block():
    # after a first claim takes 0.8 of x, A wants x's last 0.2 (dominant share 0.2); B and C want
    # 0.1 of x and 0.25 of y each (share 0.25): DPF grants A alone, packing B and C
    claims = claims_of([{0: 0.8}, {0: 0.2}, {0: 0.1, 1: 0.25}, {0: 0.1, 1: 0.25}])
    granted = {}
    for name in ("dpf-n", "pack"):
        stage = PrivacyStage(two_blocks(), claims, PrivacyPolicy(name, n=1))
        ask(stage, [0], now=0.0)
        ask(stage, [1, 2, 3], now=1.0)
        granted[name] = np.flatnonzero(stage.state == ClaimState.GRANTED).tolist()
    assert granted == {"dpf-n": [0, 1], "pack": [0, 2, 3]}


def test_a_claim_that_can_never_fit_fails_naming_the_block():
    stage = PrivacyStage(two_blocks(), claims_of([{0: 0.1, 1: 1.5}]), PrivacyPolicy("fcfs"))
    verdict = ask(stage, [0], now=0.0)
    assert verdict.fail.tolist() == [True]
    assert verdict.reasons == {0: "privacy claim cannot be granted: block y has not enough budget left"}


def test_a_claim_not_granted_within_the_timeout_fails():
    stage = PrivacyStage(one_block(), claims_of([{0: 0.6}]), PrivacyPolicy("dpf-n", n=2), timeout_s=60.0)
    assert ask(stage, [0], now=0.0).hold.tolist() == [True]
    assert stage.next_change_s(0.0) == 60.0
    verdict = ask(stage, [0], now=60.0)
    assert verdict.fail.tolist() == [True]
    assert verdict.reasons[0] == "privacy claim not granted within 60 s"


def test_jobs_without_a_claim_are_admitted_without_touching_the_ledger():
    stage = PrivacyStage(one_block(), claims_of([{0: 0.5}, {}]), PrivacyPolicy("dpf-n", n=1))
    admission = Admission([AfterStage(), stage])
    verdict = admission.admit(Applicants(np.array([0, 1]), claim=np.array([-1, 1])),
                              AdmissionContext(0.0, lambda keys: keys, str))
    assert verdict.admitted.tolist() == [True, True]
    assert stage.state.tolist() == [ClaimState.UNSEEN, ClaimState.UNSEEN]


def test_policies_say_which_parameter_they_need():
    with pytest.raises(ValueError, match="dpf-n needs N"):
        PrivacyPolicy("dpf-n")
    with pytest.raises(ValueError, match="pack needs one of N"):
        PrivacyPolicy("pack", n=3, t_s=10.0)
    with pytest.raises(ValueError, match="unknown privacy policy 'drf'"):
        PrivacyPolicy("drf")


def test_round_robin_refuses_renyi_blocks():
    blocks = Blocks(np.array(["b0"], dtype=object), np.zeros(1), np.ones(1), np.full(1, 1e-6), np.array([2.0, 4.0]))
    claims = Claims(np.array([0, 1]), np.array([0]), np.array([[0.1, 0.2]]), np.ones(1))
    with pytest.raises(ValueError, match="rr shares ε and δ"):
        PrivacyStage(blocks, claims, PrivacyPolicy("rr", n=2))


def test_a_renyi_claim_is_granted_at_the_order_where_it_fits_and_consumes_at_every_order():
    # δ = e⁻¹ so ln(1/δ) = 1; ε 1.5: budget 0.5 at α=2, 1.5 − 1/3 ≈ 1.17 at α=4
    blocks = Blocks(np.array(["b0"], dtype=object), np.zeros(1), np.array([1.5]), np.array([np.exp(-1)]),
                    np.array([2.0, 4.0]))
    claims = Claims(np.array([0, 1, 2]), np.array([0, 0]), np.array([[0.6, 1.0], [0.4, 0.3]]), np.ones(2))
    stage = PrivacyStage(blocks, claims, PrivacyPolicy("fcfs"))
    # A: 0.6 > 0.5 at α=2, 1.0 ≤ 1.17 at α=4: granted. B alone would fit at α=2 (0.4 ≤ 0.5), but
    # A's 0.6 is consumed there too (−0.1 left), and at α=4 only 0.17 is left for B's 0.3
    verdict = ask(stage, [0, 1], now=0.0)
    assert verdict.admitted.tolist() == [True, False]
    assert verdict.fail.tolist() == [False, True]  # it can never fit: rejected at once
    assert stage.consumed[0].tolist() == pytest.approx([0.6, 1.0])


def test_a_waiting_job_is_told_the_block_it_waits_on():
    # N = 4: a quarter of x and of y unlocked; 0.1 of x fits in it, 0.5 of y does not
    stage = PrivacyStage(two_blocks(), claims_of([{0: 0.1, 1: 0.5}]), PrivacyPolicy("dpf-n", n=4))
    assert ask(stage, [0], now=0.0).reasons == {0: "waiting for privacy budget on block y (dpf-n)"}


def test_a_stage_started_from_a_ledger_goes_on_where_the_earlier_one_stopped():
    # one stage grants A (0.4) of N = 2 unlocking; a new one, given its ledger, grants B (0.5) on the
    # second arrival exactly as the first stage would have
    claims = claims_of([{0: 0.4}, {0: 0.5}])
    first = PrivacyStage(one_block(), claims, PrivacyPolicy("dpf-n", n=2))
    assert ask(first, [0], now=0.0).admitted.tolist() == [True]
    ledger = Ledger(first.consumed, first.arrived_claims, first.state, first.arrived_s)
    second = PrivacyStage(one_block(), claims, PrivacyPolicy("dpf-n", n=2), ledger=ledger)
    assert ask(second, [1], now=1.0).admitted.tolist() == [True]
    assert second.consumed[0, 0] == pytest.approx(0.9) and second.arrived_claims.tolist() == [2]


def rr_retiring(claims, portions):
    return PrivacyStage(one_block(), claims_of(claims), PrivacyPolicy("rr", n=2), rejected_portions=portions,
                        retire_blocks=True)


def test_round_robin_retires_a_block_all_handed_out_and_loses_a_rejected_claims_portions():
    """N = 2, ε 1. A (0.6) arrives: half unlocked, A holds 0.5. B (0.6) arrives: all unlocked, the
    0.5 left is shared max-min: A needs 0.1 (granted), B takes the other 0.4 and the block has
    nothing left to hand out. C (0.1) arrives for it: the block retires, B (short of it) and C
    are rejected, and B's 0.4 is lost, as PrivateKube does."""
    stage = rr_retiring([{0: 0.6}, {0: 0.6}, {0: 0.1}], "lost")
    assert ask(stage, [0], now=0.0).hold.tolist() == [True]
    assert stage.accumulated[0, 0] == pytest.approx(0.5)
    verdict = ask(stage, [0, 1], now=1.0)
    assert verdict.admitted.tolist() == [True, False]
    assert stage.accumulated[1, 0] == pytest.approx(0.4)  # B still waits: PrivateKube rejects only at retirement
    verdict = ask(stage, [1, 2], now=2.0)
    assert verdict.fail.tolist() == [True, True]
    assert verdict.reasons[1] == ("privacy claim cannot be granted: block b0 retired "
                                  "(its budget is all unlocked and handed out)")
    assert stage.retired.tolist() == [True]
    assert stage.lost[0, 0] == pytest.approx(0.4)
    assert stage.consumed[0, 0] == pytest.approx(0.6)


def test_round_robin_with_portions_returned_rejects_a_claim_that_cannot_fit_and_gives_its_portions_back():
    """As above with ``returned``: B cannot fit in the 0.4 left once A is granted, so it is rejected
    at once and its 0.4 goes back; the block is not all handed out, and C (0.1) is granted."""
    stage = rr_retiring([{0: 0.6}, {0: 0.6}, {0: 0.1}], "returned")
    ask(stage, [0], now=0.0)
    verdict = ask(stage, [0, 1], now=1.0)
    assert verdict.admitted.tolist() == [True, False] and verdict.fail.tolist() == [False, True]
    verdict = ask(stage, [2], now=2.0)
    assert verdict.admitted.tolist() == [True]
    assert stage.retired.tolist() == [False] and stage.lost[0, 0] == 0.0
    assert stage.consumed[0, 0] == pytest.approx(0.7)


def test_round_robin_rejects_a_claim_at_its_arrival_on_a_retired_block():
    """Once the block retired, a later claim on it is rejected when it arrives, however small."""
    stage = rr_retiring([{0: 0.6}, {0: 0.6}, {0: 0.1}, {0: 0.01}], "lost")
    for now, asking in ((0.0, [0]), (1.0, [0, 1]), (2.0, [1, 2])):
        ask(stage, asking, now)
    verdict = ask(stage, [3], now=3.0)
    assert verdict.fail.tolist() == [True]


def test_unlocking_by_t_in_steps_of_a_tick_as_privatekubes_clock():
    """T = 10 s in steps of 5 s: a step at the block's arrival, then one a tick, 10 / 5 + 1 = 3 in all."""
    policy = PrivacyPolicy("dpf-t", t_s=10.0, tick_s=5.0)
    fractions = [policy.unlocked_fraction(one_block(arrival_s=2.0), np.zeros(1), now)[0]
                 for now in (1.0, 2.0, 6.9, 7.0, 12.0, 30.0)]
    assert fractions == pytest.approx([0.0, 1 / 3, 1 / 3, 2 / 3, 1.0, 1.0])
