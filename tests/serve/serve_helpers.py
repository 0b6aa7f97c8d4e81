"""Start and stop a real `apportion serve` process for the serve tests (not a test module)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from apportion.executors.local import LocalExecutor

REPO = Path(__file__).resolve().parents[2]
CONTRACT_JOB = Path(__file__).resolve().parent / "contract_job.py"


# a server running as root refuses to run jobs as root unless told to (these tests run as whoever runs them)
AS_ROOT = ("--run-as", "server-user") if os.geteuid() == 0 else ()


def NO_BACKOFF(args) -> tuple[str, ...]:
    """A crash retried at once, unless the test says otherwise or names a config file: tests crash on purpose."""
    return () if "--retry-backoff-s" in args or "--config" in args else ("--retry-backoff-s", "0")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def job_env() -> dict[str, str]:
    """The server's environment: this interpreter's `python` first on PATH, no APPORTION_* leaking in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPORTION_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


class Server:
    """``apportion serve`` in a subprocess on a free loopback port, its output in ``state_dir/server.out``."""

    def __init__(self, state_dir: Path, *args: str, port: int | None = None) -> None:
        self.state_dir = Path(state_dir)
        self.args = args
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self.output = self.state_dir.parent / f"{self.state_dir.name}-server.out"

    def start(self, timeout: float = 30.0) -> Server:
        command = [sys.executable, "-m", "apportion.cli", "serve", "--state-dir", str(self.state_dir),
                   "--port", str(self.port), *AS_ROOT, *NO_BACKOFF(self.args), *self.args]
        with open(self.output, "ab") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=job_env(),
                                            cwd=str(REPO), start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the server exited with {self.process.returncode}:\n{self.log()}")
            try:
                answer = httpx.get(f"{self.url}/status", timeout=1.0)
                if answer.status_code in (200, 401):  # 401: up, and asking for credentials
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"the server did not answer within {timeout} s:\n{self.log()}")

    def log(self) -> str:
        return self.output.read_text(errors="replace") if self.output.exists() else ""

    def kill(self) -> None:
        """SIGKILL, as a crash would: no cleanup of any kind."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def kill_jobs(self) -> None:
        """Leave no attempt of this state directory running."""
        for attempt in LocalExecutor(self.state_dir).scan():
            LocalExecutor(self.state_dir).kill_attempt(attempt)

    def jobs(self, token: str | None = None) -> list[dict]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.get(f"{self.url}/jobs", timeout=10, headers=headers).json()

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
        self.kill_jobs()



def wait_exits(executor, timeout: float = 20.0) -> list:
    """The attempts the executor's next polls find ended (AssertionError if none within ``timeout``)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        ended = executor.poll()
        if ended:
            return ended
        time.sleep(0.05)
    raise AssertionError("no attempt ended in time")

def wait_for(predicate, timeout: float, what: str, server: Server | None = None, every: float = 0.25):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    detail = f"\n--- server output ---\n{server.log()[-4000:]}" if server is not None else ""
    raise AssertionError(f"timed out after {timeout} s waiting for {what}{detail}")


def all_done(server: Server, count: int):
    jobs = server.jobs()
    return jobs if len(jobs) == count and all(j["status"] in ("completed", "failed", "cancelled") for j in jobs) else None
