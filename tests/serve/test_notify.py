"""Job notifications (notify: URL) through the HTTP API, to a tiny receiver on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner
from serve_helpers import Server

from apportion.cli import app
from apportion.core.errors import InputError
from apportion.executors.fake import FakeExecutor
from apportion.policies.las import Las
from apportion.serve.http.api import create_app
from apportion.serve.jobs.jobspec import load_job_file
from apportion.serve.notify.notifier import Notifier
from apportion.serve.jobs.notify_hosts import NotifyHosts
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.base.slots import parse_slots
from apportion.serve.store.state import StateStore


class Receiver:
    """An HTTP server on 127.0.0.1 that records every POST and answers by path: /ok 200, /broken 500,
    /slow after 2 s, /moved 302 (to /ok)."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict, dict]] = []  # (path, headers, JSON body)
        received = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                received.append((self.path, dict(self.headers), json.loads(body)))
                if self.path == "/slow":
                    time.sleep(2.0)
                status = {"/ok": 200, "/broken": 500, "/slow": 200, "/moved": 302}.get(self.path, 404)
                self.send_response(status)
                if status == 302:
                    self.send_header("Location", "/ok")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def to(self, path: str) -> list[dict]:
        return [body for where, _, body in self.posts if where == path]


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.server.shutdown()


@pytest.fixture
def stop():
    event = threading.Event()
    yield event
    event.set()


def make(tmp_path, hosts: str | None = "127.0.0.1", **notifier):
    rule = NotifyHosts.parse(hosts)
    config = ServeConfig(state_dir=tmp_path, round_s=60.0, renew_wait_s=0.0, max_retries=0, notify_hosts=rule,
                         server_url="http://apportion.example:8642")
    scheduler = Scheduler(StateStore(tmp_path / "state.db"), FakeExecutor(tmp_path), parse_slots("cpu:2"), Las(),
                          config)
    log: list[str] = []  # the server's log: the notifications' detail
    options = {"timeout_s": 0.5, "tries": 3, "backoff_s": 0.05, "poll_s": 0.02, "log": log.append, **notifier}
    sender = Notifier(scheduler.store, scheduler.lock, rule, config.server_url, **options)
    return scheduler, TestClient(create_app(scheduler)), sender, log


NOT_DELIVERED = "not delivered (the server's log says why)"  # all a job's events say of a failure


def job(name: str, notify: str) -> dict:
    return {"name": name, "command": "train", "total_steps": 10, "user": "ann", "queue": "research", "notify": notify}


def events(client, job_id: str) -> list[tuple[str, str]]:
    return [(e["event"], e["detail"]) for e in client.get(f"/dashboard/jobs/{job_id}").json()["events"]]


def wait_for(predicate, what: str, timeout: float = 10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_completed_and_failed_jobs_are_posted_once_with_their_summary(tmp_path, receiver, stop):
    scheduler, client, sender, log = make(tmp_path)
    sender.start(stop)
    done = client.post("/jobs", json=job("done", f"{receiver.url}/ok")).json()["id"]
    crashed = client.post("/jobs", json=job("crashed", f"{receiver.url}/ok")).json()["id"]
    scheduler.tick()
    scheduler.progress(int(done), 1, 10, 1.0)
    time.sleep(0.2)
    assert receiver.posts == []  # running jobs are not notified
    scheduler.executor.finish(int(done), 0)
    scheduler.executor.finish(int(crashed), 1)
    scheduler.tick()
    wait_for(lambda: len(receiver.posts) == 2, "two notifications")

    bodies = {body["id"]: body for body in receiver.to("/ok")}
    assert bodies[done]["status"] == "completed" and bodies[crashed]["status"] == "failed"
    assert bodies[done]["exit_code"] == 0 and bodies[crashed]["exit_code"] == 1
    assert (bodies[done]["steps_done"], bodies[done]["total_steps"]) == (10, 10)
    assert bodies[crashed]["reason"] == "exit 1 on attempt 1, after 0 retries"
    assert (bodies[done]["name"], bodies[done]["user"], bodies[done]["queue"]) == ("done", "ann", "research")
    assert bodies[done]["url"] == f"http://apportion.example:8642/jobs/{done}"
    assert bodies[done]["submitted"] <= bodies[done]["started"] <= bodies[done]["finished"]
    headers = next(h for _, h, _ in receiver.posts)
    assert headers["Content-Type"] == "application/json" and headers["Host"] == receiver.url.removeprefix("http://")
    wait_for(lambda: ("notify", "delivered") in events(client, done), "the job's notify event")
    assert f"job {done} notification: {receiver.url.removeprefix('http://')} answered 200" in log
    time.sleep(0.2)
    assert len(receiver.posts) == 2  # once each


def test_a_cancelled_job_is_notified_when_its_attempt_has_exited(tmp_path, receiver, stop):
    scheduler, client, sender, log = make(tmp_path)
    sender.start(stop)
    job_id = client.post("/jobs", json=job("stopped", f"{receiver.url}/ok")).json()["id"]
    scheduler.tick()
    client.post(f"/jobs/{job_id}/cancel", json={"user": "ann"})
    scheduler.tick()  # the fake attempt obeys SIGTERM: it exits, and is settled here
    wait_for(lambda: receiver.to("/ok"), "the notification")
    body = receiver.to("/ok")[0]
    assert body["status"] == "cancelled" and body["reason"] == "cancelled by ann"


def test_a_receiver_answering_500_is_retried_then_given_up_and_the_job_is_unaffected(tmp_path, receiver, stop):
    scheduler, client, sender, log = make(tmp_path)
    sender.start(stop)
    job_id = client.post("/jobs", json=job("j", f"{receiver.url}/broken")).json()["id"]
    scheduler.tick()
    scheduler.executor.finish(1, 0)
    scheduler.tick()
    host = receiver.url.removeprefix("http://")
    wait_for(lambda: ("notify-failed", NOT_DELIVERED) in events(client, job_id), "the notify-failed event")
    assert f"job {job_id} notification failed: {host} answered 500; gave up after 3 tries" in log
    assert len(receiver.to("/broken")) == 3
    shown = client.get(f"/jobs/{job_id}").json()
    assert shown["status"] == "completed" and shown["reason"] == ""


def test_a_receiver_that_does_not_answer_in_time_is_given_up_after_its_tries(tmp_path, receiver, stop):
    scheduler, client, sender, log = make(tmp_path, tries=2)
    sender.start(stop)
    job_id = client.post("/jobs", json=job("j", f"{receiver.url}/slow")).json()["id"]
    scheduler.tick()
    scheduler.executor.finish(1, 0)
    scheduler.tick()
    host = receiver.url.removeprefix("http://")
    wait_for(lambda: any(e == "notify-failed" for e, _ in events(client, job_id)), "the notify-failed event")
    assert events(client, job_id)[-1] == ("notify-failed", NOT_DELIVERED)
    assert log[-1] == f"job {job_id} notification failed: no answer from {host} within 0.5 s; gave up after 2 tries"
    assert len(receiver.to("/slow")) == 2
    assert client.get(f"/jobs/{job_id}").json()["status"] == "completed"


def test_a_redirect_is_not_followed(tmp_path, receiver, stop):
    scheduler, client, sender, log = make(tmp_path)
    sender.start(stop)
    job_id = client.post("/jobs", json=job("j", f"{receiver.url}/moved")).json()["id"]
    scheduler.tick()
    scheduler.executor.finish(1, 0)
    scheduler.tick()
    wait_for(lambda: any(e == "notify-failed" for e, _ in events(client, job_id)), "the notify-failed event")
    assert log[-1].endswith("answered 302 (redirects are not followed); not retried")
    assert receiver.to("/ok") == [] and len(receiver.to("/moved")) == 1


def test_a_name_that_resolves_to_a_refused_address_is_not_posted_and_its_event_says_only_not_delivered(
        tmp_path, receiver, stop, monkeypatch):
    scheduler, client, sender, log = make(tmp_path, hosts=None)  # the default rule: no loopback
    port = int(receiver.url.rsplit(":", 1)[1])
    real = socket.getaddrinfo
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, *args, **kw: real(
        "127.0.0.1" if host == "hooks.example.com" else host, *args, **kw))  # a name pointed at loopback
    sender.start(stop)
    job_id = client.post("/jobs", json=job("j", f"http://hooks.example.com:{port}/ok")).json()["id"]  # taken: a name
    scheduler.tick()
    scheduler.executor.finish(1, 0)
    scheduler.tick()
    wait_for(lambda: any(e == "notify-failed" for e, _ in events(client, job_id)), "the notify-failed event")
    assert events(client, job_id)[-1] == ("notify-failed", NOT_DELIVERED)
    assert "127.0.0.1 (hooks.example.com) is a loopback address" in log[-1]
    assert receiver.posts == []


@pytest.mark.parametrize("url, hosts, message", [
    ("ftp://hooks.example.com/x", None, "must be an http:// or https:// URL, got scheme 'ftp'"),
    ("http://169.254.169.254/latest/meta-data/", None, "169.254.169.254 (169.254.169.254) is a cloud metadata service"),
    ("http://[::ffff:169.254.169.254]/", None, "is a cloud metadata service"),
    ("http://100.100.100.200/latest/meta-data/", None, "is a cloud metadata service"),  # Alibaba
    ("http://[fd00:ec2::254]/latest/meta-data/", None, "is a cloud metadata service"),  # AWS over IPv6
    ("http://192.0.0.192/opc/v2/instance/", None, "is a cloud metadata service"),  # Oracle
    ("http://metadata.google.internal/computeMetadata/v1/", None, "metadata.google.internal is a cloud metadata service"),
    ("http://10.1.2.3/", None, "10.1.2.3 (10.1.2.3) is a private address"),
    ("http://172.20.0.1/", None, "is a private address"),
    ("http://192.168.1.1/", None, "is a private address"),
    ("http://[fc00::1]/", None, "is a private (unique local) address"),
    ("http://100.64.0.1/", None, "is a shared (carrier-grade NAT) address"),
    ("http://[::ffff:10.0.0.1]/", None, "is a private address"),  # IPv4-mapped
    ("http://[64:ff9b::7f00:1]/", None, "is a loopback address"),  # NAT64 of 127.0.0.1
    ("http://[2002:a9fe:a9fe::]/", None, "is a cloud metadata service"),  # 6to4 of 169.254.169.254
    ("http://localhost:8642/", None, "localhost is a local name, not a public one"),
    ("http://db.internal/", None, "db.internal is a local name"),
    ("http://2130706433/", None, "writes its host as a number (2130706433)"),  # 127.0.0.1 in decimal
    ("http://0177.0.0.1/", None, "writes its host as a number (0177.0.0.1)"),  # in octal
    ("http://127.1/", None, "writes its host as a number (127.1)"),  # a short dotted form
    ("http://0x7f.1/", None, "writes its host as a number (0x7f.1)"),  # hex
    ("http://0x7f000001/", None, "writes its host as a number"),
    ("http://1.2.3.4./", None, "writes its host as a number"),
    ("http://[fe80::1%25eth0]/", None, "names a zone in its address"),
    ("http://hooks.example.com%2e127.0.0.1/", None, "a host is a DNS name"),
    ("http://127.0.0.1\\@hooks.example.com/", None, "must not carry a user or password"),
    ("http://hooks.example.com@127.0.0.1/", "hooks.example.com", "must not carry a user or password"),
    ("http://user:secret@hooks.example.com/", None, "must not carry a user or password"),
    ("http:///nohost", None, "names no host"),
    ("http://hooks.example.com/a b", None, "must be a URL of printable ASCII without spaces"),
    ("https://elsewhere.example.org/", "hooks.example.com,10.0.0.0/8",
     "elsewhere.example.org is not among the hosts this server notifies (its --notify-hosts)"),
    ("https://hooks.example.com/", "none", "this server sends no notifications"),
])
def test_a_notify_url_the_server_will_not_call_is_a_400_naming_the_field(tmp_path, url, hosts, message):
    _, client, _, _ = make(tmp_path, hosts=hosts)
    answer = client.post("/jobs", json=job("j", url))
    assert answer.status_code == 400
    assert answer.json()["field"] == "notify" and message in answer.json()["message"]
    assert client.get("/jobs").json() == []


def test_the_operators_list_allows_names_patterns_and_networks():
    rule = NotifyHosts.parse("hooks.example.com, *.corp.example, 10.0.0.0/8, 169.254.1.1")
    from ipaddress import ip_address

    assert rule.address_refusal("hooks.example.com", ip_address("203.0.113.5")) is None
    assert rule.address_refusal("ci.corp.example", ip_address("203.0.113.5")) is None
    assert rule.address_refusal("corp.example", ip_address("203.0.113.5")) is not None  # only names under it
    assert rule.address_refusal("anything", ip_address("10.2.3.4")) is None
    assert rule.address_refusal("hooks.example.com", ip_address("169.254.169.254")) is not None  # never by name
    assert rule.address_refusal("metadata", ip_address("169.254.1.1")) is None  # named as an address: allowed
    with pytest.raises(Exception, match="'bad/host' is not a host name"):
        NotifyHosts.parse("bad/host")


def test_private_and_metadata_addresses_are_refused_by_default_and_allowed_when_the_operator_names_them(tmp_path):
    from ipaddress import ip_address

    default = NotifyHosts.parse(None)
    for refused in ("10.1.2.3", "100.100.100.200", "fd00:ec2::254", "192.0.0.192", "169.254.169.254", "::ffff:127.0.0.1"):
        assert default.address_refusal("hooks.example.com", ip_address(refused)) is not None, refused
    for public in ("203.0.114.7", "8.8.8.8", "2001:4860::8888"):
        assert default.address_refusal("hooks.example.com", ip_address(public)) is None, public

    opened = NotifyHosts.parse("10.0.0.0/8, 100.100.100.200, fd00:ec2::/32, metadata.google.internal")
    for allowed in ("10.1.2.3", "100.100.100.200", "fd00:ec2::254", "::ffff:10.1.2.3"):
        assert opened.address_refusal("x", ip_address(allowed)) is None, allowed
    assert opened.address_refusal("metadata.google.internal", ip_address("169.254.169.254")) is not None  # by name: never
    _, client, _, _ = make(tmp_path, hosts="10.0.0.0/8, metadata.google.internal")
    for url in ("http://10.1.2.3:8080/hook", "http://metadata.google.internal/hook"):
        assert client.post("/jobs", json=job("j", url)).status_code == 200, url


def test_apportion_serve_notifies_with_its_notify_hosts_and_is_scraped(tmp_path, receiver):
    with Server(tmp_path / "state", "--slots", "cpu:2", "--notify-hosts", "127.0.0.1", "--max-retries", "0",
                "--no-warm-start") as server:
        for name, command in (("ok", "true"), ("broken", "false")):
            answer = httpx.post(f"{server.url}/jobs", timeout=10, json={
                "name": name, "command": command, "total_steps": 1, "user": "ann", "notify": f"{receiver.url}/ok"})
            assert answer.status_code == 200, answer.text
        refused = httpx.post(f"{server.url}/jobs", timeout=10, json={
            "name": "x", "command": "true", "total_steps": 1, "user": "ann", "notify": "https://example.com/"})
        assert refused.status_code == 400 and refused.json()["field"] == "notify"
        wait_for(lambda: len(receiver.posts) == 2, "two notifications", timeout=60)
        assert sorted(body["status"] for body in receiver.to("/ok")) == ["completed", "failed"]
        text = httpx.get(f"{server.url}/metrics", timeout=10).text
    assert 'apportion_jobs{queue="",status="completed"} 1.0' in text
    assert 'apportion_jobs{queue="",status="failed"} 1.0' in text
    assert 'apportion_attempts_ended_total{how="failed"} 1.0' in text


def test_a_job_file_with_a_bad_notify_url_is_refused_naming_its_line(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("name: cnn\ncommand: python train.py\ntotal_steps: 10\nnotify: gopher://hooks.example.com/\n")
    with pytest.raises(InputError) as caught:
        load_job_file(path)
    assert str(caught.value) == (f"{path}:4: field 'notify': must be an http:// or https:// URL, got scheme 'gopher'")


def test_serve_refuses_a_notify_hosts_entry_that_is_no_host_before_starting(tmp_path):
    result = CliRunner().invoke(app, ["serve", "--state-dir", str(tmp_path / "state"), "--notify-hosts", "bad/host"])
    assert result.exit_code != 0
    assert "--notify-hosts: 'bad/host' is not a host name, *.domain, address or network" in result.output
    assert not (tmp_path / "state").exists()


def test_a_notification_the_state_file_cannot_record_yet_is_recorded_later_never_sent_twice(tmp_path, receiver, stop,
                                                                                          monkeypatch):
    scheduler, client, sender, log = make(tmp_path)
    job_id = client.post("/jobs", json=job("j", f"{receiver.url}/ok")).json()["id"]
    scheduler.tick()
    scheduler.executor.finish(1, 0)
    scheduler.tick()
    notified = scheduler.store.notified

    def full(*args):
        raise scheduler.store.no_space("disk full")

    monkeypatch.setattr(scheduler.store, "notified", full)
    sender.start(stop)
    wait_for(lambda: receiver.to("/ok"), "the notification")
    time.sleep(0.3)  # many polls while the state file refuses the outcome
    assert len(receiver.to("/ok")) == 1 and not any(e.startswith("notify") for e, _ in events(client, job_id))
    monkeypatch.setattr(scheduler.store, "notified", notified)
    wait_for(lambda: any(e == "notify" for e, _ in events(client, job_id)), "the notify event")
    assert len(receiver.to("/ok")) == 1
