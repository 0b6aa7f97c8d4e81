"""Optional resources behind one seam (serve/resources/base.py): each is one package and one line of
serve/resources/registry.py, and the round and the server reach it only through its hooks."""

from __future__ import annotations

import ast
import sqlite3
from pathlib import Path

import numpy as np
from fastapi.testclient import TestClient
from prometheus_client.core import GaugeMetricFamily

from apportion.core.errors import InputError
from apportion.executors.fake import FakeExecutor
from apportion.mechanism.admission import Verdict
from apportion.policies.las import Las
from apportion.serve.attempts.accounting import accrued
from apportion.serve.base.slots import parse_slots
from apportion.serve.http.api import create_app
from apportion.serve.resources import registry
from apportion.serve.resources.base import AdmissionPart, Resource, RouteRow
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.store.state import StateStore

SERVE = Path(__file__).resolve().parents[2] / "apportion" / "serve"


def test_each_resource_is_one_package_and_one_line_of_the_registry():
    for resource in registry.RESOURCES:
        assert issubclass(resource, Resource)
        assert resource.__module__ == f"apportion.serve.resources.{resource.name}.resource"
    # outside its own package, only the registry imports a resource (and the Ray start-up builds the
    # provisioner that rents a Ray cluster's nodes)
    outside = set()
    for path in SERVE.rglob("*.py"):
        rel = path.relative_to(SERVE)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                for resource in registry.RESOURCES:
                    package = f"apportion.serve.resources.{resource.name}"
                    mine = rel.parts[:2] == ("resources", resource.name)
                    if node.module.startswith(package) and not mine:
                        outside.add((str(rel), resource.name))
    assert outside == {("resources/registry.py", "privacy"), ("resources/registry.py", "cores"),
                       ("resources/registry.py", "rental"), ("app/on_ray.py", "rental")}


def tokens_left(at) -> dict:
    """``GET /tokens``: the tokens left (a route a resource adds, answering from the server)."""
    return {"left": at.scheduler.token_count(), "claimed": at.scheduler.tokens_claimed()}


class Tokens(Resource):
    """A resource made up here: a job named ``greedy`` claims a token at submit (refused when there are
    fewer than its copies) and waits for one at admission; the server shows how many jobs asked, counts
    progress reports, serves ``GET /tokens`` and describes it in the API document."""

    name = "tokens"
    given = ("tokens",)

    def __init__(self, host, given) -> None:
        super().__init__(host, given)
        self.tokens = given.get("tokens", 0)
        self.asked, self.reports, self.ticks = 0, 0, 0
        self.claimed: list[int] = []

    @classmethod
    def routes(cls):
        return (RouteRow("get", "/tokens", tokens_left, "user", doc=dict(
            tag="server", summary="The tokens", description="Tokens left, and the jobs that claimed one.",
            answer="Tokens")),)

    @classmethod
    def schemas(cls):
        return {"Tokens": {"type": "object", "title": "Tokens", "properties": {"left": {"type": "integer"}}}}

    def parts(self):
        return {"token_count": lambda: self.tokens, "tokens_claimed": lambda: list(self.claimed)}

    demand_rows_are = ("tokens claimed", "Tokens claimed, summed over each user's active jobs")

    def claims(self, spec):
        return 1 if spec.name == "greedy" else 0

    def check_claim(self, spec, source, copies):
        if copies > self.tokens:
            raise InputError(source, f"{copies} jobs claim a token each; {self.tokens} are left", field="name")
        return copies

    def store_claim(self, job_ids, spec, checked):
        assert len(job_ids) == checked
        self.claimed.extend(job_ids)

    def admitting(self):
        ids = self.host.store.job_columns(("id",), "name = 'greedy'")
        return np.array([row[0] for row in ids], dtype=np.int64)

    def admission(self, job_ids) -> AdmissionPart:
        self.asked += len(job_ids)

        class Stage:
            name = "tokens"

            def admit(self, jobs, context):
                hold = np.isin(jobs.key, job_ids)
                return Verdict(hold, np.zeros(len(jobs), dtype=bool),
                               {int(j): "waiting for a token" for j in np.flatnonzero(hold)})

        return AdmissionPart(Stage())

    def progress(self, job_id, attempt, steps_done, now):
        self.reports += 1

    def after_tick(self, now):
        self.ticks += 1

    def status(self):
        return {"tokens": {"left": self.tokens, "asked": self.asked}}

    def read_metrics(self, now):
        left = self.tokens
        return lambda: [GaugeMetricFamily("apportion_tokens_left", "Tokens left", value=left)]


def test_a_resource_added_in_one_line_takes_part_in_rounds_status_and_metrics(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "RESOURCES", (*registry.RESOURCES, Tokens))
    config = ServeConfig(state_dir=tmp_path, round_s=60.0, fill_gap_s=0.0, renew_wait_s=0.0)
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), FakeExecutor(tmp_path), parse_slots("cpu:2"), Las(),
                          config, clock=lambda: 1000.0, tokens=3)
    client = TestClient(create_app(scheduler))
    job = {"command": "train", "total_steps": 100, "user": "ann"}
    greedy = client.post("/jobs", json={**job, "name": "greedy"}).json()["id"]
    modest = client.post("/jobs", json={**job, "name": "modest"}).json()["id"]
    scheduler.tick(1000.0)
    assert scheduler.row(int(greedy)).reason == "waiting for a token"
    assert scheduler.row(int(modest)).slots != ""
    client.post(f"/jobs/{modest}/progress", json={"attempt": 1, "steps_done": 5, "steps_per_s": 1.0})
    status = client.get("/status").json()
    assert status["tokens"] == {"left": 3, "asked": 1}
    tokens = scheduler.resources[-1]
    assert tokens.reports == 1 and tokens.ticks == 1
    assert scheduler.token_count() == 3  # what it adds to the scheduler's face, by name
    assert "apportion_tokens_left 3.0" in client.get("/metrics").text


def test_a_resource_added_in_one_line_serves_its_routes_and_claims_at_submit(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "RESOURCES", (*registry.RESOURCES, Tokens))
    config = ServeConfig(state_dir=tmp_path, round_s=60.0, fill_gap_s=0.0, renew_wait_s=0.0)
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), FakeExecutor(tmp_path), parse_slots("cpu:2"), Las(),
                          config, clock=lambda: 1000.0, tokens=3)
    client = TestClient(create_app(scheduler))
    job = {"command": "train", "total_steps": 100, "user": "ann"}
    # its submit hook: a claim checked (all or nothing) and stored with the jobs, charged as demand rows
    refused = client.post("/jobs", json={**job, "name": "greedy", "array": "0-3"})
    assert refused.status_code == 400 and refused.json()["field"] == "name"
    assert "4 jobs claim a token each; 3 are left" in refused.json()["detail"]
    first = client.post("/jobs", json={**job, "name": "greedy", "array": "0-1"}).json()
    client.post("/jobs", json={**job, "name": "modest"})
    assert first["tasks"] == 2 and scheduler.tokens_claimed() == [2, 3]  # the array's two tasks, not "modest"
    assert scheduler.views.budgets.shown("ann", sees_all=True)[0]["demand_rows"] == 2
    # two resources claim rows (privacy's blocks, its tokens): the quota's words are no longer one's
    assert "# HELP apportion_user_demand_rows Demand rows: what jobs claim of the server's resources" in \
        client.get("/metrics").text
    # its route: a row of the table, called as the row says, described in the API document
    assert client.get("/tokens").json() == {"left": 3, "claimed": scheduler.tokens_claimed()}
    document = client.get("/openapi.json").json()
    assert document["paths"]["/tokens"]["get"]["summary"] == "The tokens"
    assert document["components"]["schemas"]["Tokens"]["title"] == "Tokens"


def test_a_round_counts_a_live_attempt_by_the_rule_an_exit_is_settled_with(tmp_path):
    config = ServeConfig(state_dir=tmp_path, round_s=60.0, fill_gap_s=0.0, renew_wait_s=0.0)
    clock = [1000.0]
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), FakeExecutor(tmp_path), parse_slots("v100:2"), Las(),
                          config, clock=lambda: clock[0])
    for name in ("a", "b"):
        scheduler.submit({"name": name, "command": "train", "total_steps": 100, "gpus": 1}, "ann")
    scheduler.tick(1000.0)
    record = scheduler.row(1)
    table = scheduler.store.round_table()
    row = scheduler.rounds._rows.rows(table, np.array([0]))[0]
    assert record.attempt_live and row["live"]
    assert accrued(row, 1030.0) == accrued(record, 1030.0) != {}
    assert accrued(row, 1030.0)["service_gpu_s"] == record.service_gpu_s + 30.0


def test_the_resources_settings_are_listed_where_they_always_were():
    from apportion.serve.app.settings import SETTINGS

    # a config file written by --print-config keeps its order: the cores' split beside the slots, the
    # privacy settings after where notifications may go, then each user's budgets
    assert SETTINGS[SETTINGS.index("slots"):][:3] == ("slots", "cpu_split", "policy")
    at = SETTINGS.index("notify_hosts")
    assert SETTINGS[at:at + 7] == ("notify_hosts", "privacy_policy", "privacy_n", "privacy_t", "privacy_timeout_s",
                                   "privacy_rejected_portions", "max_active_jobs")
