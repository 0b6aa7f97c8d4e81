"""Who may do what on a server with credentials (apportion/serve/accounts/auth.py), through the HTTP API
over a fake executor: users' credentials, the admin's, and each attempt's own."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from apportion.executors.fake import FakeExecutor
from apportion.policies.las import Las
from apportion.serve.http.api import create_app
from apportion.serve.accounts.auth import add_user, check_secret
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import parse_slots
from apportion.serve.store.state import StateStore

JOB = {"name": "cnn", "command": "python train.py", "total_steps": 100}


class Cluster:
    """A server whose state file holds alice, bob and an admin, ops; ``as_(name)`` calls as one of them."""

    def __init__(self, tmp_path, max_retries: int = 3) -> None:
        self.store = StateStore(tmp_path / "state.db")
        self.scheduler = Scheduler(self.store, FakeExecutor(tmp_path), parse_slots("cpu:2"), Las(),
                                   ServeConfig(state_dir=tmp_path, round_s=60.0, renew_wait_s=0.0,
                                               max_retries=max_retries))
        self.client = TestClient(create_app(self.scheduler))
        self.credential = {name: add_user(self.store, name, admin=name == "ops", now=0.0)
                           for name in ("alice", "bob", "ops")}

    def headers(self, who: str) -> dict:
        credential = self.credential.get(who, who)  # a user's name, or a credential itself
        return {"Authorization": f"Bearer {credential}"}

    def get(self, path: str, who: str, **kwargs):
        return self.client.get(path, headers=self.headers(who), **kwargs)

    def post(self, path: str, who: str, body: dict | None = None):
        return self.client.post(path, headers=self.headers(who), json=body if body is not None else {})

    def submit(self, who: str, **fields) -> str:
        answer = self.post("/jobs", who, {**JOB, **fields})
        assert answer.status_code == 200, answer.text
        return answer.json()["id"]

    def attempt_credential(self, job_id: str, attempt: int = 1) -> str:
        return self.scheduler.executor.envs[(int(job_id), attempt)]["APPORTION_TOKEN"]


@pytest.fixture
def cluster(tmp_path):
    return Cluster(tmp_path)


def test_the_server_takes_the_user_from_the_credential(cluster):
    answer = cluster.post("/jobs", "alice", JOB)
    assert answer.json() == {"id": "1", "user": "alice"}
    assert cluster.post("/jobs", "alice", {**JOB, "user": "alice"}).json()["user"] == "alice"
    claimed = cluster.post("/jobs", "alice", {**JOB, "user": "bob"})
    assert claimed.status_code == 403
    assert claimed.json()["detail"].startswith("you are 'alice': acting as 'bob' is for admins")
    assert cluster.post("/jobs", "ops", {**JOB, "user": "bob"}).json()["user"] == "bob"  # an admin acts for others
    assert [j["user"] for j in cluster.get("/jobs", "bob").json()] == ["alice", "alice", "bob"]


def test_alice_cannot_cancel_bobs_job_but_an_admin_can(cluster):
    job = cluster.submit("bob")
    refused = cluster.post(f"/jobs/{job}/cancel", "alice")
    assert refused.status_code == 403
    assert refused.json()["detail"] == f"job {job} belongs to 'bob', not 'alice'"
    as_bob = cluster.post(f"/jobs/{job}/cancel", "alice", {"user": "bob"})  # `apportion cancel --user bob`
    assert as_bob.status_code == 403 and "acting as 'bob' is for admins" in as_bob.json()["detail"]
    assert cluster.get(f"/jobs/{job}", "bob").json()["status"] == "queued"
    assert cluster.post(f"/jobs/{job}/cancel", "ops").status_code == 200
    cancelled = cluster.get(f"/jobs/{job}", "bob").json()
    assert cancelled["status"] == "cancelled" and cancelled["reason"] == "cancelled by ops"


def test_only_the_owner_or_an_admin_reads_a_jobs_logs(cluster, tmp_path):
    job = cluster.submit("bob")
    cluster.scheduler.tick()
    log = tmp_path / "jobs" / job / "attempt-1.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("loss 0.5\n")
    refused = cluster.get(f"/jobs/{job}/logs", "alice")
    assert refused.status_code == 403
    assert refused.json()["detail"] == f"job {job} belongs to 'bob': only they or an admin may read its logs"
    assert cluster.get(f"/jobs/{job}/logs", "bob").json()["text"] == "loss 0.5\n"
    assert cluster.get(f"/jobs/{job}/logs", "ops").json()["text"] == "loss 0.5\n"


def test_a_failed_jobs_last_lines_are_shown_to_its_owner_only(tmp_path):
    cluster = Cluster(tmp_path, max_retries=0)  # failed at its first crash
    job = cluster.submit("bob")
    cluster.scheduler.tick()
    cluster.scheduler.executor.logs[(int(job), 1)] = "password=hunter2\nboom"
    cluster.scheduler.executor.finish(int(job), 1)
    cluster.scheduler.tick()
    assert cluster.get(f"/jobs/{job}", "bob").json()["last_lines"] == "password=hunter2\nboom"
    assert cluster.get(f"/jobs/{job}", "alice").json()["last_lines"] == ""
    assert cluster.get("/jobs", "alice").json()[0]["last_lines"] == ""


def test_a_failed_jobs_last_log_line_is_in_its_reason_for_its_owner_and_admins_only(tmp_path):
    cluster = Cluster(tmp_path, max_retries=1)  # retried once, then failed
    job = cluster.submit("bob")
    for attempt in (1, 2):
        cluster.scheduler.plan(cluster.scheduler.clock())
        cluster.scheduler.tick()
        cluster.scheduler.executor.logs[(int(job), attempt)] = "loss 0.5\npassword=hunter2"
        cluster.scheduler.executor.finish(int(job), 1)
        cluster.scheduler.tick()
    public = "exit 1 on attempt 2, after 1 retry"
    for owner_or_admin in ("bob", "ops"):
        shown = cluster.get(f"/jobs/{job}", owner_or_admin).json()
        assert (shown["status"], shown["reason"]) == ("failed", f"{public}: password=hunter2")
        assert cluster.get("/jobs", owner_or_admin).json()[0]["reason"] == f"{public}: password=hunter2"
        dashboard = TestClient(cluster.client.app, client=("127.0.0.1", 50000), headers=cluster.headers(owner_or_admin))
        assert dashboard.get("/dashboard/state").json()["jobs"][0]["reason"] == f"{public}: password=hunter2"

    anonymous = TestClient(cluster.client.app, client=("127.0.0.1", 50000))  # the dashboard on this machine
    as_alice = TestClient(cluster.client.app, client=("127.0.0.1", 50000), headers=cluster.headers("alice"))
    seen = [cluster.get("/jobs", "alice"), cluster.get(f"/jobs/{job}", "alice"), cluster.get("/status", "alice")]
    for reader in (anonymous, as_alice):
        seen += [reader.get("/dashboard/state"), reader.get(f"/dashboard/jobs/{job}")]
    for answer in seen:
        assert answer.status_code == 200 and "hunter2" not in answer.text
    assert cluster.get(f"/jobs/{job}", "alice").json()["reason"] == public
    assert anonymous.get("/dashboard/state").json()["jobs"][0]["reason"] == public


def test_an_attempt_credential_renews_its_own_lease_and_nothing_else(cluster):
    job, other = cluster.submit("alice"), cluster.submit("alice")
    cluster.scheduler.tick()
    mine = cluster.attempt_credential(job)
    assert cluster.post(f"/jobs/{job}/lease", mine, {"attempt": 1, "steps_done": 3}).json()["renew"] is True
    assert cluster.post(f"/jobs/{job}/progress", mine, {"attempt": 1, "steps_done": 5, "steps_per_s": 2.0}).json() == {}

    assert cluster.post(f"/jobs/{other}/lease", mine, {"attempt": 1}).status_code == 403
    assert cluster.post(f"/jobs/{job}/lease", mine, {"attempt": 2}).status_code == 403
    submitted = cluster.post("/jobs", mine, JOB)
    assert submitted.status_code == 403
    assert submitted.json()["detail"] == (f"this is the credential of attempt 1 of job {job}: it may only renew that "
                                          "attempt's lease and report its progress")
    assert cluster.post(f"/jobs/{job}/cancel", mine).status_code == 403
    assert cluster.get("/jobs", mine).status_code == 403
    assert cluster.get(f"/jobs/{job}/logs", mine).status_code == 403
    # and a user's credential does not stand in for the attempt's
    assert cluster.post(f"/jobs/{job}/lease", "alice", {"attempt": 1}).status_code == 403


def test_an_attempt_credential_stops_working_when_its_attempt_ends(cluster):
    job = cluster.submit("alice")
    cluster.scheduler.tick()
    first = cluster.attempt_credential(job)
    cluster.scheduler.executor.finish(int(job), 75)  # preempted: checkpointed and exited
    cluster.scheduler.tick()
    ended = cluster.post(f"/jobs/{job}/lease", first, {"attempt": 1})
    assert ended.status_code == 409  # the contract's stale attempt: exit at once
    assert ended.json()["detail"] == (f"attempt 1 of job {job} has ended (preempted): it may no longer renew its lease"
                                      " or report progress; the job is preempted")
    late = cluster.post(f"/jobs/{job}/progress", first, {"attempt": 1, "steps_done": 9})
    assert late.status_code == 409 and late.json()["detail"] == ended.json()["detail"]
    cluster.scheduler.plan(cluster.scheduler.clock())  # the next round: attempt 2 starts, with a credential of its own
    cluster.scheduler.tick()
    second = cluster.attempt_credential(job, 2)
    assert second != first
    assert cluster.post(f"/jobs/{job}/lease", second, {"attempt": 2}).json()["renew"] is True
    assert cluster.post(f"/jobs/{job}/lease", first, {"attempt": 2}).status_code == 403
    stale = cluster.post(f"/jobs/{job}/lease", first, {"attempt": 1})
    assert stale.json()["detail"] == f"attempt 1 of job {job} is not its current attempt (2)"


def test_a_submit_retried_with_its_idempotency_key_finds_the_job_it_stored(cluster):
    key = {"Idempotency-Key": "6f1c2a9e-retry.1:x_y"}
    first = cluster.client.post("/jobs", json=JOB, headers={**cluster.headers("alice"), **key})
    again = cluster.client.post("/jobs", json=JOB, headers={**cluster.headers("alice"), **key})
    assert first.json() == {"id": "1", "user": "alice"}
    assert again.status_code == 200 and again.json() == {"id": "1", "user": "alice", "existing": True}
    assert len(cluster.get("/jobs", "alice").json()) == 1

    other = cluster.client.post("/jobs", json={**JOB, "total_steps": 200}, headers={**cluster.headers("alice"), **key})
    assert other.status_code == 409
    assert other.json()["detail"] == ("Idempotency-Key '6f1c2a9e-retry.1:x_y' was used for job 1, a different request:"
                                      " a new job needs a new key")
    bobs = cluster.client.post("/jobs", json=JOB, headers={**cluster.headers("bob"), **key})  # each user's own keys
    assert bobs.json() == {"id": "2", "user": "bob"}
    assert [j["id"] for j in cluster.get("/jobs", "ops").json()] == ["1", "2"]


@pytest.mark.parametrize("key", ["", "a b", "x" * 129, "key/1", "caf\u00e9"])
def test_a_malformed_idempotency_key_is_refused_naming_the_header(cluster, key):
    answer = cluster.client.post("/jobs", json=JOB, headers={**cluster.headers("alice"),
                                                             "Idempotency-Key": key.encode()})
    assert answer.status_code == 400
    assert answer.json()["field"] == "Idempotency-Key"
    assert answer.json()["message"].startswith("must be 1 to 128 characters, each a letter, a digit or one of - _ . :")
    assert cluster.get("/jobs", "alice").json() == []


def test_no_wrong_or_revoked_credential_gets_in(cluster):
    assert cluster.client.get("/jobs").status_code == 401
    assert cluster.client.get("/status").json()["detail"].startswith("this server requires a credential")
    assert cluster.get("/jobs", "u1." + "0" * 64).status_code == 401
    assert cluster.get("/jobs", "a1.1." + "0" * 64).status_code == 401
    assert cluster.get("/jobs", "u99." + "0" * 64).status_code == 401
    assert cluster.get("/jobs", "alice").status_code == 200
    cluster.store.revoke_user("alice", now=1.0)
    revoked = cluster.get("/jobs", "alice")
    assert revoked.status_code == 401 and revoked.json()["detail"] == "the credential of user 'alice' has been revoked"
    renewed = add_user(cluster.store, "alice", admin=False, now=2.0, replace=True)
    assert cluster.get("/jobs", renewed).status_code == 200


def test_an_open_server_trusts_the_named_user_until_the_first_user_is_added(tmp_path):
    store = StateStore(tmp_path / "state.db")
    scheduler = Scheduler(store, FakeExecutor(tmp_path), parse_slots("cpu:1"), Las(), ServeConfig(state_dir=tmp_path))
    client = TestClient(create_app(scheduler))
    assert client.post("/jobs", json={**JOB, "user": "ann"}).json() == {"id": "1", "user": "ann"}
    add_user(store, "ann", admin=False, now=0.0)
    assert client.post("/jobs", json={**JOB, "user": "ann"}).status_code == 401
    store.revoke_user("ann", now=1.0)  # revoking every user does not open the server again
    assert client.get("/jobs").status_code == 401


def test_secrets_are_stored_as_salted_hashes_only(cluster, tmp_path):
    cluster.submit("alice")
    cluster.scheduler.tick()
    attempt = cluster.attempt_credential("1")
    cluster.store.close()
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("state.db*"))
    for credential in (*cluster.credential.values(), attempt):
        secret = credential.rsplit(".", 1)[1]
        assert secret.encode() not in stored
    users = StateStore(tmp_path / "state.db")
    salts = {users.user(name).hash.salt for name in ("alice", "bob", "ops")}
    assert len(salts) == 3 and users.user("alice").hash.kdf == "hmac-sha256"


@pytest.mark.parametrize("secret", ["", " ", "\t\n", None])
def test_an_empty_or_whitespace_secret_is_refused(secret):
    with pytest.raises(ValueError, match=r"^--token is empty: a credential needs a secret$"):
        check_secret(secret, "--token")


def test_a_secret_is_one_word():
    assert check_secret("  s3cret\n", "--token") == "s3cret"
    with pytest.raises(ValueError, match="--token holds whitespace or control characters"):
        check_secret("two words", "--token")


def test_user_names_are_plain_words(tmp_path):
    store = StateStore(tmp_path / "state.db")
    for bad in ("", "a b", "-x", "x" * 65, "ann\n"):
        with pytest.raises(ValueError, match="letters, digits"):
            add_user(store, bad, admin=False, now=0.0)
    add_user(store, "ann", admin=False, now=0.0)
    with pytest.raises(ValueError, match=r"^user 'ann' already has a credential \(--replace issues a new one"):
        add_user(store, "ann", admin=False, now=0.0)
