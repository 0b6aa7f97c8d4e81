"""End to end: the real server and a real apportion.runtime job whose newest checkpoint is
corrupt. The job resumes from the older one, and the server records that step and the file."""

from __future__ import annotations

import sys

import httpx

from apportion.runtime import Checkpointer
from apportion.serve.store.state import StateStore
from serve_helpers import REPO, Server, all_done, wait_for


def test_a_real_job_passes_over_its_corrupt_newest_checkpoint_and_the_server_records_where_it_resumed(tmp_path):
    checkpoints = tmp_path / "ckpt"  # a resubmitted job's directory: step 20 intact, step 40 damaged since
    Checkpointer(checkpoints, keep=3).save({"value": 1}, 20)
    newest = Checkpointer(checkpoints, keep=3).save({"value": 1}, 40)
    data = bytearray(newest.read_bytes())
    data[data.find(b"time") + 10] ^= 1  # it still unpickles: only its digest tells
    newest.write_bytes(data)

    with Server(tmp_path / "state", "--slots", "cpu:1", "--round-s", "2") as server:
        job = {"name": "damaged", "command": [sys.executable, str(REPO / "tests/serve/runtime_job.py")],
               "total_steps": 60, "checkpoint_dir": str(checkpoints), "env": {"STEP_S": "0.01"}, "user": "ann"}
        assert httpx.post(f"{server.url}/jobs", json=job, timeout=10).status_code == 200
        (done,) = wait_for(lambda: all_done(server, 1), 60, "the job to finish", server)
    assert done["status"] == "completed", done
    log = (server.state_dir / "jobs" / "1" / "attempt-1.log").read_text()
    assert "skipping step-00000040.pt: checksum mismatch" in log and "resumed from step-00000020.pt at step 20" in log
    store = StateStore(server.state_dir / "state.db")
    assert [a.first_step for a in store.attempts()] == [20]
    (resumed,) = [e.detail for e in store.events(1) if e.event == "resumed"]
    assert resumed.startswith("attempt 1 at step 20; its restore skipped step-00000040.pt: checksum mismatch")
    assert (checkpoints / "step-00000040.pt.corrupt").exists()
