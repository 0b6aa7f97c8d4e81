"""Print the real scheduler's own time per round with 1,000 queued jobs, as JSON.

The scheduler is the one ``apportion serve`` runs (SQLite state in a temporary directory,
the policy, Gavel's round mechanism, placement, one transaction per round), over a fake
executor: no processes, so what is timed is the scheduler alone. The clock is fake too, and
each round the jobs behave as apportion.runtime would: a new attempt asks for its first
lease; one told to stop checkpoints and exits 75.

    python benchmarks/speed/serve_overhead.py                       # las, fifo, max-min-fairness
    python benchmarks/speed/serve_overhead.py --policy las --jobs 10000 --slots v100:64
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from apportion.executors.fake import FakeExecutor  # noqa: E402
from apportion.experiment import policy_from_spec  # noqa: E402
from apportion.policies.las import Las  # noqa: E402
from apportion.serve.accounts.budgets import BudgetRules, Limits  # noqa: E402
from apportion.serve.scheduler.scheduler import Scheduler, ServeConfig  # noqa: E402
from apportion.serve.base.slots import Node, parse_slots  # noqa: E402
from apportion.serve.store.state import StateStore  # noqa: E402

KINDS = ("resnet18", "resnet50", "transformer", "lm", "recommendation")


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(policy_name: str, jobs: int, slots: str, rounds: int, round_s: float, as_served: bool = False,
        node: Node | None = None, asks=None) -> dict:
    """``as_served``: the policy as `apportion serve --policy NAME` makes it (las with its own thresholds,
    which keep most jobs in place round after round), not one that moves jobs every few rounds.
    ``node``: the cores and memory the slots share; ``asks(i)``: what job ``i`` asks of them (a dict of
    ``cpus``/``memory_gb``), counted by placement."""
    with tempfile.TemporaryDirectory() as tmp:
        store = StateStore(Path(tmp) / "state.db")
        executor = FakeExecutor(tmp)
        clock = Clock()
        # las with thresholds of a few rounds' service, so that rounds preempt and start jobs
        policy = (Las(thresholds_gpu_s=tuple(float(round_s * k) for k in range(2, 2000, 2)))
                  if policy_name == "las" and not as_served else policy_from_spec(policy_name))
        config = ServeConfig(state_dir=Path(tmp), round_s=round_s, grace_s=round_s, renew_wait_s=0.0,
                             start_hold_s=None, node=node,  # each round starts all it places, in its tick
                             budgets=BudgetRules(Limits(submit_rate=1e9, submit_burst=10**9,
                                                        max_active_jobs=10**9)))  # rounds, not budgets, measured
        scheduler = Scheduler(store, executor, parse_slots(slots), policy, config, clock=clock)
        start = time.perf_counter()
        for i in range(jobs):
            scheduler.submit({"name": f"job{i}", "command": "true", "total_steps": 10_000 + i,
                              "kind": KINDS[i % len(KINDS)], "gpus": 1 + (i % 7 == 0),
                              "user": f"user{i % 13}", "priority": 1 + i % 3, **(asks(i) if asks else {})},
                             f"user{i % 13}")
        submit_s = time.perf_counter() - start

        plan_ms, tick_ms, started, preempted = [], [], 0, 0
        for _ in range(rounds):
            clock.now = scheduler.next_plan_at + 1e-3
            before = len(executor.started)
            begin = time.perf_counter()
            scheduler.tick()
            tick_ms.append((time.perf_counter() - begin) * 1000)
            plan_ms.append(scheduler.stats.last_ms)
            started += len(executor.started) - before
            # the jobs' side: first lease calls, progress reports, and exits when told to stop
            for row in store.live_jobs():
                if row.contact_at is None:
                    scheduler.lease(row.id, row.attempt, row.steps_done)
                scheduler.progress(row.id, row.attempt, row.steps_done + 10, 5.0)
                if row.stop == "preempt":
                    assert scheduler.lease(row.id, row.attempt, row.steps_done) == {"renew": False}
                    executor.finish(row.id, 75)
                    preempted += 1
        store.close()
    return {
        "policy": policy_name,
        "queued_jobs": jobs,
        "slots": slots,
        "rounds": rounds,
        "round_ms": {"median": round(statistics.median(plan_ms), 2), "p95": round(percentile(plan_ms, 0.95), 2),
                     "max": round(max(plan_ms), 2)},
        "tick_with_round_ms": {"median": round(statistics.median(tick_ms), 2),
                               "p95": round(percentile(tick_ms, 0.95), 2)},
        "starts_per_round": round(started / rounds, 2),
        "preemptions_per_round": round(preempted / rounds, 2),
        "submit_ms_per_job": round(submit_s * 1000 / jobs, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", action="append", help="repeatable; default: las, fifo, max-min-fairness")
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--slots", default="v100:8")
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--round-s", type=float, default=180.0)
    parser.add_argument("--quick", action="store_true", help="a few jobs, seconds: what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.rounds = 50, 3
    for name in args.policy or ["las", "fifo", "max-min-fairness"]:
        print(json.dumps(run(name, args.jobs, args.slots, args.rounds, args.round_s)), flush=True)


if __name__ == "__main__":
    main()
