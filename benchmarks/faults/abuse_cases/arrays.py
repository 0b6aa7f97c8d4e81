"""A big job array: one ~4 MB request (``env`` as large as the bounds allow, ``array: 0-249``). The
state directory's growth and the server's peak memory, another user's cancel of it (403, timed),
then its owner's cancel and the server's memory afterwards.

``ABUSE_ARRAY_TASKS`` (default 250) sets the array's tasks: a baseline that copies the spec into
every task may need fewer to finish in minutes (its growth then scales with the tasks)."""

from __future__ import annotations

import json
import os
import statistics
import threading
import time

from abuse_server import Server, peak_rss_mb, rss_mb, row

NAME = "arrays"
ABOUT = "a ~4 MB array request of 250 tasks: state growth, memory, another user's cancel, the owner's"
ENV_VARS, ENV_VALUE = 256, 16 * 1024  # bounds.py's MAX_ENV and MAX_ENV_VALUE: the most an env may hold


def array_body(tasks: int) -> dict:
    return {"name": "big", "command": ["sleep", "600"], "total_steps": 100, "array": f"0-{tasks - 1}",
            "env": {f"VAR_{k:03d}": chr(ord("a") + k % 26) * ENV_VALUE for k in range(ENV_VARS)}}


def settle(server: Server, seconds: float) -> None:
    """Let a round or two pass (the server's writes of the new jobs done), polling as a client would."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        server.request("GET", "/status", user="alice", timeout=300)
        time.sleep(0.5)


def cancels_at_once(server: Server, array_id: str, clients: int = 4, each: int = 3) -> tuple[list[float], list[int]]:
    """``clients`` threads each sending another user's cancel ``each`` times, while the owner polls
    ``GET /status``: the owner's latencies (seconds) and the cancels' statuses."""
    statuses: list[int] = []
    done = threading.Event()

    def cancel() -> None:
        for _ in range(each):
            statuses.append(server.request("POST", f"/jobs/{array_id}/cancel", {}, user="bob", timeout=600).status)

    threads = [threading.Thread(target=cancel) for _ in range(clients)]
    for thread in threads:
        thread.start()
    waiter = threading.Thread(target=lambda: ([t.join() for t in threads], done.set()))
    waiter.start()
    owner: list[float] = []
    while not done.is_set() or not owner:
        owner.append(server.request("GET", "/status", user="alice", timeout=600).seconds)
    waiter.join()
    return owner, statuses


def run(args) -> list[dict]:
    tasks = int(os.environ.get("ABUSE_ARRAY_TASKS", "250"))
    body = array_body(tasks)
    sent = len(json.dumps(body).encode())
    with Server(users=("alice", "bob"), args=("--slots", "cpu:2", "--round-s", "2", "--policy", "fifo")) as server:
        before, rss_before = server.state_bytes(), rss_mb(server.pid)
        submitted = server.request("POST", "/jobs", body, user="alice", timeout=1800)
        if submitted.status != 200:
            raise SystemExit(f"the array was refused: {submitted.status} {submitted.body[:300]!r}")
        array_id = submitted.json()["id"]
        settle(server, 5.0)
        grown = (server.state_bytes() - before) / 2**20
        peak = peak_rss_mb(server.pid)
        foreign = [server.request("POST", f"/jobs/{array_id}/cancel", {}, user="bob", timeout=600) for _ in range(5)]
        codes = sorted({a.status for a in foreign})
        owner, together = cancels_at_once(server, array_id)
        own = server.request("POST", f"/jobs/{array_id}/cancel", {}, user="alice", timeout=1800)
        settle(server, 5.0)
        after, peak_after = rss_mb(server.pid), peak_rss_mb(server.pid)
    scaled = "" if tasks >= 250 else f" (at {tasks} tasks: ×{250 / tasks:g} for 250 = {grown * 250 / tasks:.0f} MB)"
    return [row(NAME, f"request body ({tasks} tasks)", round(sent / 2**20, 2), None, "MB"),
            row(NAME, f"submit took (status {submitted.status})", round(submitted.seconds, 2), None, "s"),
            row(NAME, "state directory growth" + scaled, round(grown, 1), 40, "MB"),
            row(NAME, f"server peak memory (from {rss_before:.0f} MB)", round(peak), 200, "MB"),
            row(NAME, "another user's cancel: status", codes[0] if len(codes) == 1 else codes, 403, "status",
                meets="equal"),
            row(NAME, "another user's cancel: median of 5", round(statistics.median(a.seconds for a in foreign), 3),
                0.1, "s"),
            row(NAME, "another user's cancel: slowest of 5", round(max(a.seconds for a in foreign), 3), 0.1, "s"),
            row(NAME, f"owner's slowest /status during 4 at once ({sorted(set(together))})",
                round(max(owner), 3), None, "s"),
            row(NAME, f"owner's cancel ({own.status}: {own.body[:40].decode(errors='replace')})",
                round(own.seconds, 2), None, "s"),
            row(NAME, "server memory after the cancel", round(after), 200, "MB"),
            row(NAME, "server peak memory, all told", round(peak_after), 200, "MB")]
