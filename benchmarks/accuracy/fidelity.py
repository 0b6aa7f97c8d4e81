"""How far the simulator is from a real run of the same workload: prints one JSON line per policy.

About 30 small training jobs (the examples, three job kinds, mixed sizes, a burst then seeded
Poisson arrivals) run on the real ``apportion serve`` with CPU slots, once per policy, each on
a fresh state directory; then ``apportion.fidelity`` replays each finished run in the
simulator, under the same policy and round length, with the throughputs, start-up and stop
costs the run measured. Each line has:

- ``avg_jct_error``: |simulated average JCT - real average JCT| / real average JCT;
- ``p90_job_error``: the 90th percentile over jobs of |simulated JCT - real JCT| / real JCT;
- ``real`` and ``simulated``: average JCT, queueing and preemptions of each;
- ``costs``: the start-up, restart, stop and finish costs measured per job kind (seconds:
  mean, standard deviation, attempts); ``startup_window_s``: over how many seconds either side
  of a moment the other jobs' start-ups best predict one beginning then (the simulator charges
  each start-up its kind's mean times their ratio to theirs); ``speed_spread``: how far each attempt's speed
  strays from its job's and from its kind's (median and p90 of |ratio - 1|): the jitter of a
  shared machine;
- ``control``: the errors of the same replay of the same workload served again by the real
  scheduler on a fake clock, its fake jobs taking exactly each kind's mean costs and training
  at each job's measured speed: what is left without jitter (the simulator's own error);
- ``cost_jitter`` and ``speed_jitter``: the same, each fake attempt drawing its costs from
  those the run's attempts of its kind took, or its speed ratio from the run's attempts
  (averaged over three seeds): how much of the error each kind of jitter makes alone;
- ``ablations``: the errors when the simulator is told less (``kind_speeds``: one speed per
  kind instead of each job's own; ``kind_costs``: each kind's mean start-up whenever an attempt
  begins, the machine's load left out; ``constant_costs``: the fixed 10 s restart cost instead of
  the measured costs; ``plain_rounds``: the simulator's fixed rounds instead of the server's).

Each real run takes 5 to 10 minutes on the 2-core development machine, the rest a minute.

    python benchmarks/accuracy/fidelity.py                                # ~30 jobs, las then max-min-fairness
    python benchmarks/accuracy/fidelity.py --keep runs/fidelity           # keep the state directories
    python benchmarks/accuracy/fidelity.py --replay runs/fidelity         # replay kept runs again, no new run
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

sys.path.insert(0, str(REPO / "tests" / "fidelity"))

from benchmarks.faults.chaos import Server, environment, free_port  # noqa: E402
from fake_runtime import Behaviour, FakeJob, Jitter, serve_on_fake_clock  # noqa: E402

from apportion.experiment import policy_from_spec  # noqa: E402
from apportion.fidelity import read_served_run, replay_run  # noqa: E402
from apportion.fidelity.outputs import strict_json  # noqa: E402
from apportion.fidelity.measured import measure  # noqa: E402

# job kind -> script, its arguments, steps/s on one core of the busy 2-core development machine
# (sizes are chosen from it)
KINDS = {
    "cnn-bs32": ("examples/train_cnn.py", ["--batch-size", "32", "--images", "512"], 105.0),
    "cnn-bs128": ("examples/train_cnn.py", ["--batch-size", "128", "--images", "1024"], 30.0),
    "lm-bs16": ("examples/train_lm.py", ["--batch-size", "16", "--sequences", "256"], 20.0),
}
SIZES_S = (6.0, 16.0, 36.0)  # seconds of training: small, medium, large
SIZE_WEIGHTS = (0.45, 0.35, 0.2)
# --quick: a torch-free job (argv[1]: its steps; 0.02 s a step) of about a second
QUICK_KINDS = {"timed": ("benchmarks/jobs/timed_job.py", [], 50.0)}
QUICK_SIZES_S = (1.0,)


@dataclass(frozen=True)
class Planned:
    name: str
    kind: str
    steps: int
    seed: int
    arrival_s: float  # seconds after the first submission

    def spec(self) -> dict:
        if self.kind in QUICK_KINDS:
            command = ["python", QUICK_KINDS[self.kind][0], str(self.steps)]
        else:
            script, args, _ = KINDS[self.kind]
            command = ["python", script, "--seed", str(self.seed), *args, "--log-every", "100000"]
        return {"name": self.name, "kind": self.kind, "total_steps": self.steps, "gpu_types": ["cpu"],
                "command": command,
                "workdir": str(REPO), "env": {"PYTHONUNBUFFERED": "1"}, "user": "bench"}


def workload(jobs: int, seed: int, burst: int, mean_gap_s: float, kinds: dict = KINDS,
             sizes_s: tuple = SIZES_S, weights: tuple = SIZE_WEIGHTS) -> list[Planned]:
    """``burst`` jobs at once, the rest at seeded exponential gaps; kinds and sizes drawn at random."""
    rng = random.Random(seed)
    plans, at = [], 0.0
    for i in range(jobs):
        if i >= burst:
            at += rng.expovariate(1.0 / mean_gap_s)
        kind = rng.choice(sorted(kinds))
        size_s = rng.choices(sizes_s, weights)[0]
        steps = max(10, int(round(size_s * kinds[kind][2] / 10.0)) * 10)
        plans.append(Planned(f"{kind}-{i}", kind, steps, i % 5, round(at, 2)))
    return plans


def warm_up() -> None:
    """Run each example script for a few steps, so that the run's first attempts do not pay for
    reading torch from a cold disk cache while later ones find it warm."""
    for script, args, _ in KINDS.values():
        subprocess.run([sys.executable, script, *args, "--steps", "5", "--log-every", "100000"], cwd=REPO,
                       env=environment(), capture_output=True, check=True, timeout=600)


def run_real(plans: list[Planned], state_dir: Path, server_args: list[str], timeout_s: float) -> float:
    """Submit each job at its arrival time to a fresh server; wait until all have ended. Returns the wall time."""
    state_dir.parent.mkdir(parents=True, exist_ok=True)
    server = Server(state_dir, free_port(), server_args)
    server.start()
    try:
        began = time.time()
        todo = sorted(plans, key=lambda p: p.arrival_s)
        while time.time() - began < timeout_s:
            now = time.time() - began
            while todo and todo[0].arrival_s <= now:
                httpx.post(f"{server.url}/jobs", json=todo.pop(0).spec(), timeout=30).raise_for_status()
            if not todo:
                listed = server.jobs()
                if listed is not None and len(listed) == len(plans) and \
                        all(j["status"] in ("completed", "failed", "cancelled") for j in listed):
                    break
            time.sleep(0.05 if todo else 0.5)
        else:
            raise RuntimeError(f"the run in {state_dir} did not end within {timeout_s:g} s")
        return time.time() - began
    finally:
        server.stop()


def served_again(state_dir: Path, *, cost_jitter: bool = False, speed_jitter: bool = False, seed: int = 0,
                 tick_s: float = 0.05) -> dict:
    """The run's workload served again by the real scheduler on a fake clock, then replayed: the
    replay's errors (avg_jct_error, p90_job_error). Each fake attempt takes its kind's mean costs
    and trains at its job's measured speed; ``cost_jitter``: its costs drawn from those the run's
    attempts of its kind took instead; ``speed_jitter``: its speed times the ratio of a drawn
    attempt's speed to its job's. Without either, what is left is the simulator's own error."""
    run = read_served_run(state_dir)
    measured = measure(run.jobs, run.attempts)
    costs = measured.attempt_costs(10.0)
    first = min(j.submitted for j in run.jobs)
    done = [j for j in run.jobs if j.status == "completed"]
    jobs = [FakeJob(j.kind, j.total_steps, measured.job_speed(j.id, "cpu") or measured.kind_speed(j.kind, "cpu"),
                    j.submitted - first) for j in done]
    exits = ("stop_s", "finish_s")  # the fake server notices an exit a tick after it: that tick is measured too
    behaviour = {kind: Behaviour(start_s=costs.start_s[kind], restart_s=costs.restart_s[kind],
                                 lead_s=costs.stop_lead_s.get(kind, 1.0),
                                 stop_s=max(0.0, costs.stop_s.get(kind, tick_s) - tick_s),
                                 finish_s=max(0.0, costs.finish_s.get(kind, tick_s) - tick_s))
                 for kind in {j.kind for j in done}}
    samples = {name: {kind: [max(0.0, v - tick_s) if name in exits else v for v in spread.values]
                      for kind, spread in by_kind.items()} for name, by_kind in measured.costs.items()}
    jitter = Jitter(seed, samples if cost_jitter else {}, measured.speed_factors() if speed_jitter else (1.0,))
    settings = run.settings
    with tempfile.TemporaryDirectory(prefix="apportion-fidelity-again-") as tmp:
        serve_on_fake_clock(jobs, Path(tmp), policy_from_spec(settings.policy, **settings.policy_options),
                            slots=settings.describe_slots(), round_s=settings.round_s, behaviour=behaviour,
                            tick_s=tick_s, policy_options=settings.policy_options, until_s=24 * 3600.0, jitter=jitter)
        errors = replay_run(tmp).errors
    return {k: errors[k] for k in ("avg_jct_error", "p90_job_error")}


def jittered(state_dir: Path, seeds: int, **what) -> dict:
    """``served_again`` with jitter, averaged over ``seeds`` draws."""
    runs = [served_again(state_dir, seed=seed, **what) for seed in range(seeds)]
    return {k: round(sum(r[k] for r in runs) / len(runs), 4) for k in ("avg_jct_error", "p90_job_error")}


def figures(state_dir: Path, seeds: int = 3) -> dict:
    """The fidelity of one finished run: the replay's errors, what was measured, the control, the ablations."""
    full = replay_run(state_dir)
    line = {
        "policy": full.settings.policy,
        "jobs": len(full.rows),
        "avg_jct_error": round(full.errors["avg_jct_error"], 4),
        "p90_job_error": round(full.errors["p90_job_error"], 4),
        "round_s": full.settings.round_s,
        "slots": full.settings.describe_slots(),
        "real": {k: round(v, 2) for k, v in full.totals["real"].items()},
        "simulated": {k: round(v, 2) for k, v in full.totals["simulated"].items()},
        "costs": full.measured.describe(),
        "startup_window_s": full.measured.best_window_s(),
        "speed_spread": full.measured.speed_spread(),
        "control": {k: round(v, 4) for k, v in served_again(state_dir).items()},
        "cost_jitter": jittered(state_dir, seeds, cost_jitter=True),
        "speed_jitter": jittered(state_dir, seeds, speed_jitter=True),
        "ablations": {},
    }
    for name, options in (("kind_speeds", {"speeds": "kind"}), ("kind_costs", {"costs": "kind"}),
                          ("constant_costs", {"costs": "constant"}), ("plain_rounds", {"clock": "rounds"})):
        other = replay_run(state_dir, **options)
        line["ablations"][name] = {k: round(other.errors[k], 4) for k in ("avg_jct_error", "p90_job_error")}
    return line


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", default="las,max-min-fairness")
    parser.add_argument("--jobs", type=int, default=30)
    parser.add_argument("--burst", type=int, default=6, help="jobs submitted at once at the start")
    parser.add_argument("--mean-gap-s", type=float, default=6.0, help="mean gap between later arrivals")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slots", type=int, default=2, help="CPU slots (one core each)")
    parser.add_argument("--round-s", type=float, default=30.0)
    parser.add_argument("--las-thresholds", default="15,45", help="las: queue thresholds in GPU-seconds")
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="the most one run may take")
    parser.add_argument("--keep", help="keep each run's state directory under this directory")
    parser.add_argument("--replay", help="replay the runs kept under this directory instead of running anew")
    parser.add_argument("--quick", action="store_true",
                        help="3 torch-free jobs of about a second under las, rounds of 2 s, one draw of each jitter: "
                             "what the test suite runs")
    args = parser.parse_args(argv)
    if args.quick:
        args.policies, args.jobs, args.burst, args.round_s, args.las_thresholds = "las", 3, 2, 2.0, "1,3"
        args.mean_gap_s, args.timeout_s = 0.5, 120.0
    shape = (QUICK_KINDS, QUICK_SIZES_S, (1.0,)) if args.quick else (KINDS, SIZES_S, SIZE_WEIGHTS)

    lines = []
    with tempfile.TemporaryDirectory(prefix="apportion-fidelity-") as tmp:
        root = Path(args.replay or args.keep or tmp)
        for policy in args.policies.split(","):
            state_dir = root / policy
            wall_s = None
            if not args.replay:
                plans = workload(args.jobs, args.seed, args.burst, args.mean_gap_s, *shape)
                server_args = ["--slots", f"cpu:{args.slots}", "--policy", policy, "--round-s", f"{args.round_s:g}",
                               "--run-as", "server-user"]  # the jobs run as this account, root included
                if policy == "las":
                    server_args += ["--las-thresholds", args.las_thresholds]
                if not args.quick:
                    warm_up()
                wall_s = run_real(plans, state_dir, server_args, args.timeout_s)
            line = figures(state_dir, seeds=1 if args.quick else 3)
            if wall_s is not None:
                line["run_wall_s"] = round(wall_s, 1)
            print(strict_json(line), flush=True)
            lines.append(line)
    return lines


if __name__ == "__main__":
    main()
