"""Check finish-time fairness's warm model against cold solves, re-solve by re-solve, on a replay.

    python benchmarks/checks/check_finish_time_warm.py [--jobs 1000] [--shape gavel] [--seed 0]

Replays the gavel-comparison workload (v100/p100/k80 × 36, 360 s rounds, no restart cost)
under finish-time fairness; at every re-solve a second policy solves the same inputs cold
(``FinishTimeFairness.solve_cold``: the model built afresh, a plain feasibility test at every
bisection midpoint). Prints the largest relative difference in the worst ratio ρ and in the
last stage's objective Σ value·X, how many re-solves there were, and the LP runs of each.
The replay follows the warm allocations.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from apportion.experiment import WorkloadSettings, load_inputs
from apportion.policies.finish_time_fairness import FinishTimeFairness
from apportion.sim.run import simulate
from apportion.sim.simulator import SimConfig

CLUSTER = "v100:36:1,p100:36:1,k80:36:1"


class Checked(FinishTimeFairness):
    """Finish-time fairness that also solves every re-solve cold and records the differences."""

    def __init__(self) -> None:
        super().__init__()
        self.cold = FinishTimeFairness()
        self.ratio_diff: list[float] = []
        self.objective_diff: list[float] = []
        self.warm_runs = 0

    def solve(self, jobs, cluster, throughputs, value):
        warm = super().solve(jobs, cluster, throughputs, value)
        self.warm_runs += self._model.probes
        cold = self.cold.solve_cold(jobs, cluster, throughputs, value)
        self.ratio_diff.append(abs(self.worst_ratio - self.cold.worst_ratio) / self.cold.worst_ratio)
        warm_total, cold_total = float((value * warm.share).sum()), float((value * cold.share).sum())
        self.objective_diff.append(abs(warm_total - cold_total) / max(abs(cold_total), 1e-12))
        return warm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--shape", default="gavel")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="30 jobs: seconds, what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        args.jobs = 30
    inputs = load_inputs(WorkloadSettings(jobs=args.jobs, rate_per_hour=5.0, seed=args.seed, shape=args.shape,
                                          cluster=CLUSTER))
    policy = Checked()
    simulate(inputs.jobs, inputs.cluster, inputs.throughputs, policy, SimConfig(round_s=360.0, restart_cost_s=0.0))
    ratio, objective = np.array(policy.ratio_diff), np.array(policy.objective_diff)
    print(json.dumps({
        "re_solves": len(ratio),
        "max_ratio_rel_diff": float(ratio.max(initial=0.0)),
        "ratios_not_identical": int((ratio > 0).sum()),
        "max_objective_rel_diff": float(objective.max(initial=0.0)),
        "objectives_over_1e-9": int((objective > 1e-9).sum()),
        "warm_lp_runs": policy.warm_runs,
    }, indent=2))


if __name__ == "__main__":
    main()
