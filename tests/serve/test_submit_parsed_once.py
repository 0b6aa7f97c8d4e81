"""A submit is read once and checked once (apportion/serve/scheduler/requests.py, ``Requests.checked``):
its notify URL is split, and its array's indices listed, one time each, however many checks use them."""

from __future__ import annotations

import sys

import pytest
from fastapi.testclient import TestClient

from apportion.executors.fake import FakeExecutor
from apportion.policies.las import Las
from apportion.serve.base.slots import parse_slots
from apportion.serve.http.api import create_app
from apportion.serve.jobs import job_array, notify_hosts
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.store.state import StateStore

JOB = {"name": "cnn", "command": "python train.py", "total_steps": 100, "user": "ann",
       "notify": "https://hooks.example.com/apportion", "array": "0-7%2"}


@pytest.fixture
def client(tmp_path):
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), FakeExecutor(tmp_path), parse_slots("cpu:1"), Las(),
                          ServeConfig(state_dir=tmp_path, round_s=60.0, renew_wait_s=0.0))
    return TestClient(create_app(scheduler))


def counted(monkeypatch, module, name: str) -> list:
    """Count the calls of ``module.name`` wherever serve/ imported it by name."""
    original, calls = getattr(module, name), []

    def counting(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    for loaded in list(sys.modules.values()):
        if getattr(loaded, "__name__", "").startswith("apportion.serve") and getattr(loaded, name, None) is original:
            monkeypatch.setattr(loaded, name, counting)
    return calls


def test_a_submit_splits_its_notify_url_and_lists_its_array_once(client, monkeypatch):
    urls = counted(monkeypatch, notify_hosts, "notify_target")
    arrays = counted(monkeypatch, job_array, "parse_array")
    answer = client.post("/jobs", json=JOB)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"id": "1", "user": "ann", "tasks": 8}
    assert len(urls) == 1 and len(arrays) == 1


def test_a_submit_sent_again_with_its_key_reads_nothing_and_names_its_tasks(client, monkeypatch):
    first = client.post("/jobs", json=JOB, headers={"Idempotency-Key": "k1"})
    urls = counted(monkeypatch, notify_hosts, "notify_target")
    again = client.post("/jobs", json=JOB, headers={"Idempotency-Key": "k1"})
    assert again.json() == {**first.json(), "existing": True} and first.json()["tasks"] == 8
    assert urls == []


def test_a_refused_notify_host_is_named_from_the_one_read(client, monkeypatch):
    urls = counted(monkeypatch, notify_hosts, "notify_target")
    answer = client.post("/jobs", json={**JOB, "notify": "http://127.0.0.1:8080/hook"})
    assert answer.status_code == 400 and answer.json()["field"] == "notify"
    assert len(urls) == 1
