"""A fake lease server, for testing a training script's preemption without `apportion serve`.

    with FakeLeaseServer(refuse_at=[40, 90]) as server:
        env = server.job_env(job_id="j1", attempt=1, total_steps=150, checkpoint_dir=tmp)
        subprocess.run([sys.executable, "train.py"], env={**os.environ, **env})

It speaks the two calls of docs/serve-contract.md a job makes. Leases are shorter
(``lease_s``, 0.5 s) than a Job's renewal margin (1 s), so the job asks at every step
boundary, yet long enough to arrive unexpired on a loaded machine; the first lease call whose
``steps_done`` reaches a threshold of ``refuse_at`` is refused (once per threshold).
Calls from an attempt other than ``current_attempt`` (when set) get 409. Every call is
recorded in ``calls`` with its arrival time.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeLeaseServer:
    def __init__(
        self,
        *,
        refuse_at: Iterable[int] = (),
        lease_s: float = 0.5,
        current_attempt: int | None = None,
        on_lease: Callable[[dict], dict | None] | None = None,
        port: int = 0,
    ) -> None:
        self.port = port  # 0: any free port
        self.refuse_at = sorted(refuse_at)
        self.lease_s = lease_s
        self.current_attempt = current_attempt
        self.on_lease = on_lease  # may return an answer of its own, or None for the default
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- life --------------------------------------------------------------------------
    def start(self) -> FakeLeaseServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    self._answer(400, {"detail": "not JSON"})
                    return
                parts = self.path.strip("/").split("/")
                if len(parts) != 3 or parts[0] != "jobs" or parts[2] not in ("lease", "progress"):
                    self._answer(404, {"detail": "not found"})
                    return
                status, answer = server._handle(parts[2], parts[1], body)
                self._answer(status, answer)

            def _answer(self, status: int, answer: dict) -> None:
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format, *args) -> None:  # noqa: A002 - quiet
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.05,), name="fake-lease-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeLeaseServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "start() the server first"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def job_env(
        self,
        *,
        job_id: str = "job-1",
        attempt: int = 1,
        total_steps: int | None = None,
        checkpoint_dir: str | None = None,
        lease_end: float | None = None,
    ) -> dict[str, str]:
        """The environment variables an executor would set for one attempt."""
        env = {
            "APPORTION_SERVER": self.url,
            "APPORTION_JOB_ID": job_id,
            "APPORTION_ATTEMPT": str(attempt),
            "APPORTION_LEASE_END": repr(time.time() if lease_end is None else lease_end),
            "APPORTION_SLOTS": "cpu:0",
            "CUDA_VISIBLE_DEVICES": "",
        }
        if total_steps is not None:
            env["APPORTION_TOTAL_STEPS"] = str(total_steps)
        if checkpoint_dir is not None:
            env["APPORTION_CHECKPOINT_DIR"] = str(checkpoint_dir)
        return env

    # --- answers -----------------------------------------------------------------------
    def _handle(self, kind: str, job_id: str, body: dict) -> tuple[int, dict]:
        with self._lock:
            record = {"kind": kind, "job_id": job_id, "time": time.time(), **body}
            self.calls.append(record)
            if self.current_attempt is not None and body.get("attempt") != self.current_attempt:
                record["status"] = 409
                return 409, {"detail": f"attempt {body.get('attempt')} is stale"}
            if kind == "progress":
                record["status"] = 200
                return 200, {}
            answer = self.on_lease(body) if self.on_lease is not None else None
            if answer is None:
                steps = int(body.get("steps_done", 0))
                if self.refuse_at and steps >= self.refuse_at[0]:
                    while self.refuse_at and steps >= self.refuse_at[0]:
                        self.refuse_at.pop(0)
                    answer = {"renew": False}
                else:
                    answer = {"renew": True, "lease_end": time.time() + self.lease_s}
            record["status"] = 200
            record["answer"] = answer
            record["answered"] = time.time()
            return 200, answer

    def lease_calls(self) -> list[dict[str, Any]]:
        with self._lock:
            return [c for c in self.calls if c["kind"] == "lease"]

    def progress_calls(self) -> list[dict[str, Any]]:
        with self._lock:
            return [c for c in self.calls if c["kind"] == "progress"]
