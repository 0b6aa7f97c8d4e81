"""Reads at 40,000 queued tasks: the anonymous dashboard's size and time, ``GET /status`` and a submit
while long rounds run, and another user's submits while four anonymous pollers read the dashboard.

The rounds are made long by the queue itself: alice's 40,000 tasks (four arrays of 10,000) on one
slot, ``--round-s 2``, and the ``max-min-fairness`` policy, whose LP over every waiting job is
solved again whenever the job set changes (bob's submits change it); the round times the server
measured while the latencies were taken are printed beside them (on the 2-core development
machine under load: 1.7-2.7 s a round before the rounds were made faster, about 0.25 s since).
"""

from __future__ import annotations

import statistics
import threading
import time

from abuse_server import Server, percentile, row

NAME = "reads"
ABOUT = "40,000 queued tasks: anonymous dashboard, /status and submit during long rounds, pollers"
TASKS, ARRAY = 40_000, 10_000
POLLERS = 4
JOB = {"name": "small", "command": "sleep 600", "total_steps": 100}


def fill(server: Server) -> None:
    """alice's TASKS tasks, as arrays of ARRAY."""
    for first in range(0, TASKS, ARRAY):
        answer = server.request("POST", "/jobs", {**JOB, "name": f"sweep{first}", "array": f"0-{ARRAY - 1}"},
                                user="alice", timeout=600)
        if answer.status != 200:
            raise SystemExit(f"alice's array was refused: {answer.status} {answer.body[:300]!r}")


def round_ms(server: Server) -> tuple[float, float]:
    """(the last round's ms, the median's) as the server says."""
    times = server.request("GET", "/status", user="bob", timeout=600).json()["round_ms"]
    return times["last"], times["median"] or 0.0


def during_rounds(server: Server, seconds: float) -> tuple[list[float], list[float], list[float]]:
    """bob's ``GET /status`` and submit latencies (ms) over ``seconds``, and the rounds' times seen meanwhile."""
    status_ms, submit_ms, rounds = [], [], []
    end = time.monotonic() + seconds
    k = 0
    while time.monotonic() < end:
        answer = server.request("GET", "/status", user="bob", timeout=600)
        status_ms.append(answer.seconds * 1000)
        rounds.append(answer.json()["round_ms"]["last"])
        if k % 5 == 0:  # a submit every few reads (bob's rate budget allows it)
            answer = server.request("POST", "/jobs", {**JOB, "name": f"bob{k}"}, user="bob", timeout=600)
            if answer.status != 200:
                raise SystemExit(f"bob's submit was refused: {answer.status} {answer.body[:300]!r}")
            submit_ms.append(answer.seconds * 1000)
        k += 1
        time.sleep(0.02)
    return status_ms, submit_ms, rounds


def with_pollers(server: Server, submits: int) -> tuple[list[float], int]:
    """bob's submit latencies (ms) while POLLERS threads read the dashboard without a credential; their reads."""
    stop = threading.Event()
    reads = [0] * POLLERS

    def poll(k: int) -> None:
        while not stop.is_set():
            server.request("GET", "/dashboard/state", timeout=600)
            reads[k] += 1

    threads = [threading.Thread(target=poll, args=(k,)) for k in range(POLLERS)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    times = []
    try:
        for k in range(submits):
            answer = server.request("POST", "/jobs", {**JOB, "name": f"polled{k}"}, user="bob", timeout=600)
            times.append(answer.seconds * 1000)
            time.sleep(0.1)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    return times, sum(reads)


def run(args) -> list[dict]:
    with Server(users=("alice", "bob"), args=("--policy", "max-min-fairness", "--round-s", "2"),
                start_timeout_s=120) as server:
        fill(server)
        time.sleep(6.0)  # a few rounds over the full queue
        first = server.request("GET", "/dashboard/state", timeout=600)  # made for this round
        again = [server.request("GET", "/dashboard/state", timeout=600) for _ in range(5)]
        status_ms, submit_ms, rounds = during_rounds(server, 15.0)
        polled_ms, reads = with_pollers(server, 20)
        _, median_round = round_ms(server)
    size_mb = len(first.body) / 1e6
    return [
        row(NAME, f"anonymous /dashboard/state size at {TASKS:,} tasks", round(size_mb, 3), 1.0, "MB"),
        row(NAME, "anonymous /dashboard/state time (first of a round)", round(first.seconds, 3), 0.2, "s"),
        row(NAME, "anonymous /dashboard/state time (median of the next 5)",
            round(statistics.median(a.seconds for a in again), 3), 0.2, "s"),
        row(NAME, "rounds meanwhile: median (max)", f"{statistics.median(rounds):.0f} ({max(rounds):.0f})", None, "ms"),
        row(NAME, "server's round median", round(median_round), None, "ms"),
        row(NAME, f"/status p50 during those rounds ({len(status_ms)} calls)", round(statistics.median(status_ms), 1),
            None, "ms"),
        row(NAME, "/status p99 during those rounds", round(percentile(status_ms, 0.99), 1), 50, "ms"),
        row(NAME, "submit p50 during those rounds", round(statistics.median(submit_ms), 1), None, "ms"),
        row(NAME, f"submit p99 during those rounds ({len(submit_ms)} submits)", round(percentile(submit_ms, 0.99), 1),
            50, "ms"),
        row(NAME, f"another user's submit p50, {POLLERS} anonymous pollers ({reads} reads)",
            round(statistics.median(polled_ms), 1), None, "ms"),
        row(NAME, "another user's submit p99 with the pollers",
            round(percentile(polled_ms, 0.99), 1), 50, "ms"),
        row(NAME, "  and its max", round(max(polled_ms), 1), None, "ms"),
    ]
