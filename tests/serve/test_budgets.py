"""Per-user budgets (budgets.py) through the HTTP API: every submit path charged to its user, a quota
refused with 409 naming the limit and what the user holds, a burst of submits with 429 and
Retry-After, an admin charged as the user it acts for, and what each user holds shown by
``GET /status`` and ``/metrics``, kept right as jobs end and across a restart."""

from __future__ import annotations

from dataclasses import replace

from fastapi.testclient import TestClient

from apportion.executors.fake import FakeExecutor
from apportion.policies.fifo import Fifo
from apportion.serve.http.api import create_app
from apportion.serve.accounts.auth import add_user
from apportion.serve.accounts.budgets import BudgetRules, Limits
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import parse_slots
from apportion.serve.store.state import StateStore
from test_serve_dependencies import Clock


class FakeTime:
    """The rate buckets' clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Cluster:
    """The API over a fake two-slot cluster with users alice and bob and admin ops, under ``limits``
    (``users``: per-user limits, as the config file's user_budgets)."""

    def __init__(self, tmp_path, users: dict | None = None, **limits) -> None:
        self.tmp_path, self.clock, self.rate_clock = tmp_path, Clock(), FakeTime()
        self.rules = BudgetRules(Limits(**limits), {u: replace(Limits(**limits), **v) for u, v in (users or {}).items()})
        self.open()
        self.credential = {name: add_user(self.scheduler.store, name, admin=name == "ops", now=0.0)
                           for name in ("alice", "bob", "ops")}

    def open(self) -> None:
        config = ServeConfig(state_dir=self.tmp_path, round_s=60.0, fill_gap_s=0.0, renew_wait_s=0.0, max_retries=0,
                             budgets=self.rules)
        self.scheduler = Scheduler(StateStore(self.tmp_path / "state.db"), FakeExecutor(self.tmp_path),
                                   parse_slots("cpu:2"), Fifo(), config, clock=self.clock)
        self.scheduler.requests.budgets.rate.clock = self.rate_clock
        self.client = TestClient(create_app(self.scheduler))

    def restart(self) -> None:
        self.scheduler.store.close()
        self.open()

    def call(self, method, path, who="alice", headers=None, **kwargs):
        headers = {"Authorization": f"Bearer {self.credential[who]}", **(headers or {})}
        return self.client.request(method, path, headers=headers, **kwargs)

    def submit(self, who="alice", headers=None, **fields):
        return self.call("POST", "/jobs", who, headers=headers,
                         json={"name": "train", "command": "train", "total_steps": 100, **fields})

    def budget(self, who="alice", of=None) -> dict:
        shown = self.call("GET", "/status", who).json()["budgets"]
        return next(b for b in shown if b["user"] == (of or who))


def test_single_submits_stop_at_the_active_job_limit_and_fit_again_once_a_job_ends(tmp_path):
    cluster = Cluster(tmp_path, max_active_jobs=3)
    assert [cluster.submit().status_code for _ in range(3)] == [200, 200, 200]

    refused = cluster.submit()

    assert refused.status_code == 409
    assert refused.json()["detail"].startswith("alice holds 3 active jobs, the limit (--max-active-jobs) is 3")
    assert refused.json() | {"detail": ""} == {"detail": "", "budget": "max_active_jobs", "held": 3, "limit": 3}
    assert cluster.submit("bob").status_code == 200  # each user's own budget
    assert cluster.call("POST", "/jobs/1/cancel", json={}).status_code == 200
    assert cluster.budget()["active_jobs"] == 2
    assert cluster.submit().status_code == 200


def test_an_array_is_refused_whole_when_its_tasks_would_pass_the_limit(tmp_path):
    cluster = Cluster(tmp_path, max_active_jobs=5)
    assert cluster.submit(array="0-3").status_code == 200

    refused = cluster.submit(array="0-1")

    assert refused.status_code == 409
    assert refused.json()["detail"].startswith("alice holds 4 active jobs, the limit (--max-active-jobs) is 5; this "
                                               "submit would add 2")
    assert cluster.budget()["active_jobs"] == 4
    assert len(cluster.scheduler.store.jobs()) == 4
    assert cluster.submit().status_code == 200  # one more single job still fits


def test_a_submit_with_an_idempotency_key_is_charged_and_its_retry_finds_its_job(tmp_path):
    cluster = Cluster(tmp_path, max_active_jobs=1)
    first = cluster.submit(headers={"Idempotency-Key": "k1"})
    assert first.status_code == 200

    retried = cluster.submit(headers={"Idempotency-Key": "k1"})  # the stored job, not a new charge
    another = cluster.submit(headers={"Idempotency-Key": "k2"})

    assert retried.status_code == 200 and retried.json()["id"] == first.json()["id"]
    assert another.status_code == 409 and "(--max-active-jobs) is 1" in another.json()["detail"]


def test_stored_bytes_are_charged_by_the_spec_as_stored(tmp_path):
    cluster = Cluster(tmp_path, max_stored_mb=0.05)  # 50,000 bytes
    env = {f"V{i}": "x" * 1000 for i in range(20)}  # about 20 KB a job
    assert cluster.submit(env=env).status_code == 200
    assert cluster.submit(env=env).status_code == 200

    refused = cluster.submit(env=env)
    held = cluster.budget()["stored_mb"]
    as_array = cluster.submit(array="0-2", env={"V": "x" * 5000})  # its spec stored once, not three times

    assert refused.status_code == 409
    assert refused.json()["budget"] == "max_stored_mb"
    assert refused.json()["detail"].startswith("alice holds 0.04 MB of stored jobs, the limit (--max-stored-mb) is "
                                               "0.05 MB; this submit would add 0.02 MB")
    assert as_array.status_code == 200
    assert 0.005 < cluster.budget()["stored_mb"] - held < 0.008  # one 5 KB spec and three small rows
    assert cluster.submit(array="0-2", env={"V": "x" * 5000}).status_code == 409  # a second copy does not fit


def test_after_edges_count_the_jobs_waited_for_and_an_arrays_once_until_its_last_task_ends(tmp_path):
    cluster = Cluster(tmp_path, max_after_edges=5)
    first = [int(cluster.submit().json()["id"]) for _ in range(2)]
    assert cluster.submit(after=first).status_code == 200  # 2 edges
    array_id = int(cluster.submit(array="0-2", after=first).json()["id"])  # 2 edges, kept once for its 3 tasks

    refused = cluster.submit(after=first)

    assert refused.status_code == 409
    assert refused.json()["detail"].startswith("alice holds 4 after edges (jobs waited for, summed over jobs; an "
                                               "array's once), the limit (--max-after-edges) is 5; this submit "
                                               "would add 2")
    assert cluster.call("POST", f"/jobs/{array_id + 1}/cancel", json={}).status_code == 200
    assert cluster.budget()["after_edges"] == 4  # two of its tasks still wait
    cluster.restart()
    assert cluster.budget()["after_edges"] == 4
    assert cluster.call("POST", f"/jobs/{array_id}/cancel", json={}).status_code == 200
    assert cluster.budget()["after_edges"] == 2
    assert cluster.submit(after=first).status_code == 200


def test_privacy_demand_rows_count_the_blocks_each_job_claims(tmp_path):
    cluster = Cluster(tmp_path, max_demand_rows=5)
    added = cluster.call("POST", "/blocks", "ops", json={"blocks": [
        {"name": name, "epsilon": 10.0, "delta": 1e-6} for name in ("mon", "tue", "wed")]})
    assert added.status_code == 200
    claim = {"blocks": ["mon", "tue", "wed"], "epsilon": 0.1}
    assert cluster.submit(privacy=claim).status_code == 200

    refused = cluster.submit(privacy=claim)

    assert refused.status_code == 409
    assert refused.json()["detail"].startswith("alice holds 3 privacy demand rows (blocks claimed, summed over jobs), "
                                               "the limit (--max-demand-rows) is 5")
    assert cluster.submit(privacy={**claim, "blocks": ["mon", "tue"]}).status_code == 200
    assert cluster.budget()["demand_rows"] == 5


def test_a_burst_of_submits_past_the_rate_is_answered_429_with_retry_after(tmp_path):
    cluster = Cluster(tmp_path, submit_rate=0.5, submit_burst=3)
    assert [cluster.submit().status_code for _ in range(3)] == [200, 200, 200]

    refused = cluster.submit()

    assert refused.status_code == 429
    assert refused.headers["Retry-After"] == "2"  # one submit every 2 s
    assert "alice submits faster than their budget allows: 3 at once (--submit-burst), then 0.5 a second " \
           "(--submit-rate)" in refused.json()["detail"]
    assert cluster.submit("bob").status_code == 200  # another user's bucket is full
    cluster.rate_clock.now += 2.0
    assert cluster.submit().status_code == 200
    assert cluster.submit().status_code == 429


def test_a_refused_body_still_spends_a_submit(tmp_path):
    cluster = Cluster(tmp_path, submit_rate=0.1, submit_burst=2)
    assert cluster.submit(total_steps=-1).status_code == 400
    assert cluster.submit(total_steps=-1).status_code == 400
    assert cluster.submit().status_code == 429  # a flood of bad bodies is a flood


def test_an_admin_acting_for_a_user_is_charged_to_that_user(tmp_path):
    cluster = Cluster(tmp_path, max_active_jobs=2, submit_burst=3, submit_rate=0.01)
    assert cluster.submit("alice").status_code == 200
    assert cluster.submit("ops", user="alice").status_code == 200

    refused = cluster.submit("ops", user="alice")

    assert refused.status_code == 409 and refused.json()["detail"].startswith("alice holds 2 active jobs")
    assert cluster.submit("ops", user="alice").status_code == 429  # alice's rate: 3 at once, spent
    assert cluster.submit("ops", user="bob").status_code == 200  # the admin's own calls are not a budget


def test_a_user_named_in_user_budgets_has_their_own_limit_and_the_message_says_where(tmp_path):
    cluster = Cluster(tmp_path, users={"bob": {"max_active_jobs": 2}}, max_active_jobs=1)
    assert cluster.submit("bob").status_code == 200
    assert cluster.submit("bob").status_code == 200

    refused = cluster.submit("bob")

    assert refused.status_code == 409
    assert ("bob holds 2 active jobs, the limit (user_budgets: bob: max_active_jobs in the config file) is 2"
            in refused.json()["detail"])
    assert cluster.budget("bob")["max_active_jobs"] == 2
    assert cluster.budget("alice")["max_active_jobs"] == 1


def test_status_shows_a_user_their_own_budget_and_an_admin_everyones(tmp_path):
    cluster = Cluster(tmp_path)
    cluster.submit("alice", array="0-2")
    cluster.submit("bob")

    mine = cluster.call("GET", "/status", "bob").json()["budgets"]
    everyone = cluster.call("GET", "/status", "ops").json()["budgets"]

    assert [b["user"] for b in mine] == ["bob"]
    assert mine[0] | {"stored_mb": 0} == {
        "user": "bob", "active_jobs": 1, "max_active_jobs": 50_000, "stored_mb": 0, "max_stored_mb": 1000.0,
        "demand_rows": 0, "max_demand_rows": 1_000_000, "after_edges": 0, "max_after_edges": 100_000,
        "submit_rate": 20.0, "submit_burst": 200}
    assert [(b["user"], b["active_jobs"]) for b in everyone] == [("alice", 3), ("bob", 1), ("ops", 0)]  # and theirs


def test_metrics_export_each_users_use_and_the_limits(tmp_path):
    cluster = Cluster(tmp_path, users={"bob": {"max_active_jobs": 7}})
    cluster.submit("alice", array="0-2", after=[])
    cluster.submit("bob")

    text = cluster.call("GET", "/metrics").text

    assert 'apportion_user_active_jobs{user="alice"} 3.0' in text
    assert 'apportion_user_active_jobs{user="bob"} 1.0' in text
    assert 'apportion_user_stored_bytes{user="alice"}' in text
    assert 'apportion_user_after_edges{user="alice"} 0.0' in text
    assert 'apportion_user_budget_limit{budget="max_active_jobs",user="(default)"} 50000.0' in text
    assert 'apportion_user_budget_limit{budget="max_active_jobs",user="bob"} 7.0' in text


def test_use_follows_jobs_as_they_run_and_end_and_is_counted_again_at_a_restart(tmp_path):
    cluster = Cluster(tmp_path)
    for _ in range(3):
        cluster.submit()
    cluster.clock.now += 1.0
    cluster.scheduler.tick()  # two start
    assert cluster.budget()["active_jobs"] == 3
    cluster.scheduler.store.update_job(2, status="failed", finished=cluster.clock.now)
    assert cluster.budget()["active_jobs"] == 2

    with cluster.scheduler.store.transaction() as conn:  # a total gone wrong (or an older state file)
        conn.execute("UPDATE budget_use SET active_jobs = 99, bytes = 0")
        conn.execute("DELETE FROM budget_charges WHERE job_id = 3")
    cluster.restart()

    again = cluster.budget()
    assert again["active_jobs"] == 2 and again["stored_mb"] > 0


def test_apportion_status_ends_with_the_callers_budget(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import apportion.cli.jobs as jobs_cli
    from apportion.cli import app

    cluster = Cluster(tmp_path, max_active_jobs=10)
    cluster.submit("bob", array="0-2")

    class Answers:
        def status(self):
            return cluster.call("GET", "/status", "bob").json()

    monkeypatch.setattr(jobs_cli, "client_for", lambda *args: Answers())
    shown = CliRunner().invoke(app, ["status"])

    assert shown.exit_code == 0, shown.output
    assert ("budget of bob: 3 of 10 active jobs, 0.0 of 1,000 MB stored, 0 of 1,000,000 demand rows, 0 of 100,000 "
            "after edges; 20 submits/s (200 at once)") in " ".join(shown.output.split())


def test_an_arrays_tasks_give_back_their_share_one_by_one_and_a_restart_counts_the_same(tmp_path):
    cluster = Cluster(tmp_path)
    array_id = int(cluster.submit(array="0-3", after=[], env={"V": "x" * 4000}).json()["id"])
    held = cluster.budget()
    assert held["active_jobs"] == 4

    assert cluster.call("POST", f"/jobs/{array_id + 2}/cancel", json={}).status_code == 200  # one task

    after_one = cluster.budget()
    assert after_one["active_jobs"] == 3
    assert after_one["stored_mb"] == round(held["stored_mb"] * 3 / 4, 6)
    cluster.restart()
    assert cluster.budget() == after_one
    assert cluster.call("POST", f"/jobs/{array_id}/cancel", json={}).status_code == 200
    assert (cluster.budget()["active_jobs"], cluster.budget()["stored_mb"]) == (0, 0.0)


def test_a_state_file_kept_by_an_earlier_budgets_table_is_brought_up_to_date(tmp_path):
    store = StateStore(tmp_path / "state.db")
    with store.transaction() as conn:  # the table as the first version of budgets kept it, and one old trigger
        conn.execute("CREATE TABLE budget_charges (job_id INTEGER PRIMARY KEY, bytes INTEGER NOT NULL,"
                     " demand_rows INTEGER NOT NULL, after_edges INTEGER NOT NULL)")
        conn.execute("CREATE TRIGGER budget_job_charged AFTER INSERT ON budget_charges BEGIN SELECT 1; END")
    store.close()

    cluster = Cluster(tmp_path)
    array_id = int(cluster.submit(array="0-1", after=[]).json()["id"])

    assert cluster.budget()["active_jobs"] == 2
    assert cluster.scheduler.store.rows("SELECT tasks FROM budget_charges WHERE job_id = ?", (array_id,)) == [(2,)]
