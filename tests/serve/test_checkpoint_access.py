"""Under ``--run-as mapped`` the root server reads a job's checkpoint directory as the job's OS
account: a directory that account cannot use is refused at submit, and checkpoints it cannot
read never count as the job's progress; nor may a job name a workdir its account cannot enter.
The tests make two throwaway OS accounts (root only)."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from test_serve_scheduler import job

from apportion.executors.fake import FakeExecutor
from apportion.policies.las import Las
from apportion.runtime import Checkpointer
from apportion.serve.http.api import create_app
from apportion.serve.accounts.auth import add_user
from apportion.serve.accounts.runas import RunAs, lookup
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import parse_slots
from apportion.serve.store.state import StateStore

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="reading files as another OS account needs root (and useradd)"),
    pytest.mark.skipif(shutil.which("useradd") is None, reason="no useradd here to make throwaway OS accounts"),
]


@pytest.fixture
def accounts():
    """Two new OS accounts, ``alice`` and ``bob`` (random names), removed afterwards."""
    names = {who: f"apck{who[0]}{secrets.token_hex(4)}" for who in ("alice", "bob")}
    made = []
    try:
        for name in names.values():
            subprocess.run(["useradd", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
                            name], check=True, capture_output=True)
            made.append(name)
        yield {who: lookup(name, who) for who, name in names.items()}
    finally:
        for name in made:
            subprocess.run(["userdel", name], capture_output=True)


@pytest.fixture
def place():
    """A directory the accounts may reach (pytest's own temporary directories are root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="apportion-access-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def owned(path, account, mode=0o700):
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, account.uid, account.gid)
    os.chmod(path, mode)
    return path


def server(tmp_path, accounts):
    store = StateStore(tmp_path / "state.db")
    config = ServeConfig(state_dir=tmp_path / "state", round_s=10.0, max_retries=3,
                         run_as=RunAs("mapped", {"alice": accounts["alice"].name}))
    scheduler = Scheduler(store, FakeExecutor(tmp_path / "state"), parse_slots("cpu:1"), Las(), config)
    token = add_user(store, "alice", admin=False, now=0.0)
    return scheduler, TestClient(create_app(scheduler)), {"Authorization": f"Bearer {token}"}


def test_a_checkpoint_dir_another_account_owns_is_refused_at_submit(tmp_path, place, accounts):
    scheduler, client, alice = server(tmp_path, accounts)
    bobs = owned(place / "bob" / "ckpt", accounts["bob"])
    Checkpointer(bobs).save({"weights": "bob's"}, 500)

    refused = client.post("/jobs", json=job("thief", checkpoint_dir=str(bobs)), headers=alice)
    assert refused.status_code == 400 and refused.json()["field"] == "checkpoint_dir"
    assert refused.json()["message"] == (f"cannot read and write it (as OS account {accounts['alice'].name}, "
                                         f"which runs the job)")
    inside = client.post("/jobs", json=job("thief", checkpoint_dir=str(bobs / "sub")), headers=alice)
    assert inside.status_code == 400 and inside.json()["message"].startswith(f"cannot reach {bobs / 'sub'}: Permission")

    alices = owned(place / "alice" / "ckpt", accounts["alice"])
    assert client.post("/jobs", json=job("own", checkpoint_dir=str(alices)), headers=alice).status_code == 200
    new = client.post("/jobs", json=job("new", checkpoint_dir=str(alices / "new")), headers=alice)
    assert new.status_code == 200  # not there yet: the job creates it, as alice


def test_a_checkpoint_dir_made_unreadable_after_submit_does_not_count_as_progress(tmp_path, place, accounts):
    scheduler, client, alice = server(tmp_path, accounts)
    directory = owned(place / "alice" / "ckpt", accounts["alice"])
    assert client.post("/jobs", json=job("j", checkpoint_dir=str(directory)), headers=alice).status_code == 200
    scheduler.tick()
    assert scheduler.executor.running()[1].attempt == 1

    Checkpointer(directory).save({"done": 40}, 40)  # (written by root here: then handed to bob)
    os.chown(directory, accounts["bob"].uid, accounts["bob"].gid)
    for path in directory.iterdir():
        os.chown(path, accounts["bob"].uid, accounts["bob"].gid)
    scheduler.executor.finish(1, 3)
    for ended in scheduler.executor.poll():  # settled, and not yet restarted
        scheduler.lifecycle.on_exit(ended, scheduler.clock())
    row = scheduler.store.job(1)
    assert row.steps_done == 0
    assert row.reason == (f"exit 3; retry 1 of 3 from step 0: cannot list {directory}: Permission denied"
                             f" (as OS account {accounts['alice'].name})")


def test_a_workdir_the_jobs_account_cannot_enter_is_refused_at_submit(tmp_path, place, accounts):
    scheduler, client, alice = server(tmp_path, accounts)
    bobs = owned(place / "bob" / "work", accounts["bob"])
    refused = client.post("/jobs", json=job("peek", workdir=str(bobs)), headers=alice)
    assert refused.status_code == 400 and refused.json()["field"] == "workdir"
    assert refused.json()["message"] == (f"cannot enter and read {bobs} (as OS account {accounts['alice'].name}, "
                                         f"which runs the job)")
    assert scheduler.store.jobs() == []

    alices = owned(place / "alice" / "work", accounts["alice"])
    assert client.post("/jobs", json=job("own", workdir=str(alices)), headers=alice).status_code == 200


def test_a_workdir_below_a_directory_the_account_cannot_pass_is_refused_not_taken_for_missing(tmp_path, place,
                                                                                             accounts):
    scheduler, client, alice = server(tmp_path, accounts)
    bobs = owned(place / "bob", accounts["bob"])
    (bobs / "work").mkdir()
    os.chmod(bobs / "work", 0o777)  # open itself, but below bob's 0700 home: alice cannot reach it
    name = accounts["alice"].name
    there = client.post("/jobs", json=job("peek", workdir=str(bobs / "work")), headers=alice)
    absent = client.post("/jobs", json=job("peek", workdir=str(bobs / "nothing")), headers=alice)
    assert there.status_code == absent.status_code == 400 and there.json()["field"] == "workdir"
    # the same answer whether or not it exists: what alice may not look at, she learns nothing of
    assert there.json()["message"] == (f"cannot reach {bobs / 'work'}: Permission denied (as OS account {name}, "
                                       f"which runs the job)")
    assert absent.json()["message"] == there.json()["message"].replace("work", "nothing")
    assert scheduler.store.jobs() == []
    missing = client.post("/jobs", json=job("typo", workdir=str(place / "nowhere")), headers=alice)
    assert missing.status_code == 400 and missing.json()["message"].startswith(f"no such directory: {place}/nowhere")
