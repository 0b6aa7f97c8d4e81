"""`from apportion import Client` against a real server (uvicorn on a loopback port, fake jobs that
run until the test ends them): submit a dict, a file or a JobSpec, wait, read logs, cancel, errors."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from apportion import Client, ClientError, WaitTimedOut
from apportion.serve.client import ENDED
from apportion.serve.jobs.jobspec import JobSpec
from apportion.serve.store.state import TERMINAL
from live_server import LiveServer
from serve_helpers import wait_for

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def server(tmp_path):
    running = LiveServer(tmp_path / "state").start()
    yield running
    running.stop()


@pytest.fixture()
def client(server):
    with Client(server.url) as connected:
        yield connected


def running(server, job_id: str):
    return server.status_of(int(job_id)) == "running" or None


def test_a_dict_of_job_fields_is_submitted_and_waited_for(server, client, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    job = client.submit({"name": "cnn", "command": ["python", "train.py"], "total_steps": 100, "user": "ann"})
    assert job == {"id": job["id"], "user": "ann"}
    wait_for(lambda: running(server, job["id"]), 10, "the job to start")
    threading.Timer(0.3, server.finish, args=(int(job["id"]),)).start()

    done = client.wait(job["id"], timeout=10, poll_s=0.05)

    assert (done["id"], done["name"], done["status"]) == (job["id"], "cnn", "completed")
    assert server.store.job(int(job["id"])).spec["workdir"] == str(tmp_path)  # from where it was submitted


def test_a_job_file_and_a_jobspec_are_submitted_as_they_are(server, client, tmp_path):
    path = tmp_path / "lm.yaml"
    path.write_text("name: lm\ncommand: python lm.py\ntotal_steps: 5\nenv: {LR: '0.1'}\n")
    from_file = client.submit(path, user="bob")
    from_spec = client.submit(JobSpec(name="spec", command=["python", "x.py"], total_steps=3), user="bob")

    assert [client.job(j["id"])["name"] for j in (from_file, from_spec)] == ["lm", "spec"]
    assert server.store.job(int(from_file["id"])).spec["env"] == {"LR": "0.1"}
    assert {j["id"] for j in client.jobs()} == {from_file["id"], from_spec["id"]}


def test_a_field_that_does_not_fit_is_refused_before_anything_is_sent(server, client, tmp_path):
    with pytest.raises(ClientError) as refused:
        client.submit({"name": "x", "command": "python x.py", "total_steps": 10, "gpus": "two", "user": "ann"})
    assert (refused.value.field, refused.value.status) == ("gpus", None)
    assert refused.value.message == "must be a whole number from 1 to 1,048,576, got 'two' (a string)"

    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ncommand: python x.py\ntotal_steps: -1\n")
    with pytest.raises(ClientError) as from_file:
        client.submit(bad)
    assert str(from_file.value).startswith(f"{bad}:3: field 'total_steps': ") and from_file.value.field == "total_steps"
    assert client.jobs() == []


def test_what_the_server_refuses_names_the_field_and_the_status(client):
    with pytest.raises(ClientError) as too_big:
        client.submit({"name": "big", "command": "x", "total_steps": 10, "gpus": 3, "user": "ann"})
    assert (too_big.value.status, too_big.value.field) == (400, "gpus")
    assert too_big.value.message == "asks for 3; the most this server has of an allowed type is 2 (cpu)"

    with pytest.raises(ClientError) as missing:
        client.job(999)
    assert missing.value.status == 404 and missing.value.field is None and str(missing.value) == "no job 999"


def test_wait_gives_up_after_its_timeout_with_the_job_as_last_seen(server, client):
    job = client.submit({"name": "long", "command": "x", "total_steps": 1000, "user": "ann"})
    wait_for(lambda: running(server, job["id"]), 10, "the job to start")

    with pytest.raises(WaitTimedOut) as late:
        client.wait(job["id"], timeout=0.2, poll_s=0.05)

    assert isinstance(late.value, TimeoutError) and isinstance(late.value, ClientError)
    assert late.value.job["status"] == "running"
    assert str(late.value) == f"job {job['id']} had not ended after 0.2 s: running, 0/1000 steps"


def test_logs_are_text_and_follow_yields_chunks_until_the_job_ends(server, client):
    job = client.submit({"name": "talky", "command": "x", "total_steps": 10, "user": "ann"})
    wait_for(lambda: running(server, job["id"]), 10, "the job to start")
    log = server.executor.log_path(int(job["id"]), 1)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("step 1\nstep 2\n")
    assert client.logs(job["id"]) == "step 1\nstep 2\n"

    def write_more_and_finish():
        with open(log, "a") as handle:
            handle.write("done\n")
        server.finish(int(job["id"]))

    chunks = client.logs(job["id"], follow=True)
    first = next(chunks)
    threading.Timer(0.2, write_more_and_finish).start()
    assert first + "".join(chunks) == "step 1\nstep 2\ndone\n"  # the iterator ended with the job
    assert client.job(job["id"])["status"] == "completed"


def test_cancel_is_for_the_job_s_user(server, client):
    job = client.submit({"name": "queued", "command": "x", "total_steps": 10, "gpus": 2, "user": "ann"})
    with pytest.raises(ClientError) as refused:
        client.cancel(job["id"], user="mallory")
    assert refused.value.status == 403 and "belongs to 'ann'" in str(refused.value)

    client.cancel(job["id"], user="ann")
    assert client.wait(job["id"], timeout=10, poll_s=0.05)["status"] == "cancelled"


def test_queue_and_status(server, client):
    job = client.submit({"name": "a", "command": "x", "total_steps": 10, "user": "ann"})
    assert [j["id"] for j in client.queue()] == [job["id"]]
    assert client.status()["counts"]["queued"] + client.status()["counts"]["running"] == 1


def test_an_unreachable_server_is_a_client_error_naming_its_url():
    with Client("http://127.0.0.1:9") as nobody, pytest.raises(ClientError) as unreachable:
        nobody.status()
    assert str(unreachable.value).startswith("cannot reach the apportion server at http://127.0.0.1:9")
    assert unreachable.value.status is None


def test_ended_is_the_server_s_terminal_statuses():
    assert set(ENDED) == set(TERMINAL)


def test_import_apportion_does_not_load_the_client_until_asked_for():
    code = ("import sys, apportion; loaded = 'apportion.serve.client' in sys.modules; "
            "from apportion import Client; print(loaded, Client.__module__)")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert shown.stdout.split() == ["False", "apportion.serve.client"]


def test_without_a_credential_the_job_is_the_os_user_s(client):
    from apportion.serve.jobs.jobspec import default_user

    job = client.submit({"name": "mine", "command": "x", "total_steps": 10})
    assert job["user"] == default_user() == client.job(job["id"])["user"]
    client.cancel(job["id"])  # as the same user
    assert client.wait(job["id"], timeout=10, poll_s=0.05)["status"] == "cancelled"


def test_a_submit_over_its_users_rate_waits_as_the_server_asks_then_gives_up(server, client, monkeypatch):
    import apportion.serve.client as client_module
    from apportion.serve.accounts.budgets import BudgetRules, Limits, SubmitRate

    server.scheduler.requests.budgets.rate = SubmitRate(BudgetRules(Limits(submit_rate=2.0, submit_burst=1)))
    job = {"name": "x", "command": "python x.py", "total_steps": 10, "user": "ann"}
    client.submit(job)

    second = client.submit(job)  # answered 429 with Retry-After: 1, then stored

    assert server.store.job(int(second["id"])).user == "ann"
    monkeypatch.setattr(client_module, "SUBMIT_WAIT_S", 0.5)  # less than the wait the server asks
    with pytest.raises(ClientError) as refused:
        client.submit(job)
    assert refused.value.status == 429 and refused.value.retry_after == 1.0
    assert "ann submits faster than their budget allows" in str(refused.value)


def test_a_429_for_wrong_credentials_is_not_waited_out_as_a_submit_rate(tmp_path):
    guarded = LiveServer(tmp_path / "guarded", users=("ann",)).start()
    try:
        for _ in range(25):  # past the limit of wrong credentials from one address
            with Client(guarded.url, token="u1." + "0" * 64) as wrong, pytest.raises(ClientError) as refused:
                wrong.submit({"name": "x", "command": "python x.py", "total_steps": 10})
    finally:
        guarded.stop()
    assert refused.value.status == 429 and refused.value.retry_after is None  # None: submit() raises at once
