"""Where the slots are: `status` shows a gone node's slots as offline (and `status --json` says so
per slot, with the node each held slot runs on), and `queue` names the nodes of a job's ranks."""

from __future__ import annotations

from fastapi.testclient import TestClient
from test_lost_machines import V100_SLOTS, Clock, job
from typer.testing import CliRunner

from apportion.cli import app
from apportion.executors.fake import FakeExecutor
from apportion.policies.fifo import Fifo
from apportion.serve.client import Client
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.store.state import StateStore


class NodesExecutor(FakeExecutor):
    """A fake executor whose attempts run one rank a node, as Ray says where (``RayExecutor.nodes_of``)."""

    def nodes_of(self, job_id: int):
        attempt = self.running().get(job_id)
        return None if attempt is None else tuple(f"10.0.0.{rank + 5}/node{rank}" for rank in range(len(attempt.slots)))


def make(tmp_path):
    clock, executor = Clock(), NodesExecutor(tmp_path)
    config = ServeConfig(state_dir=tmp_path, round_s=10.0, grace_s=5.0, fill_gap_s=0.0, renew_wait_s=0.0)
    return Scheduler(StateStore(tmp_path / "state.db"), executor, V100_SLOTS, Fifo(), config, clock=clock), executor


def test_status_shows_a_gone_nodes_slots_offline_and_where_each_held_slot_runs(tmp_path):
    scheduler, executor = make(tmp_path)
    scheduler.submit(job("pair", gpus=2), "ann")
    scheduler.tick()
    executor.live_capacity = {"v100": 2}  # the node of the third slot is gone

    slots = scheduler.status()["slots"]
    assert [(s["id"], s["job"], s["offline"], s["node"]) for s in slots] == [
        ("v100:0", "1", False, "10.0.0.5/node0"), ("v100:1", "1", False, "10.0.0.6/node1"), ("v100:2", None, True, None)]
    assert scheduler.job_info(scheduler.store.job(1))["nodes"] == ["10.0.0.5/node0", "10.0.0.6/node1"]


def test_the_cli_names_offline_slots_and_a_jobs_nodes(tmp_path, monkeypatch):
    scheduler, executor = make(tmp_path)
    scheduler.submit(job("pair", gpus=2), "ann")
    scheduler.tick()
    executor.live_capacity = {"v100": 2}
    api = TestClient(scheduler_app(scheduler))
    monkeypatch.setattr(Client, "status", lambda self: api.get("/status").json())
    monkeypatch.setattr(Client, "jobs", lambda self: api.get("/jobs").json())
    runner = CliRunner()

    status = runner.invoke(app, ["status"]).output
    assert "v100:0(v100)=job 1 on 10.0.0.5/node0" in status and "v100:2(v100)=offline" in status, status
    queue = runner.invoke(app, ["queue", "--all"]).output
    assert "v100:0,v100:1 on 10.0.0.5/node0,10.0.0.6/node1" in " ".join(queue.split()), queue
    slots = runner.invoke(app, ["status", "--json"]).output
    assert '"offline": true' in slots and '"node": "10.0.0.6/node1"' in slots


def scheduler_app(scheduler):
    from apportion.serve.http.api import create_app

    return create_app(scheduler)


def test_the_dashboard_shows_a_gone_nodes_slots_offline(tmp_path):
    from apportion.serve.http.dashboard import state_view
    from apportion.serve.views.history import History

    scheduler, executor = make(tmp_path)
    scheduler.submit(job("one"), "ann")
    scheduler.tick()
    executor.live_capacity = {"v100": 1}

    slots = state_view(scheduler, History(), None, False)["slots"]
    assert [(s["id"], s["jobs"], s["offline"], s["node"]) for s in slots] == [
        ("v100:0", ["1"], False, "10.0.0.5/node0"), ("v100:1", [], True, None), ("v100:2", [], True, None)]


def test_a_lost_jobs_progress_and_log_give_the_step_it_resumes_from_not_its_last_report(tmp_path):
    from apportion.runtime import Checkpointer

    lines: list[str] = []
    clock, executor = Clock(), NodesExecutor(tmp_path)
    config = ServeConfig(state_dir=tmp_path, round_s=10.0, grace_s=5.0, fill_gap_s=0.0, renew_wait_s=0.0)
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), executor, V100_SLOTS[:1], Fifo(), config, clock=clock,
                          log=lines.append)
    scheduler.submit(job("lost"), "ann")
    scheduler.tick()
    scheduler.lease(1, 1, 29)  # its last report
    Checkpointer(tmp_path / "jobs" / "1" / "checkpoints").save({"w": 1}, 51)  # written after it
    executor.lose(1, "its Ray node died")
    for ended in executor.poll():
        scheduler.lifecycle.on_exit(ended, clock.now)

    assert scheduler.store.job(1).steps_done == 51
    assert "job 1 crashed (lost: its Ray node died) at step 51; retry 1 from step 51 (its last checkpoint)" in lines
