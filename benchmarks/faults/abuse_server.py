"""A real ``apportion serve`` on a loopback port for the abuse cases: start it, speak to it, measure it.

Each case starts its own server (the ``apportion`` that ``PYTHONPATH`` names, so two trees compare) in a
temporary state directory with the users it asks for, and ends only that server, by pid.
"""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

APPORTION = [sys.executable, "-m", "apportion.cli"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rss_mb(pid: int) -> float:
    """The process's resident memory now (VmRSS), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Answer:
    """A status, the body's bytes and the seconds the request took."""

    def __init__(self, status: int, body: bytes, seconds: float, headers: dict[str, str]):
        self.status, self.body, self.seconds, self.headers = status, body, seconds, headers

    def json(self):
        return json.loads(self.body)


class Server:
    """``apportion serve`` with ``users`` (name → credential) on a free port; a context manager."""

    def __init__(self, users: tuple[str, ...] = ("alice",), args: tuple[str, ...] = (), admins: tuple[str, ...] = (),
                 start_timeout_s: float = 60.0):
        self.user_names, self.admins, self.extra_args = users, admins, args
        self.start_timeout_s = start_timeout_s
        self.users: dict[str, str] = {}
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> "Server":
        self._tmp = tempfile.TemporaryDirectory(prefix="apportion-abuse-")
        self.dir = Path(self._tmp.name)
        self.state = self.dir / "state"
        for name in self.user_names:
            admin = ["--admin"] if name in self.admins else []
            added = subprocess.run([*APPORTION, "users", "add", name, *admin, "--state-dir", str(self.state)],
                                   capture_output=True, text=True, check=True, cwd=self.dir)
            self.users[name] = added.stdout.strip().splitlines()[-1]
        self.port = free_port()
        self._log = open(self.dir / "server.log", "w")
        command = [*APPORTION, "serve", "--state-dir", str(self.state), "--port", str(self.port),
                   "--run-as", "server-user", "--no-warm-start", *self.extra_args]
        if not any(a == "--slots" for a in self.extra_args):
            command += ["--slots", "cpu:1"]
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, cwd=self.dir)
        deadline = time.monotonic() + self.start_timeout_s
        first = next(iter(self.users.values()), "")
        while True:
            try:
                if self.request("GET", "/status", credential=first, timeout=5).status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise SystemExit("the server did not start: " + (self.dir / "server.log").read_text()[-2000:])
            time.sleep(0.2)
        return self

    def __exit__(self, *exc) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        self._tmp.cleanup()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def request(self, method: str, path: str, body=None, user: str | None = None, credential: str | None = None,
                timeout: float = 120.0, raw: bytes | None = None) -> Answer:
        """One request on a new connection, as the CLI makes them."""
        if credential is None and user is not None:
            credential = self.users[user]
        headers = {"Authorization": f"Bearer {credential}"} if credential else {}
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
        if data is not None:
            headers["Content-Type"] = "application/json"
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        started = time.perf_counter()
        try:
            conn.request(method, path, body=data, headers=headers)
            answer = conn.getresponse()
            content = answer.read()
        finally:
            conn.close()
        return Answer(answer.status, content, time.perf_counter() - started, dict(answer.getheaders()))

    def state_bytes(self) -> int:
        """Bytes of the state directory's files (the database, its WAL, everything else)."""
        return sum(p.stat().st_size for p in self.state.rglob("*") if p.is_file())

    def log(self) -> str:
        return (self.dir / "server.log").read_text()


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] if ordered else float("nan")


def row(case: str, figure: str, value, target, unit: str, meets: str = "at most") -> dict:
    """One line of the table: a figure, its target and whether it meets it (``meets``: "at most",
    "at least" or "equal")."""
    if target is None:
        ok = None
    elif meets == "equal":
        ok = value == target
    else:
        ok = value <= target if meets == "at most" else value >= target
    return {"case": case, "figure": figure, "value": value, "target": target, "unit": unit, "ok": ok}

