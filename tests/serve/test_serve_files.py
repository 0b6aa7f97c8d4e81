"""The server's files are its OS user's alone: state directory 0700; state file (job specs with
their env, credential hashes), lock file and attempt logs 0600."""

from __future__ import annotations

import os
import stat
import sys

from apportion.executors.local import LocalExecutor
from apportion.serve.app.server import lock_state_dir
from apportion.serve.store.state import StateStore
from serve_helpers import wait_for


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_state_directory_its_state_file_and_lock_are_owner_only(tmp_path):
    state_dir = tmp_path / "deep" / "state"
    lock = lock_state_dir(state_dir)
    store = StateStore(state_dir / "state.db")
    store.insert_job(spec={"env": {"WANDB_API_KEY": "secret"}}, name="j", user="ann", queue="", priority=1.0,
                     kind="j", gpus=1, total_steps=1, submitted=0.0)
    assert mode(state_dir) == 0o700
    assert mode(state_dir / "state.db") == 0o600
    assert mode(state_dir / "server.lock") == 0o600
    for extra in ("state.db-wal", "state.db-shm"):
        if (state_dir / extra).exists():
            assert mode(state_dir / extra) == 0o600
    store.close()
    lock.close()


def test_a_state_file_left_world_readable_is_narrowed_when_opened(tmp_path):
    StateStore(tmp_path / "state.db").close()
    os.chmod(tmp_path / "state.db", 0o644)
    StateStore(tmp_path / "state.db").close()
    assert mode(tmp_path / "state.db") == 0o600


def test_attempt_logs_and_job_directories_are_owner_only(tmp_path):
    executor = LocalExecutor(tmp_path)
    executor.start(1, 1, [sys.executable, "-c", "print('hello')"], {"PATH": os.environ["PATH"]}, None, ())
    wait_for(lambda: executor.poll(), 30, "the attempt to end")
    assert executor.log_path(1, 1).read_text() == "hello\n"
    assert mode(executor.log_path(1, 1)) == 0o600
    assert mode(executor.job_dir(1)) == 0o700
