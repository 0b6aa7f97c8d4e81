"""Replay the shapes of PrivateKube's privacy microbenchmark through apportion's privacy stage.

Two workloads (docs/privacy.md gives their parameters and where they come from): one block
present from the start, claims arriving every second ("single"); and a block every 10 s for
300 s, claims arriving every 0.078125 s ("multi"). 75% of claims are mice (ε 0.01 on the newest
block), the rest elephants (ε 0.1 on the 10 newest blocks). Every claim is asked at each
arrival, as PrivateKube's scheduler does; a claim not granted within the timeout is rejected.

Prints one JSON line per workload and policy: claims granted, rejected, mean delay to grant
and the wall time of the replay.

    python benchmarks/privacy.py [--workload single|multi|both] [--mice 75] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from apportion.core.privacy import Blocks, Claims
from apportion.mechanism.admission import AdmissionContext, Applicants
from apportion.mechanism.privacy_budget import ClaimState, PrivacyStage
from apportion.mechanism.privacy_policies import PrivacyPolicy

MICE_EPSILON, ELEPHANT_EPSILON = 0.01, 0.1
ELEPHANT_BLOCKS = 10
SHAPES = {
    # claims' arrival interval (s), how many claims, block interval (s), blocks, timeout (s), N, T (s):
    # PrivateKube's, with N at 1.0 × their base of 100 claims and T = N × the arrival interval
    "single": dict(every_s=1.0, claims=int(100 * 2.25 * 1.05), block_every_s=None, blocks=1,
                   timeout_s=3 * 100 * 1.0, n=100, t_s=100 * 1.0),
    "multi": dict(every_s=0.078125, claims=int(300 / 0.078125), block_every_s=10.0, blocks=30,
                  timeout_s=3 * 5 * 100 * 0.078125, n=100, t_s=100 * 0.078125),
}


def workload(shape: dict, mice_percent: float, seed: int) -> tuple[Blocks, Claims, np.ndarray]:
    """The blocks, the claims and each claim's arrival time."""
    rng = np.random.default_rng(seed)
    count, num_blocks = shape["claims"], shape["blocks"]
    block_at = np.zeros(num_blocks) if shape["block_every_s"] is None else np.arange(num_blocks) * shape["block_every_s"]
    blocks = Blocks(np.array([f"b{i}" for i in range(num_blocks)], dtype=object), block_at,
                    np.ones(num_blocks), np.full(num_blocks, 1e-6))
    arrival = np.arange(count) * shape["every_s"]
    mice = rng.random(count) < mice_percent / 100.0
    newest = np.searchsorted(block_at, arrival, side="right") - 1  # the newest block present at arrival
    wanted = np.where(mice, 1, ELEPHANT_BLOCKS)
    taken = np.minimum(wanted, newest + 1)
    start = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(taken, out=start[1:])
    owner = np.repeat(np.arange(count), taken)
    block = newest[owner] - (np.arange(int(start[-1])) - start[owner])
    epsilon = np.where(mice, MICE_EPSILON, ELEPHANT_EPSILON)[owner]
    demand = np.column_stack([epsilon, np.zeros(len(epsilon))])
    return blocks, Claims(start, block, demand, np.ones(count)), arrival


def replay(blocks: Blocks, claims: Claims, arrival: np.ndarray, policy: PrivacyPolicy, timeout_s: float) -> dict:
    stage = PrivacyStage(blocks, claims, policy, timeout_s)
    started = time.perf_counter()
    waiting = np.zeros(0, dtype=np.int64)
    for i, now in enumerate(arrival.tolist()):
        asking = np.append(waiting, i)
        stage.admit(Applicants(asking, claim=asking), AdmissionContext(now, lambda keys: keys, str))
        waiting = asking[stage.state[asking] == ClaimState.WAITING]
    end = float(arrival[-1]) + timeout_s  # the last ones wait out their timeout
    if len(waiting):
        stage.admit(Applicants(waiting, claim=waiting), AdmissionContext(end, lambda keys: keys, str))
    wall_s = time.perf_counter() - started
    delays = stage.delay_s()
    granted = stage.state == ClaimState.GRANTED
    return {"granted": int(granted.sum()), "rejected": int((stage.state == ClaimState.REJECTED).sum()),
            "mean_delay_s": round(float(np.nanmean(delays)), 3) if granted.any() else None,
            "wall_s": round(wall_s, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=("single", "multi", "both"), default="both")
    parser.add_argument("--mice", type=float, default=75.0, help="percent of claims that are mice")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for name in ("single", "multi") if args.workload == "both" else (args.workload,):
        shape = SHAPES[name]
        blocks, claims, arrival = workload(shape, args.mice, args.seed)
        policies = [PrivacyPolicy("fcfs"), PrivacyPolicy("rr", n=shape["n"]), PrivacyPolicy("rr", t_s=shape["t_s"]),
                    PrivacyPolicy("dpf-n", n=shape["n"]), PrivacyPolicy("dpf-t", t_s=shape["t_s"]),
                    PrivacyPolicy("pack", n=shape["n"]), PrivacyPolicy("pack", t_s=shape["t_s"])]
        for policy in policies:
            result = replay(blocks, claims, arrival, policy, shape["timeout_s"])
            unlock = {"claims": {"N": policy.n}, "time": {"T_s": policy.t_s}}.get(policy.unlocks_by, {})
            print(json.dumps({"workload": name, "policy": policy.name, **unlock, "claims": len(claims),
                              "blocks": len(blocks), "mice_percent": args.mice, **result}), flush=True)


if __name__ == "__main__":
    main()
