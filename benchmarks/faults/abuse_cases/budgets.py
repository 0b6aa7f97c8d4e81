"""Per-user budgets: a user at the active-job cap (five 10,000-task arrays) sends 200 single submits,
which must all be refused; another user sends a burst of 400 submits from 8 threads, which must
meet 429s past the burst; a third user's one submit, sent during that burst, must still succeed."""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter

from abuse_server import Server, row

NAME = "budgets"
ABOUT = "200 single submits at 50,000 active jobs; a burst of 400 submits; a third user's submit meanwhile"
JOB = {"name": "b", "command": "sleep 300", "total_steps": 10}  # the one job the slot runs ends by itself
CAP = 50_000  # the active-job cap: the default (--max-active-jobs), as arrays had before
ARRAYS = 5  # of 10,000 tasks: CAP in all
SINGLES = 200
BURST = 400
THREADS = 8


def burst(server: Server, user: str, count: int, threads: int) -> tuple[Counter, float, list[str]]:
    """``count`` submits of ``user`` from ``threads`` threads at once: the answers' statuses, the seconds
    it took, and the Retry-After headers of the 429s."""
    codes: Counter = Counter()
    retry: list[str] = []
    lock = threading.Lock()

    def one(share: int) -> None:
        mine: Counter = Counter()
        waits = []
        for _ in range(share):
            answer = server.request("POST", "/jobs", JOB, user=user, timeout=60)
            mine[answer.status] += 1
            if answer.status == 429:
                waits.append(next((v for k, v in answer.headers.items() if k.lower() == "retry-after"), ""))
        with lock:
            codes.update(mine)
            retry.extend(waits)

    started = time.monotonic()
    workers = [threading.Thread(target=one, args=(count // threads,)) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return codes, time.monotonic() - started, retry


def run(args) -> list[dict]:
    with Server(users=("alice", "bob", "carol"), args=("--policy", "fifo"), start_timeout_s=120) as server:
        for _ in range(ARRAYS):
            answer = server.request("POST", "/jobs", {**JOB, "array": "0-9999"}, user="alice", timeout=300)
            if answer.status != 200:
                raise SystemExit(f"an array of alice's was refused: {answer.status} {answer.body[:300]!r}")
        time.sleep(1.0)  # alice's bucket refills the few submits the arrays took
        singles: Counter = Counter()
        first_refusal = ""
        for _ in range(SINGLES):
            answer = server.request("POST", "/jobs", JOB, user="alice", timeout=60)
            singles[answer.status] += 1
            if answer.status != 200 and not first_refusal:
                first_refusal = f"{answer.status} {answer.json().get('detail', '')}"

        carol: dict = {}

        def carol_submits() -> None:
            time.sleep(0.3)  # while bob's burst is under way
            carol["answer"] = server.request("POST", "/jobs", JOB, user="carol", timeout=60)

        beside = threading.Thread(target=carol_submits)
        beside.start()
        codes, seconds, retry = burst(server, "bob", BURST, THREADS)
        beside.join()
        carols = carol["answer"]
    print(f"budgets: alice's first refusal: {first_refusal or '(none)'}", file=sys.stderr)
    print(f"budgets: bob's burst: {dict(codes)} in {seconds:.1f} s; Retry-After seen: {sorted(set(retry))[:5]}",
          file=sys.stderr)
    return [row(NAME, f"single submits accepted at {CAP:,} active jobs (of {SINGLES})", singles[200], 0, "jobs"),
            row(NAME, "their refusals answered 409", singles[409], SINGLES, "answers", meets="equal"),
            row(NAME, f"429s in a burst of {BURST} submits ({THREADS} threads, {seconds:.1f} s)", codes[429],
                BURST - 200 - int(20 * seconds) - 10, "answers", meets="at least"),
            row(NAME, "429s with a Retry-After", sum(1 for r in retry if r.isdigit()), codes[429], "answers",
                meets="equal"),
            row(NAME, "a third user's submit during the burst", carols.status, 200, "status", meets="equal"),
            row(NAME, "its latency", round(carols.seconds * 1000), 500, "ms")]
