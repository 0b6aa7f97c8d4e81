"""Replay a month of jobs on a rented cluster under each provisioning policy (docs/cloud.md).

The workload is apportion's seeded synthetic one, ``--jobs`` jobs arriving over ``--days`` days;
each job is given a deadline ``U(--slack-low, --slack-high)`` times its run on the on-demand
type cheapest for it (static's choice), plus one round (it starts at the round after its
submission). The market is the seeded synthetic one, or ``--market FILE``. A deadline
"on-demand alone could meet" is one a job meets starting on that type at its first round.

Prints one JSON line per provisioning policy: dollars (and static's dollars over them), average
JCT, deadlines missed (all, and those on-demand alone could meet), spot preemptions, and the
replay's wall and CPU time.

    python benchmarks/compare/cloud_market.py [--jobs 500] [--days 30] [--seed 0] [--market synthetic|FILE|DIR ...]
                                      [--market-start TIME] [--interruption-rates FILE]
                                      [--preemptions-per-hour R]  (a synthetic market with more preemptions)
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

import numpy as np

from apportion.experiment import WorkloadSettings, load_inputs, load_market, run_rented
from apportion.policies.provisioning import PROVISIONING
from apportion.sim import SimConfig
from apportion.sim.rented import RentalConfig, market_cluster
from apportion.sim.simulator import job_throughputs
from apportion.workloads.synthetic_market import MarketModel, synthetic_market


def static_run_s(inputs, market, config: SimConfig) -> np.ndarray:
    """[n] seconds each job runs from its start on the on-demand type that finishes it for the fewest
    dollars at the market's first prices (static's choice; start-up included)."""
    cluster = market_cluster(market)
    gpu_at = {t: i for i, t in enumerate(cluster.gpu_types)}
    speed = job_throughputs(inputs.jobs, cluster, inputs.throughputs)[:, [gpu_at[t] for t in market.gpu_type]]
    instances = -(-inputs.jobs.num_gpus[:, None] // market.gpus[None, :])
    usable = (speed > 0) & (market.market == 0)[None, :] & ~np.isnan(market.prices_at(0.0))[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        dollars = np.where(usable, instances * market.prices_at(0.0)[None, :] / speed, np.inf)
        choice = np.argmin(dollars, axis=1)
        return config.start_cost_s + inputs.jobs.total_steps / speed[np.arange(len(choice)), choice]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--market", nargs="+", default=["synthetic"],
                        help="synthetic, or AWS price files or directories of them (e.g. training_on_a_dime's logs/aws/cost)")
    parser.add_argument("--market-start", default=None, help="the market's time 0 (default: where every series has a price)")
    parser.add_argument("--interruption-rates", default=None, help="AWS's interruption rates for spot preemptions")
    parser.add_argument("--preemptions-per-hour", type=float, default=None,
                        help="the synthetic market's preemption rate at a spot type's own level (default: the model's)")
    parser.add_argument("--slack-low", type=float, default=1.1)
    parser.add_argument("--slack-high", type=float, default=3.0)
    parser.add_argument("--round-s", type=float, default=360.0)
    parser.add_argument("--restart-cost-s", type=float, default=60.0)
    parser.add_argument("--checkpoint-gb", type=float, default=10.0)
    parser.add_argument("--policies", default=",".join(PROVISIONING))
    parser.add_argument("--quick", action="store_true", help="20 jobs over a day: what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.days = 20, 1.0

    settings = WorkloadSettings(jobs=args.jobs, rate_per_hour=args.jobs / (args.days * 24), seed=args.seed)
    inputs = load_inputs(settings)
    if args.preemptions_per_hour is None:
        market = load_market(args.market, inputs.throughputs, args.seed, start=args.market_start,
                             interruption_rates=args.interruption_rates)
    else:
        market = synthetic_market(MarketModel(preemptions_per_hour=args.preemptions_per_hour, seed=args.seed))
    config = SimConfig(round_s=args.round_s, restart_cost_s=args.restart_cost_s)
    alone_s = static_run_s(inputs, market, config)
    rng = np.random.default_rng(args.seed)
    slack = rng.uniform(args.slack_low, args.slack_high, len(inputs.jobs))
    jobs = inputs.jobs
    first_round_s = np.ceil(jobs.submit_time_s / args.round_s) * args.round_s
    deadline = jobs.submit_time_s + slack * alone_s + args.round_s
    inputs = replace(inputs, jobs=replace(jobs, deadline_s=deadline))
    meetable = first_round_s + alone_s <= deadline

    spot = market.market == 1
    print(json.dumps({"market": market.source, "days": round(float(market.times_s[-1]) / 86400, 1),
                      "spot_types": int(spot.sum()), "on_demand_types": int((~spot).sum()),
                      "spot_preemptions_from": market.preemptions_from, "notes": list(market.notes)}), flush=True)
    static_dollars = None
    for policy in args.policies.split(","):
        wall, cpu = time.perf_counter(), time.process_time()
        result = run_rented(inputs, market, policy, config, RentalConfig(checkpoint_gb=args.checkpoint_gb))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        summary = result.summary
        static_dollars = summary["dollars"] if policy == "static" else static_dollars
        print(json.dumps({
            "policy": policy,
            "jobs": summary["jobs"],
            "completed": summary["completed"],
            "dollars": round(summary["dollars"], 2),
            "static_over_this": None if static_dollars is None else round(static_dollars / summary["dollars"], 2),
            "dollars_spot": round(summary["dollars_spot"], 2),
            "dollars_egress": round(summary["dollars_egress"], 2),
            "avg_jct_h": round(summary["avg_jct_s"] / 3600, 3),
            "deadlines_missed": summary["deadlines_missed"],
            "missed_that_on_demand_meets": int((result.missed_deadline & meetable).sum()),
            "spot_preemptions": summary["spot_preemptions"],
            "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2),
        }), flush=True)


if __name__ == "__main__":
    main()
