"""What is systematic in a served run's start-up jitter: one JSON line per kept state directory.

Reads each finished ``apportion serve`` run (e.g. those ``benchmarks/accuracy/fidelity.py --keep DIR``
keeps) attempt by attempt and prints:

- ``window_s``: the window over which the other jobs' start-ups best predict an attempt's own
  (what the replay charges start-ups by, ``Measured.best_window_s``);
- ``startup_rms_s``: how far start-ups stray from their kind's mean (``kind``) and from their
  kind's median times the other jobs' slowness around them (``slowness``), at the real moments
  and, for first attempts, at the moments the replay puts them (``kind_first``,
  ``slowness_first``, ``slowness_first_simulated``);
- ``exit_rms_s``: the same for a completing attempt's last step to its exit;
- ``overlapping_startups``: the start-up over its kind's median (and over the slowness around it)
  of attempts whose start-up overlapped another's by more than half, and of the others: does
  starting at the same moment on the same machine cost more?
- ``handover_gaps_s``: how long after an attempt's exit its slot's successor started;
- ``speed_vs_slowness``: the correlation of an attempt's speed (over its job's) with the
  slowness while it trained;
- ``p90_under_noise``: the replay's p90 per-job error when every start-up's slowness ratio is
  multiplied by 1 + 2% Gaussian noise (eight seeded draws: min, median, max): how much a knife
  edge, tipped by a fraction of a second, moves it.

    python benchmarks/accuracy/fidelity_attempts.py runs/fidelity/las runs/fidelity/max-min-fairness
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from apportion.fidelity import read_served_run, replay_run  # noqa: E402
from apportion.fidelity.outputs import strict_json  # noqa: E402
from apportion.fidelity.measured import Measured, measure  # noqa: E402

NOISE, DRAWS = 0.02, 8


def rms(values) -> float:
    return round(float(np.sqrt(np.mean(np.square(values)))), 3) if len(values) else float("nan")


def analyse(state_dir: str) -> dict:
    run = read_served_run(state_dir)
    measured = measure(run.jobs, run.attempts)
    first = min(j.submitted for j in run.jobs)
    kind = {j.id: j.kind for j in run.jobs}
    slowness = measured.slowness({j.id: j.id for j in run.jobs})  # rows: job ids, each job's own left out

    def factor(t: float, job_id: int) -> float:
        return float(slowness.at(np.array([t]), np.array([job_id]))[0])

    def mean(cost: str, job_id: int) -> float:
        return measured.costs[cost][kind[job_id]].mean

    def median(cost: str, job_id: int) -> float:  # what the slowness scales
        return measured.costs[cost][kind[job_id]].median

    def cost_of(a) -> str:
        return "start_s" if a.attempt == 1 else "restart_s"

    # where the replay (each kind's mean costs) puts each job: its offsets from the real run
    rows = {r.job_id: r for r in replay_run(state_dir, costs="kind").rows}
    started = [a for a in run.attempts if a.first_lease is not None]
    startup = [(a.first_lease - a.started, mean(cost_of(a), a.job_id), median(cost_of(a), a.job_id),
                factor(a.started - first, a.job_id)) for a in started]
    firsts = [(a.first_lease - a.started, mean("start_s", a.job_id), median("start_s", a.job_id),
               factor(a.started - first, a.job_id),
               factor(a.started - first + rows[a.job_id].sim_queueing_s - rows[a.job_id].real_queueing_s,
                      a.job_id))
              for a in started if a.attempt == 1 and a.job_id in rows]
    completed = [a for a in run.attempts if a.how == "completed" and a.done is not None and a.job_id in rows]
    exits = [(a.ended - a.done, mean("finish_s", a.job_id), median("finish_s", a.job_id),
              factor(a.done - first, a.job_id),
              factor(a.done - first + rows[a.job_id].sim_jct_s - rows[a.job_id].real_jct_s, a.job_id))
             for a in completed]

    overlap, ratio, local = [], [], []
    for a, (seconds, _, kind_median, f) in zip(started, startup):
        others = sum(max(0.0, min(a.first_lease, b.first_lease or b.ended) - max(a.started, b.started))
                     for b in run.attempts if b is not a and b.ended is not None)
        overlap.append(others / seconds)
        ratio.append(seconds / kind_median)
        local.append(f)
    overlap, ratio, local = np.array(overlap), np.array(ratio), np.array(local)
    together = overlap > 0.5

    by_slot: dict[str, list[dict]] = {}
    for a in sorted(run.attempts, key=lambda a: a.started):
        by_slot.setdefault(a.slots, []).append(a)
    gaps = [b.started - a.ended for held in by_slot.values() for a, b in zip(held, held[1:])]

    speed_factor, slowness_then = [], []
    for s in measured.speeds:
        attempt = next(a for a in started if a.job_id == s.job_id
                       and abs(a.first_lease + s.seconds - (a.stop_told or a.done)) < 1e-6)
        moments = np.linspace(attempt.first_lease, attempt.first_lease + s.seconds, 20) - first
        slowness_then.append(float(slowness.at(moments, np.full(20, s.job_id)).mean()))
        speed_factor.append(s.steps_per_s / measured.job_speed(s.job_id, s.gpu_type))

    def share(mask) -> dict:
        return {"n": int(mask.sum()), "over_kind": round(float(ratio[mask].mean()), 3) if mask.any() else None,
                "over_slowness": round(float((ratio[mask] / local[mask]).mean()), 3) if mask.any() else None}

    x = np.array(startup)
    fx, ex = np.array(firsts), np.array(exits)
    return {
        "state_dir": state_dir, "policy": run.settings.policy, "window_s": slowness.window_s,
        "startup_rms_s": {"n": len(x), "kind": rms(x[:, 0] - x[:, 1]), "slowness": rms(x[:, 0] - x[:, 2] * x[:, 3]),
                          "kind_first": rms(fx[:, 0] - fx[:, 1]), "slowness_first": rms(fx[:, 0] - fx[:, 2] * fx[:, 3]),
                          "slowness_first_simulated": rms(fx[:, 0] - fx[:, 2] * fx[:, 4])},
        "exit_rms_s": {"n": len(ex), "kind": rms(ex[:, 0] - ex[:, 1]), "slowness": rms(ex[:, 0] - ex[:, 2] * ex[:, 3]),
                       "slowness_simulated": rms(ex[:, 0] - ex[:, 2] * ex[:, 4])},
        "overlapping_startups": {"overlapping": share(together), "others": share(~together)},
        "handover_gaps_s": {"n": len(gaps), "nonzero": [round(g, 3) for g in gaps if abs(g) > 1e-6]},
        "speed_vs_slowness": round(float(np.corrcoef(speed_factor, slowness_then)[0, 1]), 3)
        if len(speed_factor) > 2 else None,
    }


def p90_under_noise(state_dir: str) -> dict:
    """The replay's p90 per-job error with every start-up ratio scaled by 1 + NOISE × N(0, 1)."""
    rng = np.random.default_rng(0)
    exact = Measured.startup_ratios
    Measured.startup_ratios = lambda self: exact(self) * (1.0 + NOISE * rng.standard_normal(len(self.startups)))
    try:
        p90 = [replay_run(state_dir).errors["p90_job_error"] for _ in range(DRAWS)]
    finally:
        Measured.startup_ratios = exact
    return {"noise": NOISE, "draws": DRAWS, "min": round(min(p90), 4), "median": round(float(np.median(p90)), 4),
            "max": round(max(p90), 4)}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("state_dirs", nargs="+", help="finished serve runs' state directories")
    parser.add_argument("--quick", action="store_true",
                        help="two noisy replays instead of 8: what the test suite runs")
    args = parser.parse_args(argv)
    if args.quick:
        global DRAWS
        DRAWS = 2
    lines = []
    for state_dir in args.state_dirs:
        line = analyse(state_dir)
        line["p90_under_noise"] = p90_under_noise(state_dir)
        print(strict_json(line), flush=True)
        lines.append(line)
    return lines


if __name__ == "__main__":
    main()
