"""One user's backlog against another user's first job: alice queues 50,000 tasks (five arrays of
10,000) on two slots with 2 s rounds, two of them running; then bob submits one job. How many
rounds (and seconds) until bob's job runs? Shared by user (the server's default), the next round
or the one after; without it, after alice's whole backlog."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from abuse_server import Server, row

NAME = "fairshare"  # rounds: counted from when bob's submit is answered to when his job is running
ABOUT = "alice queues 50,000 tasks on 2 slots (2 s rounds); bob submits one job: rounds until it runs"
TASKS, PER_ARRAY = 50_000, 10_000
ROUND_S = 2.0
WAIT_S = 60.0  # how long bob's job is watched for: 30 rounds
JOB = Path(__file__).resolve().parents[2] / "jobs" / "timed_job.py"  # apportion.runtime's loop without torch


def job(name: str, steps: int, **fields) -> dict:
    return {"name": name, "command": f"{sys.executable} {JOB} {steps}", "total_steps": steps, **fields}


def round_now(server: Server) -> int:
    return int(server.request("GET", "/status", user="bob", timeout=120).json()["round"])


def run(args) -> list[dict]:
    with Server(users=("alice", "bob"), args=("--slots", "cpu:2", "--round-s", str(ROUND_S))) as server:
        queued, refused = 0, ""
        started = time.monotonic()
        while queued < TASKS:
            count = min(PER_ARRAY, TASKS - queued)
            answer = server.request("POST", "/jobs", job("backlog", 1_000_000, array=f"0-{count - 1}"), user="alice",
                                    timeout=600)
            if answer.status != 200:
                refused = f"{answer.status} after {queued} tasks: {answer.body[:200].decode(errors='replace')}"
                print(f"fairshare: alice's array refused: {refused}", file=sys.stderr)
                break
            queued += int(answer.json().get("tasks", count))
        submit_s = time.monotonic() - started
        deadline = time.monotonic() + 120
        while server.request("GET", "/status", user="bob", timeout=120).json()["counts"].get("running", 0) < 2:
            if time.monotonic() > deadline:
                raise SystemExit("alice's tasks did not take the two slots: " + server.log()[-2000:])
            time.sleep(0.5)
        submitted = time.monotonic()
        bob = server.request("POST", "/jobs", job("bob-first", 100), user="bob", timeout=600)
        if bob.status != 200:
            raise SystemExit(f"bob's submit got {bob.status}: {bob.body[:300]!r}")
        first_round = round_now(server)  # rounds counted from the submit's answer (it may wait for a round)
        job_id = bob.json()["id"]
        placed = ran = None  # (rounds, seconds) when a round gave bob's job a slot; when it ran
        while time.monotonic() - submitted < WAIT_S and ran is None:
            info = server.request("GET", f"/jobs/{job_id}", user="bob", timeout=120).json()
            now = (round_now(server) - first_round, round(time.monotonic() - submitted, 1))
            if placed is None and (info.get("alloc") or info["status"] != "queued"):
                placed = now
            if info["status"] in ("running", "completed"):
                ran = now
            time.sleep(0.2)
        watched = round_now(server) - first_round
        status = server.request("GET", "/status", user="bob", timeout=120).json()
        round_ms = status["round_ms"]["median"]
    rows = [queued_row(queued, submit_s, refused),
            row(NAME, "median round over the run, its 5 submits of 10,000 included",
                None if round_ms is None else round(round_ms), None, "ms")]
    for figure, seen in (("a round gives bob's first job a slot", placed), ("bob's first job runs", ran)):
        if seen is None:  # never seen: the rounds watched, as a lower bound
            rows += [{**row(NAME, f"rounds until {figure}", f"> {watched}", None, "rounds"), "target": 2, "ok": False},
                     row(NAME, f"seconds until {figure}", f"> {WAIT_S:g}", None, "s")]
        else:
            rows += [row(NAME, f"rounds until {figure}", seen[0], 2, "rounds"),
                     row(NAME, f"seconds until {figure}", seen[1], None, "s")]
    return rows


def queued_row(queued: int, submit_s: float, refused: str) -> dict:
    return row(NAME, f"alice's tasks queued ({submit_s:.0f} s to submit){'; ' + refused if refused else ''}",
               queued, TASKS, "tasks", meets="equal")
