"""The server's privacy ledger as the state file keeps it: one row a claim whatever the blocks it
names, its blocks dropped once it is settled (its job started, ended or was cancelled), leftover
rows of an older file folded away on open, and the same grants, round after round, as the
simulator's stage kept for a whole replay."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from apportion.core.privacy import Blocks, Claims
from apportion.mechanism.admission import Admission, AdmissionContext, Applicants, Outcome
from apportion.mechanism.privacy_budget import ClaimState, PrivacyStage
from apportion.mechanism.privacy_policies import PrivacyPolicy
from apportion.serve.resources.privacy.ledger import PrivacyLedger
from apportion.serve.jobs.privacy_spec import BlockSpec, ClaimSpec
from apportion.serve.store.state import StateStore


def ledger(tmp_path, policy=PrivacyPolicy("fcfs"), blocks=4, epsilon=1.0):
    store = StateStore(tmp_path / "state.db")
    found = PrivacyLedger(store, policy)
    found.add_blocks([BlockSpec(f"b{i}", epsilon, 1e-6) for i in range(blocks)], now=0.0)
    return store, found


def submit(store, ledger, claim: ClaimSpec, now=0.0, checked=True) -> int:
    """A job claiming ``claim``, checked as at submit (``checked``; else stored as it is: one that can no
    longer fit by now reaches the round)."""
    job_id = store.insert_job(spec={}, name="j", user="alice", queue="default", priority=1.0, kind="k", gpus=1,
                              total_steps=10, submitted=now)
    found = ledger.check_claim(claim, "test") if checked else (
        np.array([int(name[1:]) + 1 for name in claim.blocks]), np.array([claim.epsilon, claim.delta]))
    ledger.insert_claims([job_id], claim, *found)
    return job_id


def count(store, sql) -> int:
    return store.rows(sql)[0][0]


def test_a_claim_on_many_blocks_is_one_row_and_its_blocks_go_when_its_job_is_cancelled(tmp_path):
    store, privacy = ledger(tmp_path, blocks=300)
    every = tuple(f"b{i}" for i in range(300))
    jobs = [submit(store, privacy, ClaimSpec(every, epsilon=0.001)) for _ in range(5)]
    assert count(store, "SELECT COUNT(*) FROM privacy_claims") == 5  # not 5 × 300 × 2 rows
    assert not store.rows("SELECT 1 FROM sqlite_master WHERE name = 'privacy_demands'")
    assert privacy.open_cells_of("alice") == 5 * 300 * 2
    assert [b.waiting for b in privacy.budgets(0.0)][:2] == [5, 5]
    for job_id in jobs:
        store.update_job(job_id, status="cancelled", finished=1.0)
    privacy.settle(jobs)
    assert privacy.claim_states(jobs) == dict.fromkeys(jobs, "withdrawn")
    assert count(store, "SELECT COUNT(*) FROM privacy_claims WHERE blocks IS NOT NULL") == 0
    assert privacy.open_cells_of("alice") == 0
    assert [b.waiting for b in privacy.budgets(0.0)][:2] == [0, 0]


def test_budget_consumed_at_a_jobs_start_stays_with_its_blocks(tmp_path):
    store, privacy = ledger(tmp_path)
    job_id = submit(store, privacy, ClaimSpec(("b0", "b2"), epsilon=0.25, delta=1e-7))
    decide(store, privacy, now=1.0, start=False)
    assert privacy.claim_states([job_id]) == {job_id: "granted"}
    assert [b.granted for b in privacy.budgets(1.0)] == [0.25, 0.0, 0.25, 0.0]
    store.update_job(job_id, status="running", started=2.0)
    privacy.settle()
    assert count(store, "SELECT COUNT(*) FROM privacy_claims WHERE blocks IS NOT NULL") == 0
    budgets = privacy.budgets(2.0)
    assert [b.consumed for b in budgets] == [0.25, 0.0, 0.25, 0.0]
    assert [b.left for b in budgets] == [0.75, 1.0, 0.75, 1.0]


def test_an_older_files_demand_rows_are_folded_into_claims_and_blocks_on_open(tmp_path):
    store, privacy = ledger(tmp_path, blocks=2)
    started = submit(store, privacy, ClaimSpec(("b0", "b1"), epsilon=0.5))
    waiting = submit(store, privacy, ClaimSpec(("b1",), epsilon=0.25))
    store.close()
    conn = sqlite3.connect(tmp_path / "state.db")  # as an older apportion wrote it: a row a block and column
    conn.execute("CREATE TABLE privacy_demands (job_id INTEGER NOT NULL, position INTEGER NOT NULL, block INTEGER"
                 " NOT NULL, col INTEGER NOT NULL, amount REAL NOT NULL, held REAL NOT NULL DEFAULT 0,"
                 " PRIMARY KEY (job_id, position, col))")
    conn.executemany("INSERT INTO privacy_demands VALUES (?, ?, ?, ?, ?, 0)",
                     [(started, 0, 1, 0, 0.5), (started, 0, 1, 1, 0.0), (started, 1, 2, 0, 0.5),
                      (started, 1, 2, 1, 0.0), (waiting, 0, 2, 0, 0.25), (waiting, 0, 2, 1, 0.0)])
    conn.execute("UPDATE privacy_claims SET blocks = NULL, demand = ''")
    conn.execute("UPDATE privacy_claims SET state = 'consumed' WHERE job_id = ?", (started,))
    conn.commit()
    conn.close()
    store = StateStore(tmp_path / "state.db")
    privacy = PrivacyLedger(store, PrivacyPolicy("fcfs"))
    assert not store.rows("SELECT 1 FROM sqlite_master WHERE name = 'privacy_demands'")
    budgets = privacy.budgets(0.0)
    assert [b.consumed for b in budgets] == [0.5, 0.5]
    assert [b.waiting for b in budgets] == [0, 1]
    decide(store, privacy, now=1.0, start=False)
    assert privacy.claim_states([waiting]) == {waiting: "granted"}
    assert [b.granted for b in privacy.budgets(1.0)] == [0.0, 0.25]


@pytest.mark.parametrize("policy, portions", [
    (PrivacyPolicy("fcfs"), "lost"), (PrivacyPolicy("dpf-n", n=3), "lost"), (PrivacyPolicy("rr", n=3), "lost"),
    (PrivacyPolicy("rr", n=3), "returned"), (PrivacyPolicy("pack", n=2), "lost")],
    ids=["fcfs", "dpf-n", "rr", "rr-returned", "pack"])
def test_rounds_grant_as_the_simulators_stage_does(tmp_path, policy, portions):
    """Claims arriving over four rounds on four blocks: the server, which rebuilds its stage from the
    state file every round, grants and rejects the same claims in the same rounds as one stage kept
    from the first round to the last, built as the simulator builds it (``sim/privacy.py``: round robin
    retires blocks, a rejected claim's portions lost or returned), its jobs starting as soon as granted."""
    arrivals = [  # (round it arrives, blocks, ε)
        (0, (0, 1), 0.4), (0, (1, 2), 0.5), (1, (0, 1, 2, 3), 0.3), (1, (3,), 0.9), (2, (2,), 0.6),
        (2, (0, 3), 0.2), (3, (1,), 0.3), (3, (0, 1, 2), 0.1),
    ]
    store, privacy = ledger(tmp_path)
    privacy.policy, privacy.rejected_portions = policy, portions
    blocks = Blocks(np.array([f"b{i}" for i in range(4)], dtype=object), np.zeros(4), np.ones(4), np.full(4, 1e-6))
    lengths = [len(b) for _, b, _ in arrivals]
    claims = Claims(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
                    np.array([b for _, bs, _ in arrivals for b in bs], dtype=np.int64),
                    np.array([[e, 0.0] for (_, bs, e) in arrivals for _ in bs]), np.ones(len(arrivals)))
    simulated = PrivacyStage(blocks, claims, policy, rejected_portions=portions, retire_blocks=True)
    jobs: list[int] = []
    for now in range(6):
        for at, names, epsilon in arrivals:
            if at == now:
                jobs.append(submit(store, privacy, ClaimSpec(tuple(f"b{b}" for b in names), epsilon=epsilon),
                                   now=float(now), checked=False))
        asked = np.flatnonzero(np.isin(simulated.state[:len(jobs)], (ClaimState.UNSEEN, ClaimState.WAITING)))
        simulated.admit(Applicants(np.array(jobs)[asked], claim=asked),
                        AdmissionContext(float(now), lambda keys: np.full(len(keys), Outcome.WAITING), str))
        decide(store, privacy, float(now))
        states = privacy.claim_states(jobs)
        served = [states[j] for j in jobs]
        expected = [{ClaimState.GRANTED: "consumed", ClaimState.REJECTED: "rejected",
                     ClaimState.WAITING: "waiting", ClaimState.UNSEEN: "pending"}[ClaimState(s)]
                    for s in simulated.state[:len(jobs)]]
        assert served == expected, f"round {now}"
    assert "consumed" in served and ("waiting" in served or "rejected" in served)  # the instance decides both ways


def decide(store, privacy, now, start=True):
    """One round's privacy decisions as admission makes them; each job granted starts at once (``start``)."""
    asking = privacy.open_claims()
    if len(asking):
        stage, before = privacy.stage(asking)
        Admission([stage]).admit(Applicants(asking, claim=np.arange(len(asking))),
                                 AdmissionContext(now, lambda keys: np.full(len(keys), Outcome.WAITING), str))
        privacy.record(stage, before, now)
    states = privacy.claim_states([int(j) for j in asking])
    for job_id, state in states.items():
        if state == "granted" and start:
            store.update_job(job_id, status="running", started=now)
    privacy.settle()


def test_a_retired_block_and_its_lost_portions_outlive_a_restart(tmp_path):
    """rr, N = 2 (the case of tests/mechanism/test_privacy_budget.py): b0 retires at the third round and
    B's 0.4 is lost. Reopened, the ledger still has both: a claim stored for b0 after (one that never
    met the submit check) is rejected at its arrival, however small, and b0 has nothing left."""
    store, privacy = ledger(tmp_path, policy=PrivacyPolicy("rr", n=2), blocks=1)
    for now, epsilon in enumerate((0.6, 0.6, 0.1)):
        submit(store, privacy, ClaimSpec(("b0",), epsilon=epsilon), now=float(now), checked=False)
        decide(store, privacy, float(now))
    assert [b.left for b in privacy.budgets(2.0)] == [pytest.approx(0.0)]
    store.close()
    store = StateStore(tmp_path / "state.db")
    privacy = PrivacyLedger(store, PrivacyPolicy("rr", n=2))
    assert [b.left for b in privacy.budgets(3.0)] == [pytest.approx(0.0)]
    late = submit(store, privacy, ClaimSpec(("b0",), epsilon=0.01), now=3.0, checked=False)
    decide(store, privacy, 3.0)
    assert privacy.claim_states([late]) == {late: "rejected"}
    assert store.rows("SELECT reason FROM privacy_claims WHERE job_id = ?", (late,))[0][0] == (
        "privacy claim cannot be granted: block b0 retired (its budget is all unlocked and handed out)")


def test_an_older_files_blocks_gain_the_lost_and_retired_columns_on_open(tmp_path):
    store, privacy = ledger(tmp_path, blocks=2)
    store.close()
    conn = sqlite3.connect(tmp_path / "state.db")  # as an apportion before block retirement wrote it
    conn.execute("CREATE TABLE older AS SELECT id, name, epsilon, delta, orders, added, arrived_claims, consumed"
                 " FROM privacy_blocks")
    conn.execute("DROP TABLE privacy_blocks")
    conn.execute("ALTER TABLE older RENAME TO privacy_blocks")
    conn.commit()
    conn.close()
    store = StateStore(tmp_path / "state.db")
    privacy = PrivacyLedger(store, PrivacyPolicy("rr", n=2))
    assert store.rows("SELECT lost, retired FROM privacy_blocks") == [("", 0), ("", 0)]
    assert [b.left for b in privacy.budgets(0.0)] == [1.0, 1.0]
