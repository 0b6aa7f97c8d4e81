"""A job's data stall from its progress reports: checked at the door, stored as the job's latest, and
shown by the API, `apportion queue`, `apportion logs` and /metrics."""

from __future__ import annotations

import re

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from apportion.cli import app
from apportion.executors.fake import FakeExecutor
from apportion.policies.las import Las
from apportion.serve.http.api import create_app
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import parse_slots
from apportion.serve.store.state import StateStore
from live_server import LiveServer
from serve_helpers import wait_for

JOB = {"name": "cnn", "command": "python train.py", "total_steps": 100, "user": "ann"}


def running_job(tmp_path):
    config = ServeConfig(state_dir=tmp_path, round_s=60.0, renew_wait_s=0.0)
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), FakeExecutor(tmp_path), parse_slots("cpu:1"),
                          Las(), config)
    client = TestClient(create_app(scheduler))
    client.post("/jobs", json=JOB)
    scheduler.tick()
    assert client.get("/jobs/1").json()["status"] == "running"
    return scheduler, client


def report(client, **fields):
    return client.post("/jobs/1/progress", json={"attempt": 1, "steps_done": 10, "steps_per_s": 2.0, **fields})


def stall_of(job: dict) -> tuple:
    return job["data_stall"], job["fetch_stall"], job["preprocess_stall"]


def test_the_latest_reported_stall_is_the_jobs_and_a_report_without_one_keeps_it(tmp_path):
    _, client = running_job(tmp_path)
    assert stall_of(client.get("/jobs/1").json()) == (None, None, None)  # never said

    assert report(client, data_stall=0.25, fetch_stall=0.2, preprocess_stall=0.05).status_code == 200
    assert stall_of(client.get("/jobs/1").json()) == (0.25, 0.2, 0.05)
    assert stall_of(client.get("/jobs").json()[0]) == (0.25, 0.2, 0.05)  # the list shows what the job's page does

    report(client)  # an older client's report: the stall stays
    assert stall_of(client.get("/jobs/1").json()) == (0.25, 0.2, 0.05)
    report(client, data_stall=0.5)  # its total alone: the parts are unknown now
    assert stall_of(client.get("/jobs/1").json()) == (0.5, None, None)


@pytest.mark.parametrize(("fields", "field"), [
    ({"data_stall": 1.5}, "data_stall"),
    ({"data_stall": -0.1}, "data_stall"),
    ({"data_stall": "most"}, "data_stall"),
    ({"data_stall": True}, "data_stall"),
    ({"fetch_stall": 0.1}, "fetch_stall"),  # a part without its whole
    ({"data_stall": 0.2, "fetch_stall": 0.2, "preprocess_stall": 0.2}, "preprocess_stall"),  # parts beyond the whole
])
def test_a_bad_stall_is_a_400_naming_the_field_and_changes_nothing(tmp_path, fields, field):
    _, client = running_job(tmp_path)
    answer = report(client, **fields)
    assert answer.status_code == 400 and answer.json()["field"] == field, answer.text
    assert client.get("/jobs/1").json()["steps_done"] == 0 and client.get("/jobs/1").json()["data_stall"] is None


def test_a_stall_that_is_not_a_number_is_refused(tmp_path):
    _, client = running_job(tmp_path)
    answer = client.post("/jobs/1/progress", content=b'{"attempt": 1, "steps_done": 3, "data_stall": NaN}',
                         headers={"content-type": "application/json"})
    assert 400 <= answer.status_code < 500
    assert client.get("/jobs/1").json()["data_stall"] is None


def test_metrics_carry_the_stall_of_running_jobs_only(tmp_path):
    scheduler, client = running_job(tmp_path)
    client.post("/jobs", json={**JOB, "name": "waiting"})  # one slot: job 2 waits
    report(client, data_stall=0.4, fetch_stall=0.3, preprocess_stall=0.1)
    scheduler.store.update_job(2, data_stall=0.9)  # from an attempt before: not running now

    samples = {(s.name, tuple(s.labels.items())): s.value
               for family in text_string_to_metric_families(client.get("/metrics").text) for s in family.samples}
    stalls = {key: value for key, value in samples.items() if "stall" in key[0]}
    assert stalls == {("apportion_job_data_stall_ratio", (("job", "1"),)): 0.4,
                      ("apportion_job_fetch_stall_ratio", (("job", "1"),)): 0.3,
                      ("apportion_job_preprocess_stall_ratio", (("job", "1"),)): 0.1}


def test_queue_and_logs_show_the_stall_a_job_reported_over_http(tmp_path):
    live = LiveServer(tmp_path / "state", slots="cpu:2").start()
    try:
        measured, silent = live.submit("loader", "ann"), live.submit("plain", "ann")
        wait_for(lambda: live.status_of(measured) == live.status_of(silent) == "running", 10, "both jobs to run")
        answer = httpx.post(f"{live.url}/jobs/{measured}/progress",
                            json={"attempt": 1, "steps_done": 40, "steps_per_s": 5.0, "data_stall": 2 / 3,
                                  "fetch_stall": 0.5, "preprocess_stall": 1 / 6})
        assert answer.status_code == 200, answer.text
        runner = CliRunner()
        table = runner.invoke(app, ["queue", "--server", live.url])
        logs = runner.invoke(app, ["logs", str(measured), "--server", live.url])
        quiet_logs = runner.invoke(app, ["logs", str(silent), "--server", live.url])
    finally:
        live.stop()

    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    header = lines[0].split()
    assert header[-3:] == ["PROGRESS", "STALL", "EST.FINISH"]
    cells = {line.split()[0]: line for line in lines[2:]}
    assert re.search(r" 40/1000 \(4%\)\s+67%\s", cells[str(measured)]), table.output
    assert re.search(r" 0/1000 \(0%\)\s+-\s", cells[str(silent)]), table.output
    assert logs.exit_code == 0
    assert logs.stderr.strip() == (f"--- job {measured} waited for data 67% of its step time (fetch 50%,"
                                   " pre-processing 17%), as of its latest progress report ---")
    assert quiet_logs.exit_code == 0 and quiet_logs.stderr == ""
