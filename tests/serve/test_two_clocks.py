"""Parity: the simulator and the server decide alike, round by round, on the same workloads.

Both clocks call the same round planner; this replays small seeded workloads through each
(the server on a fake clock, its fake jobs progressing at the simulator's throughputs) and
checks that every round runs the same jobs on the same GPU types with the same partners,
and that every job completes at the same time.
"""

from __future__ import annotations


import numpy as np
import pytest

from apportion.core.jobs import JobTable
from apportion.core.queues import queue_config_from_mapping
from apportion.core.throughputs import ThroughputTable
from apportion.policies import make_policy
from apportion.policies.las import Las
from two_clocks import in_simulator, on_server

ROUND_S = 100.0
SCALES = (1, 2)
# steps/s on one GPU of (v100, k80); two GPUs run twice as fast. Every rate times a round is a
# whole number of steps, so the server's integer step counts lose nothing.
ONE_GPU = {"a": [2.0, 1.0], "b": [4.0, 1.0], "c": [1.0, 0.5]}
PAIRS = {("a", "b", "v100"): (1.5, 3.0), ("a", "c", "v100"): (1.5, 0.75), ("b", "c", "v100"): (3.0, 0.75),
         ("a", "b", "k80"): (0.75, 0.75)}
THROUGHPUTS = ThroughputTable(
    kinds=tuple(ONE_GPU), gpu_types=("v100", "k80"), scales=SCALES,
    steps_per_s=np.array([ONE_GPU[k] for k in ONE_GPU])[:, :, None] * np.array(SCALES, dtype=float)[None, None, :],
    pair_steps_per_s=PAIRS,
)
QUEUES = ["research", "prod"]


def workload(seed: int, n: int = 16, two_gpu_share: float = 0.3) -> JobTable:
    rng = np.random.default_rng(seed)
    kinds = rng.choice(list(ONE_GPU), size=n)
    return JobTable.build(
        job_id=[f"job-{i}" for i in range(n)],
        submit_time_s=np.sort(rng.integers(0, 12, size=n) * 50.0 + rng.integers(0, 2, size=n) * 7.0),
        kind_names=list(kinds),
        num_gpus=np.where(rng.random(n) < two_gpu_share, 2, 1),
        total_steps=rng.integers(2, 16, size=n) * 150.0,
        kinds=tuple(ONE_GPU),
        queue=[QUEUES[i % 2] for i in range(n)],
    )


def policy(spec: str):
    if spec == "las":  # thresholds a few rounds apart, so jobs move between queues in the replay
        return Las(thresholds_gpu_s=(300.0, 1200.0))
    if spec == "hierarchical":
        queues = queue_config_from_mapping({"queues": [
            {"name": "research", "weight": 1, "nominal": {"v100": 1, "k80": 1}},
            {"name": "prod", "weight": 2, "nominal": {"v100": 1, "k80": 1}},
        ]}, "queues.yaml")
        return make_policy("hierarchical", queues=queues)
    name, _, variant = spec.partition(":")
    return make_policy(name, space_sharing=variant == "space-sharing")


def placements_in_force(replayed, finish):
    """Round start -> placement, leaving out jobs already finished and empty rounds."""
    rounds = {}
    for t, placed in replayed.rounds.items():
        placed = {j: where for j, where in placed.items() if finish.get(j, np.inf) > t + 1e-9}
        if placed:
            rounds[round(t, 6)] = placed
    return rounds


@pytest.mark.parametrize("spec", ["fifo", "las", "max-min-fairness", "max-min-fairness:space-sharing",
                                  "finish-time-fairness", "hierarchical"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_simulator_and_the_server_decide_alike(spec, seed, tmp_path):
    jobs = workload(seed)
    simulated = in_simulator(jobs, "v100:2:2,k80:2:2", THROUGHPUTS, policy(spec), ROUND_S)
    served = on_server(jobs, "v100:2,k80:2", THROUGHPUTS, policy(spec), ROUND_S, tmp_path,
                       queues=list(jobs.queue))

    assert len(simulated.finish_s) == len(jobs)
    sim_rounds = placements_in_force(simulated, simulated.finish_s)
    server_rounds = placements_in_force(served, served.finish_s)
    for t in sorted(set(sim_rounds) | set(server_rounds)):
        assert server_rounds.get(t) == sim_rounds.get(t), f"round at {t:g} s"
    assert served.finish_s == pytest.approx(simulated.finish_s)
    if spec.endswith(":space-sharing"):
        assert any(partner for placed in sim_rounds.values() for _, partner in placed.values())
