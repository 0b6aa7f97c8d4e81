"""Privacy budget on the server: blocks an admin adds, a job file's claim, the job waiting until it is
granted, the budget consumed at its first start or returned when it never starts, claims refused
at submit, a restart keeping the ledger, and /metrics. Through the HTTP API, on a fake clock and
a fake executor."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from apportion.executors.fake import FakeExecutor
from apportion.policies.fifo import Fifo
from apportion.serve.http.api import create_app
from apportion.serve.accounts.auth import add_user
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import parse_slots
from apportion.serve.store.state import StateStore


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Server:
    """The API with alice and an admin, ops, on ``slots``, granting claims by ``privacy``."""

    def __init__(self, tmp_path, slots="cpu:2", clock=None, **privacy) -> None:
        self.tmp_path, self.clock, self.slots, self.privacy = tmp_path, clock or Clock(), slots, privacy
        self.executor = FakeExecutor(tmp_path)
        self.open()
        self.credential = {name: add_user(self.scheduler.store, name, admin=name == "ops", now=0.0)
                           for name in ("alice", "ops")}

    def open(self) -> None:
        config = ServeConfig(state_dir=self.tmp_path, round_s=60.0, fill_gap_s=0.0, renew_wait_s=0.0, max_retries=0,
                             **self.privacy)
        self.scheduler = Scheduler(StateStore(self.tmp_path / "state.db"), self.executor, parse_slots(self.slots),
                                   Fifo(), config, clock=self.clock)
        self.client = TestClient(create_app(self.scheduler))

    def restart(self) -> None:
        self.scheduler.store.close()
        self.open()

    def call(self, method, path, who="alice", **kwargs):
        return self.client.request(method, path, headers={"Authorization": f"Bearer {self.credential[who]}"}, **kwargs)

    def add_blocks(self, *blocks, who="ops"):
        return self.call("POST", "/blocks", who, json={"blocks": list(blocks)})

    def submit(self, name, privacy, **fields):
        return self.call("POST", "/jobs", json={"name": name, "command": "train", "total_steps": 100,
                                                "privacy": privacy, **fields})

    def blocks(self) -> dict:
        return {b["name"]: b for b in self.call("GET", "/blocks").json()["blocks"]}

    def job(self, job_id):
        return self.call("GET", f"/jobs/{job_id}").json()


def block(name, epsilon=1.0, delta=1e-6):
    return {"name": name, "epsilon": epsilon, "delta": delta}


def test_only_an_admin_adds_blocks_and_everyone_lists_them(tmp_path):
    server = Server(tmp_path)
    refused = server.add_blocks(block("mon"), who="alice")
    assert refused.status_code == 403 and refused.json()["detail"] == "adding privacy blocks is for admins; you are 'alice'"

    assert server.add_blocks(block("mon"), block("tue", 2.0)).json() == {"added": ["mon", "tue"]}
    listed = server.blocks()
    assert list(listed) == ["mon", "tue"]
    assert listed["tue"] | {"added": 0} == {
        "name": "tue", "epsilon": 2.0, "delta": 1e-6, "rdp_orders": None, "added": 0, "claims": 0, "waiting": 0,
        "unlocked": 2.0, "granted": 0.0, "consumed": 0.0, "left": 2.0, "order": None}  # fcfs: all unlocked at once
    assert listed["mon"]["added"] == server.clock.now
    again = server.add_blocks(block("mon"))
    assert again.status_code == 400 and again.json()["detail"] == "request: field 'name': block 'mon' exists already"
    renyi = server.add_blocks({**block("wed"), "rdp_orders": [2, 4]})
    assert renyi.status_code == 400 and renyi.json()["field"] == "rdp_orders"
    assert "under ε-δ accounting: one accounting a server" in renyi.json()["detail"]
    assert server.add_blocks({"name": "x", "epsilon": 0, "delta": 0}).json()["field"] == "blocks[0].epsilon"


def test_a_job_waits_for_its_budget_then_starts_and_consumes_it(tmp_path):
    # dpf-n with N = 2 on a block of ε 1: the first claim (0.6) unlocks half, and waits; the second
    # (0.3) unlocks the rest: the smaller is granted first, then the first fits too (0.9 of 1.0)
    server = Server(tmp_path, privacy_policy="dpf-n", privacy_n=2)
    server.add_blocks(block("mon"))
    big = server.submit("big", {"blocks": ["mon"], "epsilon": 0.6}).json()["id"]
    server.scheduler.tick()
    assert server.job(big)["status"] == "queued"
    assert server.job(big)["reason"] == "waiting for privacy budget on block mon (dpf-n)"
    assert server.blocks()["mon"] | {"added": 0} == {
        "name": "mon", "epsilon": 1.0, "delta": 1e-6, "rdp_orders": None, "added": 0, "claims": 1, "waiting": 1,
        "unlocked": 0.5, "granted": 0.0, "consumed": 0.0, "left": 1.0, "order": None}

    small = server.submit("small", {"blocks": ["mon"], "epsilon": 0.3}).json()["id"]
    server.clock.now += 1.0
    server.scheduler.tick()  # both granted, both start on the two slots: consumed at their start
    assert sorted(server.executor.running()) == [int(big), int(small)]
    mon = server.blocks()["mon"]
    assert (mon["unlocked"], mon["granted"], mon["consumed"], mon["left"]) == pytest.approx((1.0, 0.0, 0.9, 0.1))
    events = [e.detail for e in server.scheduler.store.events(int(big)) if e.event == "privacy"]
    assert events == ["budget granted on mon", "budget consumed: its first attempt started"]


def test_a_job_cancelled_while_waiting_or_granted_returns_its_budget(tmp_path):
    # one slot: the first job runs; the second is granted, waits for the slot, and is cancelled
    server = Server(tmp_path, slots="cpu:1")
    server.add_blocks(block("mon"))
    first = server.submit("first", {"blocks": ["mon"], "epsilon": 0.5}).json()["id"]
    second = server.submit("second", {"blocks": ["mon"], "epsilon": 0.4}).json()["id"]
    server.scheduler.tick()
    assert list(server.executor.running()) == [int(first)]
    mon = server.blocks()["mon"]
    assert (mon["granted"], mon["consumed"], mon["left"]) == pytest.approx((0.4, 0.5, 0.1))

    assert server.call("POST", f"/jobs/{second}/cancel").json() == {"cancelled": 1}
    mon = server.blocks()["mon"]
    assert (mon["granted"], mon["consumed"], mon["left"]) == pytest.approx((0.0, 0.5, 0.5))
    assert server.scheduler.state.privacy.claim_states([int(first), int(second)]) == {
        int(first): "consumed", int(second): "returned"}


def test_a_claim_on_an_unknown_block_or_that_can_never_fit_is_refused_at_submit_naming_the_block(tmp_path):
    server = Server(tmp_path)
    server.add_blocks(block("mon"), block("tue"))
    unknown = server.submit("j", {"blocks": ["mon", "sun"], "epsilon": 0.1})
    assert unknown.status_code == 400 and unknown.json()["field"] == "privacy.blocks"
    assert unknown.json()["message"].startswith("no block 'sun' on this server (blocks: mon, tue;")
    too_much = server.submit("j", {"blocks": ["mon", "tue"], "epsilon": 0.1, "delta": 2e-6})
    assert too_much.status_code == 400 and too_much.json()["message"] == (
        "can never be granted: block mon has ε 1, δ 1e-06 left of its budget")
    server.submit("spends", {"blocks": ["tue"], "epsilon": 0.8})
    server.scheduler.tick()  # granted and started: 0.2 left on tue
    late = server.submit("late", {"blocks": ["mon", "tue"], "epsilon": 0.3})
    assert late.status_code == 400 and "block tue has ε 0.2" in late.json()["message"]
    assert server.submit("j", {"blocks": ["mon"]}).json()["field"] == "privacy.epsilon"
    assert server.submit("j", {"blocks": ["mon"], "rdp": {2: 0.1}}).json()["field"] == "privacy.rdp"


def test_a_claim_that_can_no_longer_fit_once_another_is_granted_fails_its_job(tmp_path):
    # fcfs: A (0.7) is granted; B (0.5) was submitted when 1.0 was left and can no longer fit: its job fails
    server = Server(tmp_path, slots="cpu:1")
    server.add_blocks(block("mon"))
    a = server.submit("a", {"blocks": ["mon"], "epsilon": 0.7}).json()["id"]
    b = server.submit("b", {"blocks": ["mon"], "epsilon": 0.5}).json()["id"]
    server.scheduler.tick()
    assert server.job(a)["status"] == "running"
    assert server.job(b)["status"] == "failed"
    assert server.job(b)["reason"] == ("cannot be scheduled: privacy claim cannot be granted: block mon has not "
                                       "enough budget left")


def test_a_restarted_server_keeps_the_ledger(tmp_path):
    server = Server(tmp_path, privacy_policy="dpf-n", privacy_n=3)
    server.add_blocks(block("mon"))
    first = server.submit("first", {"blocks": ["mon"], "epsilon": 0.3}).json()["id"]
    server.submit("waits", {"blocks": ["mon"], "epsilon": 0.5})
    server.scheduler.tick()  # 2/3 unlocked: the 0.3 is granted and started, the 0.5 waits (0.37 left unlocked)
    before = server.blocks()["mon"]
    server.restart()
    assert server.blocks()["mon"] == before
    assert (before["claims"], before["waiting"], before["consumed"]) == (2, 1, pytest.approx(0.3))
    server.submit("third", {"blocks": ["mon"], "epsilon": 0.1})
    server.clock.now += 1.0
    server.scheduler.tick()  # the third arrival unlocks all: 0.1 first (smallest), then 0.5
    mon = server.blocks()["mon"]
    assert (mon["claims"], mon["unlocked"], mon["waiting"]) == (3, 1.0, 0)
    assert mon["consumed"] + mon["granted"] == pytest.approx(0.9)
    assert server.job(first)["status"] == "running"


def test_metrics_show_each_blocks_budget(tmp_path):
    server = Server(tmp_path)
    server.add_blocks(block("mon"))
    server.submit("j", {"blocks": ["mon"], "epsilon": 0.25})
    server.scheduler.tick()
    text = server.call("GET", "/metrics").text
    for part, value in (("unlocked", 1.0), ("granted", 0.0), ("consumed", 0.25), ("left", 0.75)):
        assert f'apportion_privacy_budget_epsilon{{block="mon",part="{part}"}} {value}' in text


def test_the_dashboard_shows_each_blocks_budget(tmp_path):
    server = Server(tmp_path)
    assert server.call("GET", "/dashboard/state").json()["privacy"]["blocks"] == []  # the page shows no table
    server.add_blocks(block("mon"))
    server.submit("j", {"blocks": ["mon"], "epsilon": 0.25})
    server.scheduler.tick()
    privacy = server.call("GET", "/dashboard/state").json()["privacy"]
    assert privacy["policy"] == "fcfs"
    assert [(b["name"], b["consumed"], b["left"]) for b in privacy["blocks"]] == [("mon", 0.25, 0.75)]


def test_renyi_blocks_take_claims_at_their_orders(tmp_path):
    # ε 10, δ 1e-6 at orders 8 and 16: budgets 10 − ln(1e6)/7 = 8.026 and 10 − ln(1e6)/15 = 9.079
    server = Server(tmp_path)
    server.add_blocks({**block("mon", epsilon=10.0), "rdp_orders": [8, 16]})
    assert server.submit("j", {"blocks": ["mon"], "epsilon": 0.1}).json()["field"] == "privacy.rdp"
    assert server.submit("j", {"blocks": ["mon"], "rdp": {8: 1, 32: 1}}).json()["message"] == (
        "must give ε at exactly the blocks' orders (8 16), got 8 32")
    first = server.submit("first", {"blocks": ["mon"], "rdp": {8: 5.0, 16: 10.0}})
    assert first.status_code == 200  # fits at order 8
    server.scheduler.tick()
    mon = server.blocks()["mon"]  # order 16 is overdrawn (-0.92): listed at order 8, 3.026 left
    assert (mon["order"], mon["consumed"], mon["left"]) == (8.0, 5.0, pytest.approx(8.026 - 5.0, abs=1e-3))
    refused = server.submit("second", {"blocks": ["mon"], "rdp": {8: 5.0, 16: 5.0}})
    assert refused.json()["message"] == (
        "can never be granted: block mon has not enough left of its budget at any Rényi order")


def test_each_task_of_a_job_array_claims_the_budget(tmp_path):
    server = Server(tmp_path)
    server.add_blocks(block("mon"))
    array = server.submit("sweep", {"blocks": ["mon"], "epsilon": 0.3}, array="0-2").json()
    assert array["tasks"] == 3
    server.scheduler.tick()  # two slots: two tasks start and consume; the third is granted and waits for a slot
    mon = server.blocks()["mon"]
    assert (mon["claims"], mon["consumed"], mon["granted"]) == (3, pytest.approx(0.6), pytest.approx(0.3))


def test_round_robin_retires_a_block_and_loses_a_rejected_claims_portions_as_the_simulator_does(tmp_path):
    # rr, N = 2, ε 1, as PrivateKube (and the simulator, tests/mechanism/test_privacy_budget.py): A (0.6)
    # arrives and holds half; B (0.6) unlocks the rest: A completes (0.1 more), B holds the 0.4 left.
    # C (0.1) arrives for the block with nothing left to hand out: it retires, B and C are rejected and
    # B's 0.4 is lost. A restart keeps both: nothing is left, and a later claim on it is refused.
    server = Server(tmp_path, slots="cpu:3", privacy_policy="rr", privacy_n=2)
    server.add_blocks(block("mon"))
    a = server.submit("a", {"blocks": ["mon"], "epsilon": 0.6}).json()["id"]
    server.scheduler.tick()
    assert server.job(a)["status"] == "queued"
    b = server.submit("b", {"blocks": ["mon"], "epsilon": 0.6}).json()["id"]
    server.clock.now += 1.0
    server.scheduler.tick()
    assert (server.job(a)["status"], server.job(b)["status"]) == ("running", "queued")
    c = server.submit("c", {"blocks": ["mon"], "epsilon": 0.1}).json()["id"]
    server.clock.now += 1.0
    server.scheduler.tick()
    assert (server.job(b)["status"], server.job(c)["status"]) == ("failed", "failed")
    assert server.job(b)["reason"] == ("cannot be scheduled: privacy claim cannot be granted: block mon retired "
                                       "(its budget is all unlocked and handed out)")
    mon = server.blocks()["mon"]
    assert (mon["consumed"], mon["granted"], mon["left"]) == pytest.approx((0.6, 0.0, 0.0))  # B's 0.4 lost

    server.restart()
    assert server.blocks()["mon"] == mon
    late = server.submit("late", {"blocks": ["mon"], "epsilon": 0.01})
    assert late.status_code == 400 and late.json()["message"] == (
        "can never be granted: block mon has ε 0, δ 1e-06 left of its budget")


def test_round_robin_may_return_a_rejected_claims_portions(tmp_path):
    # as above with --privacy-rejected-portions returned: B can no longer fit once A completes and is
    # rejected at once, its 0.4 going back; the block does not retire, and C (0.1) is granted
    server = Server(tmp_path, slots="cpu:3", privacy_policy="rr", privacy_n=2, privacy_rejected_portions="returned")
    server.add_blocks(block("mon"))
    server.submit("a", {"blocks": ["mon"], "epsilon": 0.6})
    server.scheduler.tick()
    b = server.submit("b", {"blocks": ["mon"], "epsilon": 0.6}).json()["id"]
    server.clock.now += 1.0
    server.scheduler.tick()
    assert server.job(b)["status"] == "failed"
    c = server.submit("c", {"blocks": ["mon"], "epsilon": 0.1}).json()["id"]
    server.clock.now += 1.0
    server.scheduler.tick()
    assert server.job(c)["status"] == "running"
    assert server.blocks()["mon"]["consumed"] == pytest.approx(0.7)
