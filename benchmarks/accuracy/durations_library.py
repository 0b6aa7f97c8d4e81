"""Print whether a learned model beats apportion's grouped duration estimate on the Philly trace, as JSON.

Both predict each job's log GPU time (duration × GPUs) at the first 360 s round boundary after
its submission, from the jobs known to have finished by then; a job counts as finished at its
submission + duration (the trace's own timing, not a replay's). The model is scikit-learn's
HistGradientBoostingRegressor (absolute error), retrained every 5,000 submissions on the last
20,000 finished jobs, on the trace's features (queue as a category, log2 GPUs, hour of the day,
day of the week), once alone and once with the grouped estimate as one more feature.
scikit-learn is not an apportion dependency: the script says so and stops when it is missing.

    pip install scikit-learn && python benchmarks/accuracy/durations_library.py
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from apportion.core.durations import PRIOR_GPU_S, DurationPredictor  # noqa: E402

PHILLY = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "philly_pollux_jobs.csv.gz"
ROUND_S, RETRAIN_EVERY, TRAIN_ON = 360.0, 5000, 20000


def scores(predicted_log: np.ndarray, truth_log: np.ndarray) -> dict:
    from scipy.stats import spearmanr

    return {"median_abs_log_error": round(float(np.median(np.abs(predicted_log - truth_log))), 3),
            "rank_correlation": round(float(spearmanr(predicted_log, truth_log)[0]), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="the trace's first 6,000 jobs, retrained every 2,000, and the grouped estimate alone "
                             "where scikit-learn is not installed: what the test suite runs")
    args = parser.parse_args()
    global RETRAIN_EVERY
    try:
        from sklearn.ensemble import HistGradientBoostingRegressor
    except ImportError:
        if not args.quick:
            sys.exit("scikit-learn is not installed (pip install scikit-learn): nothing to compare")
        HistGradientBoostingRegressor = None
    if not PHILLY.exists():
        sys.exit(f"the Philly trace is not at {PHILLY}: nothing to measure")
    import csv
    import gzip

    with gzip.open(PHILLY, "rt") as text:
        rows = list(csv.DictReader(text))
    if args.quick:
        rows, RETRAIN_EVERY = rows[:6000], 2000
    submit = np.array([float(r["submit_time_s"]) for r in rows])
    duration = np.array([float(r["duration_s"]) for r in rows])
    gpus = np.array([int(r["num_gpus"]) for r in rows])
    queue = np.array([r["queue"] for r in rows], dtype=object)
    truth = np.log(duration * gpus)
    finish = submit + duration
    by_finish = np.argsort(finish, kind="stable")
    asked_at = np.ceil(submit / ROUND_S - 1e-9) * ROUND_S  # sorted: the trace is in submission order

    started = time.process_time()
    predictor = DurationPredictor()
    groups = predictor.groups(user=None, name=None, queue=queue, num_gpus=gpus, submit_time_s=submit)
    grouped, told = np.empty(len(rows)), 0
    for at in np.unique(asked_at):
        known = int(np.searchsorted(finish[by_finish], at, side="right"))
        if known > told:
            predictor.observe(groups[by_finish[told:known]], np.exp(truth[by_finish[told:known]]))
            told = known
        lo, hi = np.searchsorted(asked_at, at, side="left"), np.searchsorted(asked_at, at, side="right")
        grouped[lo:hi] = np.log(predictor.predict(groups[lo:hi]).gpu_s)
    grouped_s = time.process_time() - started

    features = np.column_stack([np.unique(queue, return_inverse=True)[1], np.log2(gpus), submit // 3600 % 24,
                                submit // 86400 % 7])
    results = {"grouped estimate": {**scores(grouped, truth), "cpu_s": round(grouped_s, 1)}}
    learned = (("gradient boosting", features), ("gradient boosting + grouped estimate",
                                                 np.column_stack([features, grouped])))
    if HistGradientBoostingRegressor is None:
        learned, results["gradient boosting"] = (), "not run: scikit-learn is not installed"
    for name, columns in learned:
        started = time.process_time()
        predicted = np.full(len(rows), np.log(PRIOR_GPU_S))  # before the first model: the prior
        model = None
        for first in range(0, len(rows), RETRAIN_EVERY):
            known = by_finish[: int(np.searchsorted(finish[by_finish], asked_at[first], side="right"))][-TRAIN_ON:]
            if len(known) > 500:
                model = HistGradientBoostingRegressor(loss="absolute_error", max_iter=60, categorical_features=[0],
                                                      random_state=0)
                model.fit(columns[known], truth[known])
            if model is not None:
                predicted[first:first + RETRAIN_EVERY] = model.predict(columns[first:first + RETRAIN_EVERY])
        results[name] = {**scores(predicted, truth), "cpu_s": round(time.process_time() - started, 1)}
    print(json.dumps({"jobs": len(rows), "features": "queue, GPUs, hour of the day, day of the week", **results}))


if __name__ == "__main__":
    main()
