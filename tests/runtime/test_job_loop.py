"""The Job loop in-process, with plain Python state (no torch) and a fake lease server."""

import os
import signal
import socket
import time

import httpx
import pytest

from apportion.runtime import (
    PREEMPTED_EXIT_CODE,
    Checkpointer,
    Job,
    JobEnv,
    LeaseClient,
    ServerUnreachable,
    StaleAttempt,
)
from apportion.runtime.job import QUICK_LEASE_S
from apportion.runtime.testing import FakeLeaseServer

ENV_NAMES = [
    "APPORTION_SERVER", "APPORTION_JOB_ID", "APPORTION_ATTEMPT", "APPORTION_LEASE_END",
    "APPORTION_TOTAL_STEPS", "APPORTION_CHECKPOINT_DIR", "APPORTION_TOKEN", "APPORTION_SLOTS",
]  # fmt: skip


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)


def checkpoint_files(directory) -> list[str]:
    """The checkpoints in ``directory``, their SHA-256 files left out."""
    return sorted(name for name in os.listdir(directory) if name.endswith(".pt"))


def run(job: Job, state: dict, sleep_s: float = 0.0) -> list[int]:
    seen = []
    for step in job.steps(lambda: dict(state)):
        seen.append(step)
        state["done"] = step + 1
        if sleep_s:
            time.sleep(sleep_s)
    return seen


def test_env_is_read_and_an_empty_cuda_list_stays_empty():
    env = JobEnv.from_environ(
        {
            "APPORTION_SERVER": "http://h:1/", "APPORTION_JOB_ID": "7", "APPORTION_ATTEMPT": "3",
            "APPORTION_LEASE_END": "1700000000.5", "APPORTION_TOTAL_STEPS": "100",
            "APPORTION_CHECKPOINT_DIR": "/c", "APPORTION_SLOTS": "gpu:0,gpu:3", "CUDA_VISIBLE_DEVICES": "",
        }
    )  # fmt: skip
    assert (env.server, env.job_id, env.attempt, env.lease_end) == ("http://h:1", "7", 3, 1700000000.5)
    assert (env.total_steps, env.checkpoint_dir, env.slots) == (100, "/c", ("gpu:0", "gpu:3"))
    assert env.cuda_visible_devices == "" and not env.standalone
    assert JobEnv.from_environ({}).standalone


def test_standalone_runs_to_the_end_and_the_environment_wins_over_defaults(tmp_path, monkeypatch):
    job = Job.from_env(total_steps=5)
    assert job.standalone and job.checkpointer is None
    assert run(job, {}) == [0, 1, 2, 3, 4] and job.step == 5

    monkeypatch.setenv("APPORTION_TOTAL_STEPS", "3")
    monkeypatch.setenv("APPORTION_CHECKPOINT_DIR", str(tmp_path / "env"))
    job = Job.from_env(total_steps=5, checkpoint_dir=tmp_path / "arg")
    assert job.total_steps == 3 and job.checkpointer.directory == tmp_path / "env"


def test_renewed_leases_write_no_checkpoint_and_progress_is_reported(tmp_path, monkeypatch):
    with FakeLeaseServer() as server:
        for name, value in server.job_env(total_steps=40, checkpoint_dir=str(tmp_path)).items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("APPORTION_CHECKPOINT_EVERY", "off")  # a slow machine would reach the first periodic one
        job = Job.from_env(report_every_s=0.05)
        assert run(job, {}, sleep_s=0.005) == list(range(40))
        leases = server.lease_calls()
        progress = server.progress_calls()
    assert len(leases) == 40 and all(c["answer"]["renew"] for c in leases)
    assert [c["attempt"] for c in leases] == [1] * len(leases)
    assert os.listdir(tmp_path) == []  # renewal never checkpoints
    assert progress[-1]["steps_done"] == 40 and progress[-1]["steps_per_s"] > 0
    assert len(progress) >= 2  # periodic reports besides the final one
    assert job.steps_per_s and 20 < job.steps_per_s < 200  # about 1 / 5 ms


def test_the_job_says_hello_once_then_asks_only_near_its_lease_end(tmp_path, monkeypatch):
    far = time.time() + 3600
    with FakeLeaseServer(on_lease=lambda body: {"renew": True, "lease_end": far}) as server:
        env = server.job_env(total_steps=30, checkpoint_dir=str(tmp_path), lease_end=far)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        job = Job.from_env()
        run(job, {})
        assert [c["steps_done"] for c in server.lease_calls()] == [0]  # before the first step
    assert job.lease_end == far and os.listdir(tmp_path) == []


def test_a_refused_lease_checkpoints_the_last_completed_step_and_exits_75(tmp_path, monkeypatch):
    with FakeLeaseServer(refuse_at=[10]) as server:
        for name, value in server.job_env(total_steps=25, checkpoint_dir=str(tmp_path)).items():
            monkeypatch.setenv(name, value)
        state = {"done": 0}
        job = Job.from_env()
        with pytest.raises(SystemExit) as exit_info:
            run(job, state)
        assert exit_info.value.code == PREEMPTED_EXIT_CODE
        assert state["done"] == 10
        assert Checkpointer(tmp_path).load_latest()[:2] == (10, {"done": 10})

        monkeypatch.setenv("APPORTION_ATTEMPT", "2")
        monkeypatch.setenv("APPORTION_LEASE_END", str(time.time()))
        job = Job.from_env()
        state = job.restore({"done": 0})
        assert job.resumed and job.step == 10 and state == {"done": 10}
        assert run(job, state) == list(range(10, 25))
        assert server.lease_calls()[-1]["attempt"] == 2


def test_refusal_right_after_a_resume_rewrites_nothing(tmp_path, monkeypatch):
    Checkpointer(tmp_path).save({"done": 4}, 4)
    before = os.stat(tmp_path / "step-00000004.pt").st_mtime_ns
    with FakeLeaseServer(refuse_at=[0]) as server:
        for name, value in server.job_env(total_steps=9, checkpoint_dir=str(tmp_path)).items():
            monkeypatch.setenv(name, value)
        job = Job.from_env()
        state = job.restore()
        with pytest.raises(SystemExit):
            run(job, state)
    assert checkpoint_files(tmp_path) == ["step-00000004.pt"]
    assert os.stat(tmp_path / "step-00000004.pt").st_mtime_ns == before


def free_port() -> int:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_server_never_stops_training(tmp_path):
    port = free_port()
    env = JobEnv(job_id="j", server=f"http://127.0.0.1:{port}", lease_end=time.time())
    client = LeaseClient(env.server, "j", 1, deadline_s=0.1, backoff_s=0.02)
    messages = []
    job = Job(30, env=env, client=client, checkpoint_dir=tmp_path, lease_retry_s=0.05, log=messages.append)
    assert run(job, {}, sleep_s=0.005) == list(range(30))
    assert any("lease renewal failed" in m for m in messages)
    assert any("finished 30/30" in m for m in messages)


def test_a_server_that_comes_back_is_obeyed_and_no_step_is_lost(tmp_path):
    port = free_port()
    env = JobEnv(job_id="j", server=f"http://127.0.0.1:{port}", lease_end=time.time())
    client = LeaseClient(env.server, "j", 1, deadline_s=0.05, backoff_s=0.01)
    messages = []
    job = Job(
        500, env=env, client=client, checkpoint_dir=tmp_path, lease_retry_s=0.01, lease_retry_max_s=0.05,
        log=messages.append,
    )  # fmt: skip
    server = FakeLeaseServer(refuse_at=[0], port=port)  # back from its restart, it wants the GPUs
    state = {"done": 0}
    try:
        with pytest.raises(SystemExit) as exit_info:
            for step in job.steps(lambda: dict(state)):
                state["done"] = step + 1
                time.sleep(0.002)
                if step == 20:
                    server.start()
    finally:
        server.stop()
    assert exit_info.value.code == PREEMPTED_EXIT_CODE
    assert any("lease renewal failed" in m for m in messages)
    assert 20 < job.step < 500 and server.lease_calls()[0]["steps_done"] == job.step
    assert Checkpointer(tmp_path).load_latest()[:2] == (job.step, {"done": job.step})


def test_a_stale_attempt_exits_without_writing(tmp_path, monkeypatch):
    def move_on(body):  # after 8 steps the server starts attempt 2 elsewhere
        if body["steps_done"] >= 8:
            server.current_attempt = 2
        return None

    with FakeLeaseServer(current_attempt=1, on_lease=move_on) as server:
        for name, value in server.job_env(attempt=1, total_steps=20, checkpoint_dir=str(tmp_path)).items():
            monkeypatch.setenv(name, value)
        job = Job.from_env(checkpoint_every_s=1000.0)
        with pytest.raises(SystemExit) as exit_info:
            run(job, {})
        # it learns it is stale from whichever call comes first after the move: its next lease, or a
        # progress report it sends in the background (on a busy machine that can be the first)
        told = [c for c in server.calls if c.get("status") == 409]
        assert told and all(c["attempt"] == 1 for c in told)
    assert exit_info.value.code == PREEMPTED_EXIT_CODE
    assert job.step == 9 and os.listdir(tmp_path) == []


def test_sigterm_checkpoints_at_the_next_step_boundary(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    job = Job(20, checkpoint_dir=tmp_path)
    state = {"done": 0}
    with pytest.raises(SystemExit) as exit_info:
        for step in job.steps(lambda: dict(state)):
            state["done"] = step + 1
            if step == 6:
                os.kill(os.getpid(), signal.SIGTERM)
    assert exit_info.value.code == PREEMPTED_EXIT_CODE
    assert Checkpointer(tmp_path).load_latest()[:2] == (7, {"done": 7})
    assert signal.getsignal(signal.SIGTERM) is before  # the old handler is back


def test_periodic_checkpoints_are_written_in_the_background(tmp_path):
    job = Job(12, checkpoint_dir=tmp_path, checkpoint_every_s=0.0, keep=2)
    state = {"done": 0}
    for step in job.steps(lambda: dict(state)):
        state["done"] = step + 1
        while job.checkpointer.writing:  # a slow disk would make the job skip boundaries
            time.sleep(0.001)
    assert checkpoint_files(tmp_path) == ["step-00000010.pt", "step-00000011.pt"]
    assert Checkpointer(tmp_path).load_latest()[:2] == (11, {"done": 11})  # a boundary's state


def test_the_client_retries_5xx_then_answers_and_maps_409_to_stale_attempt():
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) < 3:
            return httpx.Response(503)
        if request.url.path.endswith("/progress"):
            return httpx.Response(409, json={"detail": "stale"})
        return httpx.Response(200, json={"renew": True, "lease_end": 123.0})

    transport = httpx.MockTransport(handler)
    client = LeaseClient("http://server", "j", 4, token="s3cret", backoff_s=0.001, transport=transport)
    answer = client.lease(17)
    assert (answer.renew, answer.lease_end) == (True, 123.0) and len(calls) == 3
    assert calls[-1].headers["Authorization"] == "Bearer s3cret"
    assert calls[-1].read() == b'{"attempt":4,"steps_done":17}'
    with pytest.raises(StaleAttempt):
        client.progress(18, 2.5)

    down = LeaseClient(
        "http://server", "j", 1, deadline_s=0.05, backoff_s=0.01,
        transport=httpx.MockTransport(lambda r: (_ for _ in ()).throw(httpx.ConnectError("refused"))),
    )  # fmt: skip
    with pytest.raises(ServerUnreachable, match="ConnectError"):
        down.lease(1)


def test_a_first_lease_call_with_a_long_lease_left_waits_only_briefly_for_an_absent_server(tmp_path):
    """A restarting server holds an attempt's first step up for half a second, not for the client's
    whole deadline; a call as the lease ends still waits that deadline for it."""
    refused = httpx.MockTransport(lambda request: (_ for _ in ()).throw(httpx.ConnectError("refused")))
    client = LeaseClient("http://server", "j", 1, deadline_s=60.0, backoff_s=0.01, transport=refused)
    deadlines = []
    lease = client.lease
    client.lease = lambda steps, deadline_s=None: deadlines.append(deadline_s) or lease(steps, deadline_s=deadline_s)
    messages = []
    env = JobEnv(job_id="j", server="http://server", lease_end=time.time() + 600)
    job = Job(3, env=env, client=client, checkpoint_dir=tmp_path, log=messages.append)
    assert run(job, {}) == [0, 1, 2]
    assert deadlines == [QUICK_LEASE_S]  # the first call, with 600 s of lease left; then it trained on
    assert any("lease renewal failed" in m and "within 0.5s" in m for m in messages)

    ending = Job(3, env=JobEnv(job_id="j", server="http://server", lease_end=time.time() + 3), client=client,
                 checkpoint_dir=tmp_path / "ending", log=messages.append)
    assert ending._lease_deadline() is None  # 3 s left: a renewal waits the client's whole deadline


def test_a_restore_that_passes_over_a_corrupt_checkpoint_says_so_at_its_first_lease_call(tmp_path, monkeypatch):
    ckpt = Checkpointer(tmp_path, keep=3)
    ckpt.save({"done": 5}, 5)
    newest = ckpt.save({"done": 9}, 9)
    data = bytearray(newest.read_bytes())
    data[data.find(b"time") + 10] ^= 1  # its time stamp changes: it still unpickles, only its digest tells
    newest.write_bytes(data)
    with FakeLeaseServer() as server:
        for name, value in server.job_env(attempt=2, total_steps=8, checkpoint_dir=str(tmp_path)).items():
            monkeypatch.setenv(name, value)
        job = Job.from_env(log=None)
        state = job.restore({"done": 0})
        assert (job.step, state) == (5, {"done": 5})
        run(job, state)
        first, *later = server.lease_calls()
    assert first["steps_done"] == 5
    assert first["skipped_checkpoints"][0].startswith("step-00000009.pt: checksum mismatch")
    assert all("skipped_checkpoints" not in call for call in later)  # said once


def test_each_periodic_checkpoint_is_followed_by_a_progress_report_at_least_at_its_step(tmp_path, monkeypatch):
    """What the server shows never lags the checkpoint a lost attempt would resume from."""
    far = time.time() + 3600
    with FakeLeaseServer(on_lease=lambda body: {"renew": True, "lease_end": far}) as server:
        for name, value in server.job_env(total_steps=60, checkpoint_dir=str(tmp_path), lease_end=far).items():
            monkeypatch.setenv(name, value)
        job = Job.from_env(report_every_s=3600.0, checkpoint_every_s=0.02)  # no report on the clock
        run(job, {}, sleep_s=0.005)
        reported = [c["steps_done"] for c in server.progress_calls()][:-1]  # the final report left out
    saved = [int(name.split("-")[1].split(".")[0]) for name in checkpoint_files(tmp_path)]
    assert saved and reported and max(reported) >= min(saved), (reported, saved)  # the older kept one, collected
    assert len(reported) >= 2
