"""One job's fields never stop the others: what a round or the perf model would choke on is
refused at submit, and whatever still fails in a round fails that job alone."""

from __future__ import annotations

from fastapi.testclient import TestClient

from apportion.executors.fake import FakeExecutor
from apportion.policies.las import Las
from apportion.serve.api import create_app
from apportion.serve.scheduler import Scheduler, ServeConfig
from apportion.serve.slots import parse_slots
from apportion.serve.state import StateStore

BAD_LAYOUT = {"name": "x", "command": ["python", "t.py"], "total_steps": 10, "user": "ann", "model": "gpt3-1.3b",
              "global_batch": 8, "layout": "tp=0 pp=-1"}
GOOD = {"name": "ok", "command": "python train.py", "total_steps": 10, "user": "bob"}


def make(tmp_path, slots="cpu:2"):
    config = ServeConfig(state_dir=tmp_path, round_s=60.0, renew_wait_s=0.0)
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), FakeExecutor(tmp_path), parse_slots(slots), Las(), config)
    return scheduler, TestClient(create_app(scheduler), raise_server_exceptions=False)


def test_a_layout_the_perf_model_cannot_use_is_a_400_naming_layout(tmp_path):
    scheduler, client = make(tmp_path)

    answer = client.post("/jobs", json=BAD_LAYOUT)

    assert answer.status_code == 400, answer.text
    assert answer.json()["field"] == "layout"
    assert "tensor-parallel size must be a positive integer, got 0" in answer.json()["message"]
    assert client.get("/jobs").json() == []
    on_two = client.post("/jobs", json={**BAD_LAYOUT, "layout": "tp=2 pp=1", "global_batch": 8})
    assert on_two.status_code == 400 and "does not divide the job's 1 GPU(s)" in on_two.json()["message"]
    assert client.post("/jobs", json={**BAD_LAYOUT, "layout": "tp=2 pp=1", "gpus": 2}).status_code == 200
