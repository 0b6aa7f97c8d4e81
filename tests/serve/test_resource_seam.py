"""Optional resources behind one seam (serve/resources/base.py): each is one package and one line of
serve/resources/registry.py, and the round and the server reach it only through its hooks."""

from __future__ import annotations

import ast
import sqlite3
from pathlib import Path

import numpy as np
from fastapi.testclient import TestClient
from prometheus_client.core import GaugeMetricFamily

from apportion.executors.fake import FakeExecutor
from apportion.mechanism.admission import Verdict
from apportion.policies.las import Las
from apportion.serve.attempts.accounting import accrued
from apportion.serve.base.slots import parse_slots
from apportion.serve.http.api import create_app
from apportion.serve.resources import registry
from apportion.serve.resources.base import AdmissionPart, Resource
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


class Tokens(Resource):
    """A resource made up here: a job named ``greedy`` waits for a token nobody has; the server shows how
    many jobs asked, counts progress reports, and offers one slot fewer while it holds a token back."""

    name = "tokens"
    given = ("tokens",)

    def __init__(self, host, given) -> None:
        super().__init__(host, given)
        self.tokens = given.get("tokens", 0)
        self.asked, self.reports, self.ticks = 0, 0, 0

    def parts(self):
        return {"token_count": lambda: self.tokens}

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
