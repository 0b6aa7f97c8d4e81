"""Parity: the simulator and the server decide alike, round by round, on the same workloads.

Both clocks call the same round planner; this replays small seeded workloads through each
(the server on a fake clock, its fake jobs progressing at the simulator's throughputs) and
checks that every round runs the same jobs on the same GPU types with the same partners,
and that every job completes at the same time.

Every registered policy and variant is replayed (a new one is covered without being named),
on fixed-size jobs of three kinds, two users, two queues and three priorities, with known
durations (srtf, finish-time fairness) or predicted ones from the jobs finished so far (qssf).
goodput and optimus size elastic jobs; here they run their fixed-size path (each job at its
own GPU count): elastic jobs cannot be compared this way, since the server sizes them from
models it fits to what their attempts report, and the simulator from their true models
(tests/sim/test_elastic.py and tests/serve/test_serve_elastic*.py cover each side).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from apportion.core.cpu_speed import CoreCurves
from apportion.core.jobs import JobTable
from apportion.core.queues import queue_config_from_mapping
from apportion.core.throughputs import ThroughputTable
from apportion.policies import make_policy, policy_info, policy_names
from apportion.policies.partitioned import Partitioned
from two_clocks import Replayed, in_simulator, on_server

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
PRICES = {"v100": 2.5, "k80": 0.5}  # $ per GPU-hour, for min-cost
QUEUES = ["research", "prod"]
USERS = ["ann", "bob"]
PRIORITIES = [0.5, 1.0, 2.0]
SPECS = [spec for name in policy_names() for spec in [name] + [f"{name}:{v}" for v in policy_info(name).variants]]
SEEDS = [0, 1, 2]


def workload(seed: int, n: int = 16, two_gpu_share: float = 0.3, priorities=PRIORITIES) -> JobTable:
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
        user=[USERS[i % 3 % 2] for i in range(n)],
        name=[f"train-{k}" for k in kinds],  # a user's jobs of one kind form a group the predictor learns
        priority=rng.choice(priorities, size=n),
    )


def policy(spec: str, **options):
    """A fresh policy for ``spec``: las with thresholds a few rounds apart (so jobs move between
    queues in the replay), hierarchical over the workload's two queues, any other as registered."""
    name = spec.split(":")[0]
    if name == "las" and "continuous" not in spec.split(":")[1:]:  # Synergy's form has no thresholds
        return make_policy(spec, thresholds_gpu_s=(300.0, 1200.0), **options)
    if name == "hierarchical":
        queues = queue_config_from_mapping({"queues": [
            {"name": "research", "weight": 1, "nominal": {"v100": 1, "k80": 1}},
            {"name": "prod", "weight": 2, "nominal": {"v100": 1, "k80": 1}},
        ]}, "queues.yaml")
        return make_policy(spec, queues=queues, **options)
    return make_policy(spec, **{**policy_info(spec).example_options(), **options})


def placements_in_force(replayed: Replayed, finish: dict[int, float]) -> dict:
    """Round start -> placement, leaving out jobs already finished and empty rounds."""
    rounds = {}
    for t, placed in replayed.rounds.items():
        placed = {j: where for j, where in placed.items() if finish.get(j, np.inf) > t + 1e-9}
        if placed:
            rounds[round(t, 6)] = placed
    return rounds


def both_clocks(jobs: JobTable, simulated_policy, served_policy, tmp_path,
                received_since: str = "allocation", user_weights: dict | None = None) -> tuple[Replayed, Replayed]:
    simulated = in_simulator(jobs, "v100:2:2,k80:2:2", THROUGHPUTS, simulated_policy, ROUND_S, prices=PRICES,
                             received_since=received_since, user_weights=user_weights)
    served = on_server(jobs, "v100:2,k80:2", THROUGHPUTS, served_policy, ROUND_S, tmp_path,
                       queues=list(jobs.queue), prices=PRICES, received_since=received_since,
                       user_weights=user_weights)
    return simulated, served


def assert_alike(simulated: Replayed, served: Replayed, jobs: JobTable) -> dict:
    """Every round runs the same jobs on the same types with the same partners, and every job ends
    at the same time; the simulator's rounds, for further checks."""
    assert len(simulated.finish_s) == len(jobs)
    sim_rounds = placements_in_force(simulated, simulated.finish_s)
    server_rounds = placements_in_force(served, served.finish_s)
    for t in sorted(set(sim_rounds) | set(server_rounds)):
        assert server_rounds.get(t) == sim_rounds.get(t), f"round at {t:g} s"
    assert served.finish_s == pytest.approx(simulated.finish_s)
    return sim_rounds


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("seed", SEEDS)
def test_the_simulator_and_the_server_decide_alike(spec, seed, tmp_path):
    jobs = workload(seed)
    sim_rounds = assert_alike(*both_clocks(jobs, policy(spec), policy(spec), tmp_path), jobs)
    if "space-sharing" in spec.split(":"):
        assert any(partner for placed in sim_rounds.values() for _, partner in placed.values())


@pytest.mark.parametrize(("spec", "options"), [
    ("srtf", {"durations": "predicted"}),  # ranks change by themselves as jobs outlive their predictions
    ("finish-time-fairness", {"durations": "predicted"}),
    ("max-min-fairness", {"water_filling": True}),
], ids=["srtf-predicted", "finish-time-fairness-predicted", "max-min-fairness-water-filling"])
@pytest.mark.parametrize("seed", SEEDS[:2])
def test_options_that_change_what_a_policy_sees_decide_alike(spec, options, seed, tmp_path):
    jobs = workload(seed)
    assert_alike(*both_clocks(jobs, policy(spec, **options), policy(spec, **options), tmp_path), jobs)


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_pop_partitions_decide_alike_once_both_clocks_number_jobs_alike(seed, tmp_path):
    """POP puts each job in a partition by a seeded hash of its index: the simulator's index is
    the job's row (from 0), the server's its id (from 1), so the same seed splits the jobs
    differently. Offsetting the simulator's seed by one gives both the same partitions, and
    then the same decisions."""
    jobs = workload(seed)
    simulated, served = (make_policy("max-min-fairness", partitions=2) for _ in range(2))
    assert isinstance(simulated, Partitioned) and isinstance(served, Partitioned)
    simulated.seed = served.seed + 1
    rows = np.arange(len(jobs))
    assert simulated.partition_of(rows).tolist() == served.partition_of(rows + 1).tolist()
    assert_alike(*both_clocks(jobs, simulated, served, tmp_path), jobs)


@pytest.mark.parametrize("spec", ["max-min-fairness", "max-throughput"])
def test_best_effort_jobs_decide_alike(spec, tmp_path):
    jobs = workload(0, priorities=[0.0, 1.0, 2.0])
    assert (jobs.priority == 0).any()
    assert_alike(*both_clocks(jobs, policy(spec), policy(spec), tmp_path), jobs)


@pytest.mark.parametrize("spec", ["max-min-fairness", "max-min-fairness:space-sharing", "finish-time-fairness"])
@pytest.mark.parametrize("seed", SEEDS[:2])
def test_the_received_share_since_arrival_decides_alike(spec, seed, tmp_path):
    jobs = workload(seed)
    assert_alike(*both_clocks(jobs, policy(spec), policy(spec), tmp_path, received_since="arrival"), jobs)


@pytest.mark.parametrize("spec", SPECS)
def test_sharing_by_user_decides_alike(spec, tmp_path):
    """Both clocks wrap the policy alike (policies/by_user.py), weights included; the workload's
    second user has a third of the jobs, so its share changes what runs."""
    jobs = workload(1)
    assert_alike(*both_clocks(jobs, policy(spec), policy(spec), tmp_path, user_weights={"bob": 2.0}), jobs)


@pytest.mark.parametrize("spec", ["srtf", "las", "fifo"])
@pytest.mark.parametrize("seed", SEEDS)
def test_cpu_starved_jobs_are_ranked_at_the_speed_their_cores_allow_on_both_clocks(spec, seed, tmp_path):
    """One core per GPU, split in proportion (the simulator's default CPU split, the server's
    ``--cpu-split proportional``): a third of the jobs need four cores per GPU for their best speed and
    train at a quarter of it with one. Both clocks rank them (srtf: by remaining time) at that speed,
    not their best, so they run the same jobs in every round; the server knows each job's curve as its
    profile would measure it."""
    jobs = workload(seed)
    rng = np.random.default_rng(seed)
    starved = rng.random(len(jobs)) < 1 / 3
    curves = CoreCurves(np.array([1.0, 2.0, 4.0]), np.where(starved[:, None], [0.25, 0.5, 1.0], [1.0, 1.0, 1.0]))
    jobs = replace(jobs, cpu_curves=curves)
    simulated = in_simulator(jobs, "v100:2:2,k80:2:2", THROUGHPUTS, policy(spec), ROUND_S, prices=PRICES,
                             cpus_per_node=2)
    served = on_server(jobs, "v100:2,k80:2", THROUGHPUTS, policy(spec), ROUND_S, tmp_path, queues=list(jobs.queue),
                       prices=PRICES, cores=4)
    assert_alike(simulated, served, jobs)


@pytest.mark.parametrize(("spec", "options"), [
    ("qssf", {}), ("qssf:median-left", {}), ("qssf:estimate-ratios", {}), ("srtf", {"durations": "predicted"}),
], ids=["qssf", "qssf-median-left", "qssf-estimate-ratios", "srtf-predicted"])
@pytest.mark.parametrize("seed", SEEDS[:2])
def test_jobs_own_estimates_rank_alike_corrected_by_each_users_record(spec, options, seed, tmp_path):
    """A trace's ``estimated_duration_s`` in the simulator, a job file's on the server: ann's estimates
    are half what her jobs take, bob's four times it, and every fourth job has none. Both clocks
    correct each user's by that user's finished jobs, and decide alike."""
    jobs = workload(seed, n=32)
    factor = np.where(np.asarray(jobs.user) == "ann", 0.5, 4.0)
    jobs = replace(jobs, estimated_steps=np.where(np.arange(len(jobs)) % 4 == 3, np.nan, jobs.total_steps * factor))
    assert_alike(*both_clocks(jobs, policy(spec, **options), policy(spec, **options), tmp_path), jobs)


@pytest.mark.parametrize("spec", ["srtf", "las", "fifo"])
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("report_rates", [False, True], ids=["prior-speeds", "measured-speeds"])
def test_a_job_files_cpu_speed_ranks_cpu_starved_jobs_alike_under_proportional(spec, seed, report_rates, tmp_path):
    """As above, but as ``--cpu-split proportional`` really runs: each job is only ever measured at its own
    share, which says nothing of its curve, so the server knows how starved a job is from its job file's
    ``cpu_speed`` alone (the simulator from the trace's column). Kind ``c`` needs four cores per GPU for its
    best speed and trains at a quarter of it with its one. Before a kind is measured its speed (the prior's,
    at all the cores it could use) is scaled by its curve at its share; once its jobs report their steps/s
    (``measured-speeds``), that speed already is at their share and is not scaled again."""
    jobs = workload(seed)
    starved = np.asarray(jobs.kind) == jobs.kinds.index("c")
    curves = CoreCurves(np.array([1.0, 2.0, 4.0]), np.where(starved[:, None], [0.25, 0.5, 1.0], [1.0, 1.0, 1.0]))
    jobs = replace(jobs, cpu_curves=curves)
    simulated = in_simulator(jobs, "v100:2:2,k80:2:2", THROUGHPUTS, policy(spec), ROUND_S, prices=PRICES,
                             cpus_per_node=2)
    served = on_server(jobs, "v100:2,k80:2", THROUGHPUTS, policy(spec), ROUND_S, tmp_path, queues=list(jobs.queue),
                       prices=PRICES, cores=4, curves_from="job file", report_rates=report_rates)
    assert_alike(simulated, served, jobs)
