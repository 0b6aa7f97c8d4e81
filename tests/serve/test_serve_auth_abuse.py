"""A server with credentials tried as a hostile client would (auth.py, throttle.py, edge.py):
malformed credentials are 401s, wrong ones cost no slow hash, a client that keeps trying is
slowed down (429) without locking out the real users at its address, an oversized body is
refused before it is read, and no user takes a name that carries meaning."""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from apportion.cli import app as cli
from apportion.executors.fake import FakeExecutor
from apportion.policies.las import Las
from apportion.serve.http.api import create_app
from apportion.serve.accounts.auth import KDF, SCRYPT_KDF, Authenticator, add_user, scrypt_secret
from apportion.serve.base.bounds import MAX_BODY
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.app.server import ServerError, ServerOptions, serve
from apportion.serve.base.slots import parse_slots
from apportion.serve.store.state import StateStore
from apportion.serve.accounts.throttle import FailureLimiter

JOB = {"name": "cnn", "command": "python train.py", "total_steps": 100}
HEX = "0" * 64


def server(tmp_path, limiter: FailureLimiter | None = None, max_body: int = MAX_BODY):
    """(client, store, alice's credential, scheduler) of a server over a fake executor whose one user is alice."""
    store = StateStore(tmp_path / "state.db")
    scheduler = Scheduler(store, FakeExecutor(tmp_path), parse_slots("cpu:1"), Las(),
                          ServeConfig(state_dir=tmp_path, round_s=60.0, renew_wait_s=0.0))
    alice = add_user(store, "alice", admin=False, now=0.0)
    app = create_app(scheduler, max_body=max_body, authenticator=Authenticator(store, limiter=limiter))
    return TestClient(app), store, alice, scheduler


MALFORMED = [
    "Bearer u99999999999999999999999." + HEX,  # past SQLite's 64-bit integers
    "Bearer u9223372036854775808." + HEX,  # 2**63: one past them
    "Bearer u" + "9" * 5000 + "." + HEX,
    "Bearer a1." + "9" * 5000 + "." + HEX,
    "Bearer a" + "9" * 40 + ".1." + HEX,
    "Bearer a1.99999999999." + HEX,  # an attempt number past MAX_ATTEMPT
    "Bearer u0." + HEX, "Bearer u01." + HEX, "Bearer u1." + HEX.upper(), "Bearer u1." + HEX + "0",
    "Bearer u1." + HEX + " extra", "Bearer u\u00b2.".encode("latin-1") + HEX.encode(),  # a latin-1 digit
    b"Bearer u1.\xff\xfe", b"Bearer \xe9\xe8",  # bytes that are not ASCII (read as latin-1)
    "", " ", "Bearer", "Bearer ", "bearer\t", "Basic YWxpY2U6c2VjcmV0", "Token " + HEX, "u1." + HEX,
]
ENDPOINTS = [("GET", "/jobs"), ("GET", "/jobs/1"), ("POST", "/jobs"), ("POST", "/jobs/1/cancel"),
             ("POST", "/jobs/1/lease"), ("POST", "/jobs/1/progress"), ("GET", "/jobs/1/logs"), ("GET", "/status"),
             ("GET", "/dashboard/state"), ("GET", "/dashboard/jobs/1")]


def test_every_malformed_credential_is_a_401_on_every_endpoint(tmp_path):
    client, _, alice, _ = server(tmp_path, limiter=FailureLimiter(burst=10**6))
    assert client.post("/jobs", json=JOB, headers={"Authorization": f"Bearer {alice}"}).status_code == 200
    bodies = {"/jobs": JOB, "/jobs/1/lease": {"attempt": 1}, "/jobs/1/progress": {"attempt": 1, "steps_done": 1}}
    for header in MALFORMED:
        for method, path in ENDPOINTS:
            answer = client.request(method, path, headers={"Authorization": header},
                                    json=bodies.get(path) if method == "POST" else None)
            assert answer.status_code == 401, (header[:40], path, answer.status_code, answer.text[:200])
            assert answer.json()["detail"] and answer.headers["www-authenticate"] == "Bearer"


def test_a_wrong_credential_costs_no_scrypt(tmp_path, monkeypatch):
    client, _, alice, _ = server(tmp_path)

    def no_scrypt(*args, **kwargs):
        raise AssertionError("scrypt was run for a credential")

    monkeypatch.setattr(hashlib, "scrypt", no_scrypt)
    for wrong in (f"u1.{secrets.token_hex(32)}", f"u2.{secrets.token_hex(32)}", f"u77.{secrets.token_hex(32)}"):
        assert client.get("/status", headers={"Authorization": f"Bearer {wrong}"}).status_code == 401
    assert client.get("/status", headers={"Authorization": f"Bearer {alice}"}).status_code == 200


def test_a_user_stored_with_scrypt_still_gets_in_and_is_migrated(tmp_path, monkeypatch):
    client, store, _, scheduler = server(tmp_path)
    secret, salt = secrets.token_hex(32), secrets.token_bytes(16)
    user_id = store.put_user("old", admin=False, salt=salt.hex(), digest=scrypt_secret(secret, salt), kdf=SCRYPT_KDF,
                             now=0.0)
    credential = {"Authorization": f"Bearer u{user_id}.{secret}"}
    assert client.get("/status", headers={"Authorization": f"Bearer u{user_id}.{HEX}"}).status_code == 401
    assert client.get("/status", headers=credential).status_code == 200
    assert store.user("old").hash.kdf == KDF
    monkeypatch.setattr(hashlib, "scrypt", lambda *a, **k: pytest.fail("scrypt after the migration"))
    fresh = TestClient(create_app(scheduler))
    assert fresh.get("/status", headers=credential).status_code == 200  # a new server: its hash is the fast one


def test_a_client_that_keeps_trying_gets_429_but_a_verified_credential_still_gets_in(tmp_path):
    client, _, alice, scheduler = server(tmp_path, limiter=FailureLimiter(burst=5, per_s=0.01, hold_s=0.0))
    good = {"Authorization": f"Bearer {alice}"}
    assert client.get("/status", headers=good).status_code == 200
    codes = [client.get("/status", headers={"Authorization": f"Bearer u1.{secrets.token_hex(32)}"}).status_code
             for _ in range(8)]
    assert codes == [401] * 5 + [429] * 3
    refused = client.get("/jobs", headers={"Authorization": f"Bearer u1.{secrets.token_hex(32)}"})
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    assert refused.json()["detail"].startswith("too many wrong credentials from this address")
    assert client.get("/status", headers=good).status_code == 200  # the same address, a credential seen before
    assert client.get("/dashboard/state", headers=good).status_code == 200
    assert client.post("/jobs", json=JOB, headers=good).status_code == 200
    scheduler.tick()  # its attempt starts: its own credential, never seen, still gets in
    attempt = {"Authorization": f"Bearer {scheduler.executor.envs[(1, 1)]['APPORTION_TOKEN']}"}
    assert client.post("/jobs/1/lease", json={"attempt": 1, "steps_done": 0}, headers=attempt).status_code == 200
    assert client.post("/jobs/1/lease", json={"attempt": 1}, headers={"Authorization": f"Bearer a1.1.{HEX}"}
                       ).status_code == 429


def test_the_limiter_keeps_a_bounded_number_of_clients_and_refills():
    now = [0.0]
    limiter = FailureLimiter(burst=2, per_s=0.5, most_clients=3, clock=lambda: now[0])
    for address in ("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"):
        limiter.failed(address)
    assert len(limiter) == 3
    limiter.failed("10.0.0.5")
    assert limiter.retry_after("10.0.0.5") == 2  # one token back takes 2 s
    now[0] = 2.0
    assert limiter.retry_after("10.0.0.5") == 0
    for _ in range(5):  # failures already under way when the bucket emptied: paid back by waiting longer
        limiter.failed("10.0.0.6")
    assert limiter.retry_after("10.0.0.6") == 6  # 2 tokens of debt (at most burst) and the one to spend
    limiter.failed("2001:db8::1")
    limiter.failed("2001:db8::2")  # the same /64: the same client
    assert limiter.retry_after("2001:db8::3") > 0


def _post_raw(app, headers: list[tuple[bytes, bytes]], chunks: int, chunk: bytes) -> tuple[int, dict, int]:
    """POST /jobs to ``app`` with ``chunks`` pieces of body: (status, JSON answer, bytes the app read)."""
    read = 0
    sent: list[dict] = []

    async def receive():
        nonlocal read
        if read >= chunks * len(chunk):
            return {"type": "http.request", "body": b"", "more_body": False}
        read += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": True}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/jobs", "raw_path": b"/jobs", "query_string": b"", "root_path": "",
             "headers": [(b"host", b"testserver"), (b"content-type", b"application/json"), *headers],
             "client": ("203.0.113.9", 5000), "server": ("testserver", 80)}
    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], json.loads(body), read


@pytest.mark.parametrize("authorized", [False, True])
def test_a_body_over_the_limit_is_refused_before_it_is_read(tmp_path, authorized):
    client, _, alice, _ = server(tmp_path, max_body=4096)
    auth = [(b"authorization", f"Bearer {alice}".encode())] if authorized else []
    status, answer, read = _post_raw(client.app, [(b"content-length", str(10**9).encode()), *auth], 1000, b"x" * 1024)
    assert (status, read) == (413, 0)
    assert answer["detail"].startswith("the request body is over 4,096 bytes")
    status, answer, read = _post_raw(client.app, auth, 1000, b"x" * 1024)  # chunked: no length given
    assert status == 413 and read <= 4096 + 1024 and answer["detail"].startswith("the request body is over")
    assert client.post("/jobs", json=JOB, headers={"Authorization": f"Bearer {alice}"}).status_code == 200


def test_the_body_limit_fits_the_largest_valid_job(tmp_path):
    job = {**JOB, "env": {f"V{i}": "\u00e9" * 16384 for i in range(256)}}  # every variable at its longest
    body = json.dumps(job).encode()  # each é as \u00e9
    assert len(body) < MAX_BODY
    client, _, alice, _ = server(tmp_path)
    assert client.post("/jobs", content=body, headers={"Authorization": f"Bearer {alice}",
                                                       "Content-Type": "application/json"}).status_code == 200


@pytest.mark.parametrize("name", ["admin", "root", "Admin", "ROOT"])
def test_names_that_carry_meaning_are_reserved(tmp_path, name):
    store = StateStore(tmp_path / "state.db")
    with pytest.raises(ValueError, match=rf"^user name '{name}' is reserved \("):
        add_user(store, name, admin=True, now=0.0)
    store.close()
    added = CliRunner().invoke(cli, ["users", "add", name, "--state-dir", str(tmp_path)])
    assert added.exit_code == 2 and added.output.startswith(f"error: user name '{name}' is reserved (")


def test_a_stored_user_with_a_reserved_name_is_refused_until_revoked(tmp_path):
    client, store, _, _ = server(tmp_path)
    user_id = store.put_user("admin", admin=False, salt="00" * 16, digest="", kdf=KDF, now=0.0)
    refused = client.get("/jobs", headers={"Authorization": f"Bearer u{user_id}.{HEX}"})
    assert refused.status_code == 401 and "user name 'admin' is reserved" in refused.json()["detail"]
    with pytest.raises(ServerError, match=r"user name 'admin' is reserved .*apportion users revoke admin"):
        serve(ServerOptions(state_dir=tmp_path), slots=[], policy=None, log=print)
    store.revoke_user("admin", now=1.0)
    assert client.get("/jobs", headers={"Authorization": f"Bearer u{user_id}.{HEX}"}).json()["detail"] == \
        "the credential of user 'admin' has been revoked"


def test_the_servers_socket_says_tcp_so_its_answers_are_not_held_by_nagle():
    import socket

    from apportion.serve.app.server import listen

    sock = listen("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP  # asyncio then sets TCP_NODELAY on each connection
    finally:
        sock.close()
