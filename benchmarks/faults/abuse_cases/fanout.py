"""One user's fan-out against every round: 500 jobs claiming privacy budget on 1,000 blocks each (a
million demand cells), then cancelled; four 10,000-task arrays ``after`` 128 jobs; 50,000 plain tasks
queued. Round times are read from ``GET /status`` (``round_ms.last`` of each round, polled)."""

from __future__ import annotations

import os
import statistics
import time

from abuse_server import Server, row

NAME = "fanout"
ABOUT = "rounds under a million claim cells, an `after` fan-out of four 10,000-task arrays, 50,000 queued tasks"
ROUND_S = "1"
COMMAND = "sleep 90"  # the jobs that start end by themselves (they keep running when the server stops)
# what is measured here is one user's fan-out itself: the per-user budgets (budgets.py) raised past it
UNBOUNDED = ("--max-active-jobs", "1000000", "--max-demand-rows", "10000000", "--max-after-edges", "10000000",
             "--submit-rate", "100000", "--submit-burst", "100000")


def rounds(server: Server, seconds: float) -> list[float]:
    """Milliseconds of each round decided in the next ``seconds`` (``/status`` polled faster than rounds
    come; a round between two polls that saw several is left out)."""
    times: list[float] = []
    seen = server.request("GET", "/status", user="alice").json()["round_ms"]["rounds_this_run"]
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.1)
        now = server.request("GET", "/status", user="alice").json()["round_ms"]
        if now["rounds_this_run"] == seen + 1:
            times.append(float(now["last"]))
        seen = now["rounds_this_run"]
    return times


def submit(server: Server, body: dict, user: str = "alice") -> dict:
    answer = server.request("POST", "/jobs", body, user=user, timeout=600)
    while answer.status == 429:  # over the user's submit rate (budgets): wait as the server asks
        time.sleep(float(next((v for k, v in answer.headers.items() if k.lower() == "retry-after"), "1")))
        answer = server.request("POST", "/jobs", body, user=user, timeout=600)
    if answer.status != 200:
        raise SystemExit(f"submit refused ({answer.status}): {answer.body[:300]!r}")
    return answer.json()


def job(name: str, **fields) -> dict:
    return {"name": name, "command": COMMAND, "total_steps": 100, "kind": "resnet18", "gpus": 1, **fields}


def timed(server: Server, path: str, repeats: int = 5) -> float:
    """The median milliseconds of ``repeats`` GETs of ``path``."""
    times = []
    for _ in range(repeats):
        answer = server.request("GET", path, user="alice")
        if answer.status != 200:
            raise SystemExit(f"GET {path}: {answer.status}")
        times.append(answer.seconds * 1000)
    return statistics.median(times)


def round_rows(what: str, times: list[float]) -> list[dict]:
    if not times:
        return [row(NAME, f"{what}: rounds seen", 0, 1, "rounds", meets="at least")]
    return [row(NAME, f"{what}: round median ({len(times)} rounds)", round(statistics.median(times), 1), 100, "ms"),
            row(NAME, f"{what}: round max", round(max(times), 1), 1000, "ms")]


def claims(args) -> list[dict]:
    """(a) 500 jobs, each claiming ε on the same 1,000 blocks; then all cancelled."""
    with Server(users=("alice", "root_admin"), admins=("root_admin",),
                args=("--round-s", ROUND_S, "--slots", "cpu:2", *UNBOUNDED)) as server:
        blocks = [{"name": f"b{i}", "epsilon": 1000.0, "delta": 1e-5} for i in range(1000)]
        added = server.request("POST", "/blocks", {"blocks": blocks}, user="root_admin")
        if added.status != 200:
            raise SystemExit(f"adding blocks: {added.status} {added.body[:300]!r}")
        names = [b["name"] for b in blocks]
        ids = [submit(server, job(f"c{k}", privacy={"blocks": names, "epsilon": 0.01, "delta": 1e-9}))["id"]
               for k in range(500)]
        times = rounds(server, args.fanout_s)
        for job_id in ids:
            server.request("POST", f"/jobs/{job_id}/cancel", user="alice")
        rounds(server, 3.0)  # the cancelled claims settled
        metrics, listed = timed(server, "/metrics"), timed(server, "/blocks")
    return [*round_rows("500 jobs × 1,000 blocks", times),
            row(NAME, "/metrics after cancelling them", round(metrics, 1), 100, "ms"),
            row(NAME, "/blocks after cancelling them", round(listed, 1), 100, "ms")]


def after_fanout(args) -> list[dict]:
    """(b) 128 jobs, then four 10,000-task arrays each ``after`` all 128."""
    with Server(users=("alice",), args=("--round-s", ROUND_S, "--slots", "cpu:2", *UNBOUNDED)) as server:
        first = [submit(server, job(f"a{k}"))["id"] for k in range(128)]
        for k in range(4):
            submit(server, job(f"fan{k}", array="0-9999", after=first))
        times = rounds(server, args.fanout_s)
    return round_rows("4 × 10,000 tasks after 128 jobs", times)


def queued(args) -> list[dict]:
    """(c) 50,000 plain tasks queued by one user (five 10,000-task arrays)."""
    with Server(users=("alice",), args=("--round-s", ROUND_S, "--slots", "cpu:2", *UNBOUNDED)) as server:
        for k in range(5):
            submit(server, job(f"q{k}", array="0-9999"))
        times = rounds(server, args.fanout_s)
    return round_rows("50,000 queued tasks", times)


def run(args) -> list[dict]:
    """The three parts; ``FANOUT_PARTS`` (e.g. ``bc``) picks some, ``FANOUT_S`` the seconds rounds are timed."""
    args.fanout_s = float(os.environ.get("FANOUT_S", "20"))
    parts = {"a": claims, "b": after_fanout, "c": queued}
    return [found for name in os.environ.get("FANOUT_PARTS", "abc") for found in parts[name](args)]
