"""A full state directory: writes answer 507 and change nothing, exits wait to be recorded, and
the condition is shown until there is space again."""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import apportion
from apportion.executors.fake import FakeExecutor
from apportion.executors.local import LocalExecutor
from apportion.policies.fifo import Fifo
from apportion.serve.http.api import create_app
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import parse_slots
from apportion.serve.base.space import NoSpace
from apportion.serve.store.state import StateStore

JOB = {"name": "cnn", "command": "python train.py", "total_steps": 100, "user": "ann"}


class FullDisk:
    """The state file's connection on a full disk: every write and every commit fails as SQLite's
    do (SQLITE_FULL); ``at_commit``: only the commits (the writes fit in memory, the file is full)."""

    def __init__(self, conn: sqlite3.Connection, at_commit: bool = False) -> None:
        self.conn, self.full = conn, True
        self.failing = ("COMMIT",) if at_commit else ("INSERT", "UPDATE", "DELETE", "COMMIT")

    def execute(self, sql, *args):
        if self.full and sql.split(None, 1)[0].upper() in self.failing:
            raise sqlite3.OperationalError("database or disk is full")
        return self.conn.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self.conn, name)


def make(tmp_path, executor=None, log=None):
    config = ServeConfig(state_dir=tmp_path, round_s=60.0, renew_wait_s=0.0)
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), executor or FakeExecutor(tmp_path),
                          parse_slots("cpu:1"), Fifo(), config, log=log)
    return scheduler, TestClient(create_app(scheduler))


def fill(store: StateStore, at_commit: bool = False) -> FullDisk:
    disk = FullDisk(store._conn, at_commit)
    store._conn = disk
    return disk


def test_a_submit_on_a_full_state_file_is_a_507_naming_the_state_dir_and_changes_nothing(tmp_path):
    scheduler, client = make(tmp_path)
    assert client.post("/jobs", json=JOB).status_code == 200
    before = scheduler.store.jobs()
    pages = scheduler.store._conn.execute("PRAGMA page_count").fetchone()[0]
    scheduler.store._conn.execute(f"PRAGMA max_page_count = {pages}")  # SQLite's own SQLITE_FULL

    answers = [client.post("/jobs", json={**JOB, "name": f"n{i}", "command": "python train.py " + "x" * 2000})
               for i in range(40)]
    stored = [a.json()["id"] for a in answers if a.status_code == 200]
    refused = [a for a in answers if a.status_code != 200]
    assert refused and {a.status_code for a in refused} == {507}
    assert str(tmp_path) in refused[0].json()["detail"] and "out of space" in refused[0].json()["detail"]
    assert refused[0].json()["state_dir"] == str(tmp_path)
    assert scheduler.store.jobs()[: len(before)] == before
    assert [str(r.id) for r in scheduler.store.jobs()[len(before):]] == stored  # none half-stored
    assert len(scheduler.store.events()) == 1 + len(stored)


def test_cancel_lease_and_progress_on_a_full_disk_are_507_not_500(tmp_path):
    scheduler, client = make(tmp_path)
    client.post("/jobs", json=JOB)
    client.post("/jobs", json={**JOB, "name": "two"})
    scheduler.tick()
    before = scheduler.store.jobs()
    disk = fill(scheduler.store)

    assert client.post("/jobs", json=JOB).status_code == 507
    assert client.post("/jobs/2/cancel", json={"user": "ann"}).status_code == 507
    assert client.post("/jobs/1/lease", json={"attempt": 1, "steps_done": 3}).status_code == 507
    progress = client.post("/jobs/1/progress", json={"attempt": 1, "steps_done": 9, "steps_per_s": 3.0})
    assert progress.status_code == 507 and "out of space" in progress.json()["detail"]
    disk.full = False
    assert scheduler.store.jobs() == before
    assert client.post("/jobs/2/cancel", json={"user": "ann"}).status_code == 200


def test_an_exit_while_the_disk_is_full_is_settled_once_there_is_space(tmp_path):
    logged = []
    scheduler, client = make(tmp_path, log=logged.append)
    client.post("/jobs", json=JOB)
    scheduler.tick()
    disk = fill(scheduler.store)
    scheduler.executor.finish(1, 0)

    for _ in range(3):  # the tick fails, again and again, and loses nothing
        with pytest.raises(NoSpace):
            scheduler.tick()
        scheduler.watch_space()
    assert scheduler.store.job(1).status == "running" and not scheduler.executor.is_alive(1)
    assert sum("out of space" in line for line in logged) == 1

    disk.full = False
    scheduler.tick()
    scheduler.watch_space()
    row = scheduler.store.job(1)
    assert row.status == "completed" and not row.attempt_live
    assert sum("has space again" in line for line in logged) == 1


def test_a_round_the_full_state_file_refused_is_decided_again(tmp_path):
    scheduler, client = make(tmp_path)
    client.post("/jobs", json=JOB)
    disk = fill(scheduler.store, at_commit=True)
    with pytest.raises(NoSpace):
        scheduler.tick()
    assert scheduler.round == 0 and scheduler.store.job(1).status == "queued"
    disk.full = False
    scheduler.tick()
    assert scheduler.round == 1 and scheduler.store.meta("round") == "1"
    assert scheduler.store.job(1).status == "running"


def same_condition(shown: dict, first: dict) -> bool:
    """The same out-of-space condition: its free bytes are read afresh each time (the disk is shared)."""
    return {k: v for k, v in shown.items() if k != "free_bytes"} == {k: v for k, v in first.items() if k != "free_bytes"}


def test_status_shows_the_condition_until_there_is_space_again(tmp_path):
    scheduler, client = make(tmp_path)
    assert client.get("/status").json()["out_of_space"] is None
    disk = fill(scheduler.store)
    assert client.post("/jobs", json=JOB).status_code == 507

    shown = client.get("/status").json()["out_of_space"]
    assert shown["state_dir"] == str(tmp_path) and shown["since"] > 0 and shown["free_bytes"] >= 0
    assert same_condition(client.get("/dashboard/state").json()["server"]["out_of_space"], shown)
    with pytest.raises(NoSpace):  # still full: the tick's probe says so
        scheduler.tick()
    assert same_condition(client.get("/status").json()["out_of_space"], shown)

    disk.full = False
    pages = scheduler.store._conn.execute("PRAGMA page_count").fetchone()[0]
    scheduler.store._conn.execute(f"PRAGMA max_page_count = {pages}")  # a probe needs new pages
    with pytest.raises(NoSpace):
        scheduler.tick()
    scheduler.store._conn.execute("PRAGMA max_page_count = 1000000")
    scheduler.tick()
    assert client.get("/status").json()["out_of_space"] is None


def test_an_attempt_that_cannot_be_started_for_lack_of_space_is_no_crash(tmp_path, monkeypatch):
    scheduler, client = make(tmp_path)
    client.post("/jobs", json=JOB)

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(scheduler.executor, "start", no_space)
    with pytest.raises(NoSpace):
        scheduler.tick()
    row = scheduler.store.job(1)
    assert row.status == "queued" and row.retries == 0 and scheduler.store.full_since is not None
    monkeypatch.undo()
    scheduler.tick()
    assert scheduler.store.job(1).status == "running"


def test_a_wrapper_that_cannot_write_its_files_runs_its_job_and_still_gives_its_code(tmp_path):
    executor = LocalExecutor(tmp_path)
    executor.job_dir(1).mkdir(parents=True)
    os.mkdir(executor.exit_path(1, 1).with_suffix(".exit.tmp"))  # neither the exit record can be written
    os.mkdir(executor.pid_path(1, 1).with_suffix(".pid.tmp"))  # nor the pid file
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(Path(apportion.__file__).parents[1])}
    executor.start(1, 1, "exit 75", env, None, ("cpu:0",))
    ended = []
    for _ in range(400):
        ended = executor.poll()
        if ended:
            break
        time.sleep(0.05)
    assert [(e.job_id, e.code) for e in ended] == [(1, 75)]
    assert executor.exit_record(1, 1) is None


def test_a_real_full_filesystem_answers_507_and_settles_the_exit_once_there_is_space(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"this machine does not allow mounting a tmpfs: {done.stderr.strip()}")
    try:
        state_dir, go = mount / "state", tmp_path / "go"
        scheduler, client = make(state_dir, executor=LocalExecutor(state_dir))
        job = {**JOB, "command": f"while [ ! -e {go} ]; do sleep 0.05; done; exit 3"}
        assert client.post("/jobs", json=job).status_code == 200
        scheduler.tick()
        assert scheduler.store.job(1).status == "running"
        before = scheduler.store.jobs()
        ballast = mount / "ballast"
        with open(ballast, "wb", buffering=0) as handle:  # fill what is left
            try:
                while True:
                    handle.write(b"\0" * 4096)
            except OSError:
                pass
        answers = [client.post("/jobs", json={**JOB, "command": "python train.py " + "x" * 3000}) for _ in range(20)]
        assert {a.status_code for a in answers} == {507}
        assert client.get("/status").json()["out_of_space"]["free_bytes"] < 64 * 1024
        assert scheduler.store.jobs() == before

        go.touch()  # the job exits while the disk is full
        for _ in range(400):
            with pytest.raises(NoSpace):
                scheduler.tick()
            if not scheduler.executor.is_alive(1):
                break
            time.sleep(0.05)
        with pytest.raises(NoSpace):
            scheduler.tick()
        assert scheduler.store.job(1).status == "running"  # not recorded yet, and not lost

        ballast.unlink()
        scheduler.tick()
        row = scheduler.store.job(1)
        assert (row.retries, row.attempt) == (1, 2)  # settled as the crash it was, and retried
        assert [e.detail for e in scheduler.store.events(1) if e.event == "exit"] == [
            "attempt 1: exit 3; no checkpoint"]
        scheduler.executor.kill(1)
        assert client.get("/status").json()["out_of_space"] is None
        assert client.post("/jobs", json=JOB).status_code == 200
        scheduler.store.close()
    finally:
        (tmp_path / "go").touch()  # whatever attempt is still waiting ends
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_apportion_status_says_the_state_directory_is_out_of_space(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from apportion.cli import app
    from apportion.serve.client import Client

    scheduler, client = make(tmp_path)
    fill(scheduler.store)
    client.post("/jobs", json=JOB)
    monkeypatch.setattr(Client, "status", lambda self: client.get("/status").json())
    shown = CliRunner().invoke(app, ["status", "--server", "http://127.0.0.1:1"])
    assert shown.exit_code == 0 and "out of space since" in shown.output and "bytes free" in shown.output
