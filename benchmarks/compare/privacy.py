"""Replay PrivateKube's privacy microbenchmark, in its real shape, through apportion's privacy
stage, and (given a checkout of columbia/PrivateKube) through PrivateKube's own simulator on the
same generated tasks.

The shape (docs/privacy.md gives where each figure comes from, in PrivateKube's
``evaluation/microbenchmark/microbench_{single,multi}_block.py``): tasks arrive as a Poisson
process; each asks 1 block (75%) or 10 (25%), the newest ones present, and ε 0.01 (75%) or 0.1
(25%) of each, the two drawn independently. "single": one block for good (so every task asks it),
a task a second on average for 236 s, a 300 s timeout. "multi": 12 blocks at the start and one
more every 10 s, a task every 0.078125 s on average for 300 s, no timeout. Each block: ε 1. N is
swept over 50, 100, 200 and T = N × the mean arrival interval. Claims are asked at each arrival
and, for the policies that unlock by time, at each tick of PrivateKube's clock (half the mean
arrival interval), as its scheduler is woken, and budget unlocked by T unlocks in the steps of
that clock (``PrivacyPolicy.tick_s``; ``--continuous``: evenly).

Prints one JSON line per workload, N and policy: claims granted by apportion and by PrivateKube
(``pk_granted``), and each replay's wall time.

    python benchmarks/compare/privacy.py [--workload single|multi|both] [--n 50,100,200] [--seed 0] \\
        [--privatekube PATH --privatekube-python PY]

``--privatekube``: a checkout of columbia/PrivateKube; ``--privatekube-python``: a Python that can
import its simulator (its forks of simpy and desmod: github.com/taoluo/simpy and taoluo/desmod,
branch osdi21_artifact, on PYTHONPATH; ``--privatekube-path`` adds them).
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from apportion.core.privacy import Blocks, Claims
from apportion.mechanism.admission import AdmissionContext, Applicants
from apportion.mechanism.privacy_budget import ClaimState, PrivacyStage
from apportion.mechanism.privacy_policies import PrivacyPolicy

MICE_EPSILON, ELEPHANT_EPSILON = 0.01, 0.1
ELEPHANT_BLOCKS = 10
MICE_FRACTION = 0.75  # of the ε draw and, independently, of the block-count draw
SHAPES = {
    "single": dict(every_s=1.0, duration_s=int(1.0 * 100 * 2.25 * 1.05), blocks_at_start=1, static=True,
                   block_every_s=10.0, timeout_s=3 * 100 * 1.0),
    "multi": dict(every_s=0.078125, duration_s=10 * 30, blocks_at_start=12, static=False,
                  block_every_s=10.0, timeout_s=None),
}
POLICIES = ("fcfs", "dpf-n", "dpf-t", "rr-n", "rr-t")
PK_POLICY = {"fcfs": "FCFS", "dpf-n": "DPF_N", "dpf-t": "DPF_T", "rr-n": "RR_N", "rr-t": "RR_T"}


def block_times(shape: dict) -> np.ndarray:
    """When each block arrives: ``blocks_at_start`` at 0, then one every ``block_every_s`` until the end."""
    later = [] if shape["static"] else list(np.arange(1, int(shape["duration_s"] // shape["block_every_s"]) + 1)
                                             * shape["block_every_s"])
    return np.array([0.0] * shape["blocks_at_start"] + later)


def workload(shape: dict, seed: int) -> tuple[Blocks, Claims, np.ndarray]:
    """The blocks, the claims and each claim's arrival time (Poisson, within the duration)."""
    rng = np.random.default_rng(seed)
    block_at = block_times(shape)
    num_blocks = len(block_at)
    blocks = Blocks(np.array([f"b{i}" for i in range(num_blocks)], dtype=object), block_at,
                    np.ones(num_blocks), np.full(num_blocks, 1e-6))
    expected = int(shape["duration_s"] / shape["every_s"])
    gaps = rng.exponential(shape["every_s"], expected * 2 + 100)
    arrival = np.cumsum(gaps)
    arrival = arrival[arrival < shape["duration_s"]]
    count = len(arrival)
    mice_epsilon = rng.random(count) < MICE_FRACTION
    one_block = rng.random(count) < MICE_FRACTION
    newest = np.searchsorted(block_at, arrival, side="right") - 1  # the newest block present at arrival
    taken = np.minimum(np.where(one_block, 1, ELEPHANT_BLOCKS), newest + 1)
    start = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(taken, out=start[1:])
    owner = np.repeat(np.arange(count), taken)
    block = newest[owner] - (np.arange(int(start[-1])) - start[owner])
    epsilon = np.where(mice_epsilon, MICE_EPSILON, ELEPHANT_EPSILON)[owner]
    demand = np.column_stack([epsilon, np.zeros(len(epsilon))])
    return blocks, Claims(start, block, demand, np.ones(count)), arrival


def policy_of(name: str, n: int, t_s: float, tick_s: float | None = None) -> PrivacyPolicy:
    """The policy by the benchmark's name; unlocking by T, in PrivateKube's steps of ``tick_s``."""
    if name == "fcfs":
        return PrivacyPolicy("fcfs")
    family, by = name.split("-")
    return PrivacyPolicy(name if family == "dpf" else "rr", n=n if by == "n" else None,
                         t_s=t_s if by == "t" else None, tick_s=tick_s if by == "t" else None)


class HeapOrderStage(PrivacyStage):
    """DPF as PrivateKube's simulator runs it, down to the order it goes through its waiting
    claims (``--heap-order``): the array of a ``heapq.heapify``'d list of (share, place in its
    queue), not sorted; only the new claims when no budget unlocked since the last ask; claims
    that can never fit stay queued until their oldest block (under N, or their newest) is all
    unlocked and has too little left. Demonstrates where the one claim of difference comes from."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._reject_early = False
        self._last_unlocked = np.zeros(len(self.blocks))

    def _grant(self, waiting: np.ndarray, now: float) -> None:
        claims = self.claims
        unlocked = self.policy.unlocked_fraction(self.blocks, self.arrived_claims, now)
        increment = bool(np.any(unlocked > self._last_unlocked + 1e-15))
        self._last_unlocked = self._unlocked = unlocked
        queue = waiting[np.lexsort((waiting, self.arrived_s[waiting]))]
        considered = queue if increment else queue[self._fresh[queue]]
        self._fresh[waiting] = False
        heap = list(zip(self._shares[considered].tolist(), range(len(considered))))
        heapq.heapify(heap)
        order = considered[np.array([place for _, place in heap], dtype=np.int64)]
        room = unlocked[:, None] * self.budget - self.consumed
        granted = self._grant_in_order(order, room) if len(order) else order
        if len(granted):
            self.state[granted] = ClaimState.GRANTED
            self.decided_s[granted] = now
            entries = claims.entries(granted)
            np.add.at(self.consumed, claims.block[entries], claims.demand[entries])
        if increment:
            self._reject_on_spent_blocks(queue[self.state[queue] == ClaimState.WAITING], unlocked, now)
        self._record(now, unlocked)

    def _reject_on_spent_blocks(self, waiting: np.ndarray, unlocked: np.ndarray, now: float) -> None:
        if not len(waiting):
            return
        claims = self.claims
        left = (unlocked[:, None] * self.budget - self.consumed)[:, 0]
        lengths = claims.start[waiting + 1] - claims.start[waiting]
        first = np.cumsum(lengths) - lengths
        block = claims.block[claims.entries(waiting)]
        oldest, newest = np.minimum.reduceat(block, first), np.maximum.reduceat(block, first)
        epsilon = claims.demand[claims.start[waiting], 0]
        retired = unlocked >= 1.0
        reject = retired[oldest] & (left[oldest] < epsilon)
        if self.policy.unlocks_by == "claims":
            reject |= ~retired[oldest] & (newest != oldest) & retired[newest] & (left[newest] < epsilon)
        for claim in waiting[reject].tolist():
            self._reject(claim, now, "privacy claim cannot be granted: its block is all unlocked and too little is left")


def replay(blocks: Blocks, claims: Claims, arrival: np.ndarray, policy: PrivacyPolicy, shape: dict,
           rejected_portions: str = "lost", heap_order: bool = False) -> dict:
    """Ask the claims at each arrival (and, unlocking by time, at each tick) until the duration."""
    kind = HeapOrderStage if heap_order and policy.name.startswith("dpf") else PrivacyStage
    stage = kind(blocks, claims, policy, shape["timeout_s"], rejected_portions=rejected_portions, retire_blocks=True)
    times = arrival
    if policy.unlocks_by == "time":
        ticks = np.arange(0.0, shape["duration_s"], shape["every_s"] / 2)
        times = np.union1d(arrival, ticks)
    new_at = np.searchsorted(arrival, times, side="right")  # claims arrived by each time
    started = time.perf_counter()
    waiting = np.zeros(0, dtype=np.int64)
    arrived = 0
    for now, upto in zip(times.tolist(), new_at.tolist()):
        asking = np.concatenate([waiting, np.arange(arrived, upto)]) if upto > arrived else waiting
        arrived = upto
        if not len(asking):
            continue
        stage.admit(Applicants(asking, claim=asking), AdmissionContext(now, lambda keys: keys, str))
        waiting = asking[stage.state[asking] == ClaimState.WAITING]
    wall_s = time.perf_counter() - started
    granted = stage.state == ClaimState.GRANTED
    return {"granted": int(granted.sum()), "rejected": int((stage.state == ClaimState.REJECTED).sum()),
            "mean_delay_s": round(float(np.nanmean(stage.delay_s())), 3) if granted.any() else None,
            "wall_s": round(wall_s, 3)}


def write_pk_tasks(claims: Claims, arrival: np.ndarray, path: str) -> None:
    """The claims in PrivateKube's workload-trace format (its ``workload_test`` YAML)."""
    with open(path, "w") as f:
        for i, at in enumerate(arrival.tolist()):
            lo, hi = int(claims.start[i]), int(claims.start[i + 1])
            first, last = int(claims.block[hi - 1]), int(claims.block[lo])
            f.write(f"- arrival_time: {at!r}\n  start_block_index: {first}\n  end_block_index: {last}\n"
                    f"  epsilon: {float(claims.demand[lo, 0])!r}\n  completion_time: 0\n"
                    "  cpu_demand: 1\n  gpu_demand: 1\n  memory_demand: 1\n")


def run_privatekube(args: argparse.Namespace, tasks: str, shape: dict, policy: str, n: int, t_s: float,
                    workdir: str) -> dict:
    spec = {"tasks": tasks, "policy": PK_POLICY[policy], "n": n, "t_s": t_s, "timeout_s": shape["timeout_s"],
            "duration_s": shape["duration_s"], "blocks_at_start": shape["blocks_at_start"],
            "static": shape["static"], "block_every_s": shape["block_every_s"],
            "arrival_every_s": shape["every_s"], "workspace": os.path.join(workdir, f"ws_{policy}")}
    spec_path = os.path.join(workdir, f"spec_{policy}.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    path = [os.path.join(args.privatekube, "simulator")] + ([args.privatekube_path] if args.privatekube_path else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    driver = os.path.join(os.path.dirname(os.path.abspath(__file__)), "privatekube_driver.py")
    done = subprocess.run([args.privatekube_python, driver, spec_path], env=env, cwd=workdir,
                          capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        return {"pk_error": done.stderr.strip().splitlines()[-1:]}
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    return {"pk_granted": answer["granted"], "pk_wall_s": answer["wall_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=("single", "multi", "both"), default="both")
    parser.add_argument("--n", default="50,100,200", help="the N swept (T = N × the mean arrival interval)")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rejected-portions", choices=("lost", "returned"), default="lost",
                        help="round robin: what a rejected claim held (PrivateKube: lost)")
    parser.add_argument("--continuous", action="store_true",
                        help="unlock by T continuously, not in PrivateKube's steps of half the arrival interval")
    parser.add_argument("--heap-order", action="store_true",
                        help="DPF in PrivateKube's order: a heapified list's array, not sorted (HeapOrderStage)")
    parser.add_argument("--privatekube", help="a checkout of columbia/PrivateKube: run its simulator beside")
    parser.add_argument("--privatekube-python", default=sys.executable)
    parser.add_argument("--privatekube-path", help="PYTHONPATH entries for its simpy and desmod forks")
    parser.add_argument("--quick", action="store_true",
                        help="the single-block workload, N = 10 (apportion's side: PrivateKube only with --privatekube): what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        args.workload, args.n = "single", "10"
        if not args.privatekube:
            print("privatekube: its side not run (no --privatekube checkout given)")
    policies = args.policies.split(",")
    for name in ("single", "multi") if args.workload == "both" else (args.workload,):
        shape = SHAPES[name]
        blocks, claims, arrival = workload(shape, args.seed)
        with tempfile.TemporaryDirectory(prefix="privatekube-") as workdir:
            tasks = os.path.join(workdir, "tasks.yaml")
            if args.privatekube:
                write_pk_tasks(claims, arrival, tasks)
            for n in [int(x) for x in args.n.split(",")]:
                t_s = n * shape["every_s"]
                for policy in policies:
                    if policy == "fcfs" and n != int(args.n.split(",")[0]):
                        continue  # no N or T
                    tick_s = None if args.continuous else shape["every_s"] / 2
                    result = replay(blocks, claims, arrival, policy_of(policy, n, t_s, tick_s), shape,
                                    args.rejected_portions, args.heap_order)
                    row = {"workload": name, "policy": policy, "N": n, "T_s": t_s, "claims": len(claims),
                           "blocks": len(blocks), **result}
                    if args.privatekube:
                        row.update(run_privatekube(args, tasks, shape, policy, n, t_s, workdir))
                    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
