"""One user's backlog against another user's first job: alice queues 50,000 tasks (five arrays of
10,000) on two slots with 2 s rounds, two of them running; then bob submits one job. How many
rounds (and seconds) until bob's job runs? Shared by user (the server's default), the next round
or the one after; without it, after alice's whole backlog."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from abuse_server import Server, row

NAME = "fairshare"
ABOUT = "alice queues 50,000 tasks on 2 slots (2 s rounds); bob submits one job: rounds until it runs"
TASKS, PER_ARRAY = 50_000, 10_000
ROUND_S = 2.0
WAIT_S = 60.0  # how long bob's job is watched for: 30 rounds
JOB = Path(__file__).resolve().parents[1] / "timed_job.py"  # apportion.runtime's loop without torch


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
        first_round = round_now(server)
        submitted = time.monotonic()
        bob = server.request("POST", "/jobs", job("bob-first", 100), user="bob", timeout=600)
        if bob.status != 200:
            raise SystemExit(f"bob's submit got {bob.status}: {bob.body[:300]!r}")
        job_id = bob.json()["id"]
        ran_after_s = rounds = float("inf")
        while time.monotonic() - submitted < WAIT_S:
            status = server.request("GET", f"/jobs/{job_id}", user="bob", timeout=120).json()["status"]
            if status in ("running", "completed"):
                ran_after_s = time.monotonic() - submitted
                rounds = round_now(server) - first_round
                break
            time.sleep(0.2)
        watched = round_now(server) - first_round
    if rounds == float("inf"):  # never seen running: the rounds watched, as a lower bound
        return [queued_row(queued, submit_s, refused),
                {**row(NAME, "rounds until bob's first job runs", f"> {watched}", None, "rounds"), "target": 2,
                 "ok": False},
                row(NAME, "seconds until bob's first job runs", f"> {WAIT_S:g}", None, "s")]
    return [queued_row(queued, submit_s, refused),
            row(NAME, "rounds until bob's first job runs", rounds, 2, "rounds"),
            row(NAME, "seconds until bob's first job runs", round(ran_after_s, 1), None, "s")]


def queued_row(queued: int, submit_s: float, refused: str) -> dict:
    return row(NAME, f"alice's tasks queued ({submit_s:.0f} s to submit){'; ' + refused if refused else ''}",
               queued, TASKS, "tasks", meets="equal")
