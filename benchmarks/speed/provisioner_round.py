"""How long a rented server's provisioner takes to decide a round: prints the median and max.

The seeded synthetic market (every catalogue instance in every region, on-demand and spot) and
``--jobs`` waiting and running jobs of 1 to 8 GPUs with speeds on its five GPU types, each round
a tenth of them replaced by new ones; a fake cloud that grants at once, so every round also
charges held instances. Timed: ``RentedProvisioner.provision`` (the view, the policy, the slots'
cap, the request), ``--rounds`` times after one untimed round.

    python benchmarks/speed/provisioner_round.py --jobs 1000 --policy spot-fallback
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from apportion.policies.provisioning import PROVISIONING, make_provisioning
from apportion.serve.resources.rental.provisioner import Demand
from apportion.serve.resources.rental.fake import FakeProvisioner
from apportion.workloads.synthetic_market import synthetic_market

TYPES = ("a100", "h100", "k80", "t4", "v100")


def demand(rng: np.random.Generator, ids: np.ndarray) -> Demand:
    gpus = rng.choice([1, 2, 4, 8], size=len(ids), p=[0.6, 0.2, 0.15, 0.05])
    speed = rng.uniform(0.5, 4.0, size=(len(ids), len(TYPES)))
    return Demand(job_id=ids, gpus=gpus, speed=speed, remaining_steps=rng.uniform(1e3, 1e6, size=len(ids)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--policy", default="spot-fallback", choices=list(PROVISIONING))
    parser.add_argument("--quick", action="store_true", help="a few jobs, seconds: what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.rounds = 50, 3
    rng = np.random.default_rng(0)
    market = synthetic_market()
    slots = {t: 8 * args.jobs for t in TYPES}
    cloud = FakeProvisioner(market, make_provisioning(args.policy), TYPES, slots, round_s=360.0, origin_s=0.0)
    ids = np.arange(1, args.jobs + 1)
    now, times = 0.0, []
    for r in range(args.rounds + 1):
        turnover = args.jobs // 10
        ids = np.concatenate([ids[turnover:], ids[-1] + 1 + np.arange(turnover)])
        jobs = demand(rng, ids)
        started = time.perf_counter()
        cloud.provision(jobs, now)
        if r:
            times.append((time.perf_counter() - started) * 1000)
        now += 360.0
    print(f"{args.jobs} jobs, {len(market)} instance types, {args.policy}: a round's provisioning median "
          f"{statistics.median(times):.2f} ms, max {max(times):.2f} ms over {args.rounds} rounds; "
          f"${sum(s['usd'] for s in cloud.ledger().values()):,.0f} spent")


if __name__ == "__main__":
    main()
