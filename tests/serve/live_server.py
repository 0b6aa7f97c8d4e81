"""A real HTTP server (uvicorn, a free loopback port) over a scheduler whose jobs are fake: the
API and the dashboard as `apportion serve` serves them, with its scheduler loop and dashboard
sampling in threads, and jobs that run until the test ends them (not a test module)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import uvicorn

from apportion.executors.fake import FakeExecutor
from apportion.policies.las import Las
from apportion.serve.http.api import create_app
from apportion.serve.accounts.auth import add_user
from apportion.serve.http.dashboard import keep_sampling
from apportion.serve.views.history import History
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig
from apportion.serve.app.server import listen
from apportion.serve.base.slots import parse_slots
from apportion.serve.store.state import StateStore


class LiveServer:
    """Start with ``start()``; ``users`` are added first (credentials on), ``credential[name]`` theirs."""

    def __init__(self, state_dir: Path, slots: str = "cpu:2", users: tuple[str, ...] = (),
                 round_s: float = 60.0) -> None:
        self.store = StateStore(Path(state_dir) / "state.db")
        self.credential = {name: add_user(self.store, name, admin=False, now=time.time()) for name in users}
        self.executor = FakeExecutor(state_dir)
        self.socket = listen("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        config = ServeConfig(state_dir=Path(state_dir), server_url=self.url, round_s=round_s, renew_wait_s=0.0,
                             tick_s=0.05, fill_gap_s=0.1)
        self.scheduler = Scheduler(self.store, self.executor, parse_slots(slots), Las(), config)
        self.history = History(store=self.store)  # as apportion serve keeps it
        self.stop_event = threading.Event()
        self.server = uvicorn.Server(uvicorn.Config(create_app(self.scheduler, None, self.history),
                                                    log_level="warning", access_log=False, lifespan="off"))
        self.threads = [
            threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True),
            threading.Thread(target=self.scheduler.run, args=(self.stop_event,), daemon=True),
            threading.Thread(target=keep_sampling, args=(self.scheduler, self.history, self.stop_event, 0.2),
                             daemon=True),
        ]

    def start(self) -> LiveServer:
        for thread in self.threads:
            thread.start()
        deadline = time.time() + 20
        while not self.server.started:
            if time.time() > deadline:
                raise AssertionError("the server did not start within 20 s")
            time.sleep(0.05)
        return self

    def submit(self, name: str, user: str, total_steps: int = 1000) -> int:
        return self.scheduler.submit({"name": name, "command": "python train.py", "total_steps": total_steps,
                                      "user": user}, user)

    def finish(self, job_id: int, code: int = 0) -> None:
        """End the job's running attempt with ``code`` (0: it completed), as its process would."""
        with self.scheduler.lock:
            self.executor.finish(job_id, code)

    def status_of(self, job_id: int) -> str:
        return self.store.job(job_id).status

    def stop(self) -> None:
        self.server.should_exit = True
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout=10)
        self.store.close()
