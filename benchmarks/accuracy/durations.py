"""Print how well apportion predicts job durations on the Philly trace, and what they are worth, as JSON.

The predictor (apportion.core.durations) learns in the replay itself: each job's GPU time is
predicted when the job first appears to the scheduler (the round after it is submitted), from
the jobs that had finished by then, and compared with the GPU time it then took (GPU-seconds at
its fastest speed: the trace's duration × GPUs at v100 speed). The qssf replay's predictions
are the ones scored. Then the average JCT of fifo, las, qssf, srtf on predicted durations and
srtf on the true ones (the oracle), on the cluster the other Philly benchmarks use; the share
of the oracle's gain over fifo that qssf recovers is (fifo - qssf) / (fifo - srtf oracle).

The same predictions are replayed off line from the qssf replay's finish times (a job's first
prediction is at the first 360 s round boundary at or after its submission, from the jobs that
finished by then, exactly as in the replay), so that simpler estimates can be scored on the
same information: everyone's running median, and the ladder without shrinkage. And 100,000
synthetic jobs, each given one of 200 users and 2,000 job names at random (so that every level
of the predictor's ladder has groups), replayed under qssf on predicted durations, the same
policy on the true ones and las, time what predicting costs (CPU seconds): the predictions
alone against the whole replay (``prediction_share``), and the replays against each other
(``qssf_cpu_over_oracle``, ``qssf_cpu_over_las``; the policies decide differently, so this
also counts their own differences).

    python benchmarks/accuracy/durations.py                 # about 5 minutes of CPU
    python benchmarks/accuracy/durations.py --jobs 20000    # the trace's first 20,000 jobs only
    python benchmarks/accuracy/durations.py --timing-only   # the synthetic timing case alone (1 minute)

The whole trace on that cluster is extreme overload (fifo averages about 50 times the oracle's
JCT), where any order that lets short jobs by comes close to the oracle. ``--per-vc`` replays
Philly as Helios does instead: each virtual cluster alone on its nodes × 8 GPUs (Helios's
data/philly_vc.csv; ``--gpus-per-node 1`` squeezes it so that jobs queue), the jobs submitted in
Oct–Nov 2017, the predictor first told the VC's jobs of September that finished by Oct 1; fifo,
las, qssf (ranked by each group's recent jobs), qssf:lognormal (by the lognormal prediction, the
form before), qssf:median-left, srtf on the true durations, Helios's forms (fifo:head-of-line,
qssf:non-preemptive:head-of-line), and the hindsight bound: qssf ranked by each group's every job
of the two months (its true distribution, known in hindsight; no rank that knows only a job's
group can expect more, were the groups' jobs alike over time). A VC is loaded when fifo's average
JCT is at least twice the oracle's; each VC says whether qssf meets item 19's target (0.85 of the
oracle's gain over fifo, and no worse than las) and whether the hindsight bound would; each qssf's
share is also given over Helios's FIFO (strictly head of line, the baseline Helios's own QSSF figures
are measured from; ``of_gain_over_head_of_line_fifo``) where that ran.
``qssf (estimates)`` is qssf given each job's own estimate of its duration, as Helios's QSSF on
Philly is given one: drawn from its true duration with Helios's error buckets
(``helios_like_estimates``; seeded, ``--estimate-seed``), the predictor learning their bias and
spread from the jobs that finish (its September history told with estimates drawn alike);
``qssf (estimates, ratios)`` the same with qssf:estimate-ratios (an estimated job ranked by its
estimate × the index over the recent finished jobs' ratios actual ÷ estimate);
``qssf (estimates taken as true)`` believes each estimate exactly, learning nothing (what the estimates
alone say; not a bound); ``estimates_extra_jct_by_error`` says where qssf (estimates) loses to the
oracle: its extra JCT summed over the jobs whose estimate is over 2× too short, within 2×, and over
2× too long. ``--estimates-only`` runs just fifo, las, the oracle, qssf and those three.
``--helios PATH --helios-python PY`` runs Helios's own simulator on the same jobs beside
(benchmarks/compare/helios_philly.py; PY needs pandas):

    python benchmarks/accuracy/durations.py --per-vc [--gpus-per-node 1] [--vcs 11cb48,...] [--estimates-only] \
        [--helios /tmp/HeliosArtifact --helios-python /tmp/helios-venv/bin/python]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import gzip
import json
import math
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from apportion.core.duration_estimates import EstimateBias  # noqa: E402
from apportion.core.duration_samples import DurationSamples  # noqa: E402
from apportion.core.durations import LADDER, DurationPredictor  # noqa: E402
from apportion.experiment import WorkloadSettings, load_inputs, policy_from_spec  # noqa: E402
from apportion.sim import SimConfig  # noqa: E402
from apportion.sim.durations import HistoryFeed  # noqa: E402
from apportion.sim.simulator import Simulator  # noqa: E402

PHILLY = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "philly_pollux_jobs.csv.gz"
PHILLY_CLUSTER = "v100:160,p100:160,k80:160"  # as benchmarks/speed/simulate_speed.py --case philly
RUNS = (  # (label, policy, durations)
    ("fifo", "fifo", None),
    ("las", "las", None),
    ("qssf", "qssf", "predicted"),
    ("qssf (median left)", "qssf:median-left", "predicted"),
    ("srtf (predicted)", "srtf", "predicted"),
    ("srtf (oracle)", "srtf", "oracle"),
    ("qssf (oracle)", "qssf", "oracle"),
)


class Recorded:
    """A history feed that keeps the calls the simulator made, to time them again on their own."""

    def __init__(self, feed: HistoryFeed) -> None:
        self.feed, self.calls = feed, []

    def __getattr__(self, name):
        return getattr(self.feed, name)

    def finished(self, rows, finish_s):
        self.calls.append(("finished", rows.copy(), finish_s.copy()))
        self.feed.finished(rows, finish_s)

    def predict(self, rows):
        self.calls.append(("predict", rows.copy()))
        return self.feed.predict(rows)


class RecordingSimulator(Simulator):
    def _start(self):
        replay = super()._start()
        if self.history is not None:
            self.history = Recorded(self.history)
        return replay

    def prediction_cpu_s(self) -> float:
        """CPU seconds the replay's predictions take: a fresh feed, then every call the replay made."""
        return sum(self.prediction_cpu_by_call().values())

    def prediction_cpu_by_call(self) -> dict[str, float]:
        """CPU seconds of the replay's predictions by the feed's call: setting it up (each job's
        groups), ``finished`` (learning) and ``predict``, on a fresh feed given the replay's calls."""
        by_call = {"__init__": 0.0, "finished": 0.0, "predict": 0.0}
        started = time.process_time()
        feed = HistoryFeed(self.jobs, self.rates)
        by_call["__init__"] = time.process_time() - started
        for name, *arguments in self.history.calls:
            started = time.process_time()
            getattr(feed, name)(*arguments)
            by_call[name] += time.process_time() - started
        return by_call


def replay(inputs, spec: str, durations: str | None, config: SimConfig):
    """One replay; the simulator (its history feed holds the predictions) and the replay's CPU seconds."""
    options = {"restart_cost_s": config.restart_cost_s}
    if durations is not None:
        options["durations"] = durations
    simulator = RecordingSimulator(inputs.jobs, inputs.cluster, inputs.throughputs, policy_from_spec(spec, **options),
                                   config)
    started = time.process_time()
    result = simulator.run()
    return simulator, result, time.process_time() - started


def scores(predicted: np.ndarray, log_sd: np.ndarray, truth: np.ndarray) -> dict:
    """Median |log error|, Spearman rank correlation, and how often the truth is inside the
    predicted interquartile range (0.5 when the uncertainty is right)."""
    from scipy.stats import spearmanr

    scored = np.isfinite(predicted) & np.isfinite(truth) & (truth > 0)
    error = np.log(predicted[scored]) - np.log(truth[scored])
    return {
        "jobs": int(scored.sum()),
        "median_abs_log_error": round(float(np.median(np.abs(error))), 3),
        "rank_correlation": round(float(spearmanr(predicted[scored], truth[scored])[0]), 3),
        "within_predicted_iqr": round(float(np.mean(np.abs(error) <= 0.6745 * log_sd[scored])), 3),
    }


def offline(jobs, finish_s: np.ndarray, truth: np.ndarray, predictor: DurationPredictor,
            round_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Each job's prediction at the first round boundary at or after its submission, from the jobs
    with ``finish_s`` at or before it (what the replay's predictor knew then)."""
    groups = predictor.groups(user=jobs.user, name=jobs.name, queue=jobs.queue, num_gpus=jobs.num_gpus,
                              submit_time_s=jobs.submit_time_s)
    asked_at = np.ceil(jobs.submit_time_s / round_s - 1e-9) * round_s  # sorted, as the jobs are
    done = np.flatnonzero(np.isfinite(finish_s) & np.isfinite(truth))
    done = done[np.argsort(finish_s[done], kind="stable")]
    predicted, log_sd = np.full(len(jobs), np.nan), np.full(len(jobs), np.nan)
    told = 0
    for at in np.unique(asked_at):
        upto = int(np.searchsorted(finish_s[done], at, side="right"))
        if upto > told:
            predictor.observe(groups[done[told:upto]], truth[done[told:upto]])
            told = upto
        rows = np.arange(np.searchsorted(asked_at, at, side="left"), np.searchsorted(asked_at, at, side="right"))
        prediction = predictor.predict(groups[rows])
        predicted[rows], log_sd[rows] = prediction.gpu_s, prediction.log_sd
    return predicted, log_sd


# Philly one virtual cluster at a time, as Helios simulates it (HeliosArtifact's framework/QSSF Service:
# data/philly_vc.csv's nodes × 8 GPUs, jobs submitted 2017-10-01 00:00 … 2017-11-30 23:59)
HELIOS_VC_NODES = {"6214e9": 64, "7f04ca": 32, "11cb48": 16, "b436b2": 64, "ee9e8c": 64, "e13805": 16,
                   "6c71a0": 32, "2869ce": 16, "ed69ec": 8, "103959": 8, "0e4a51": 32}
TRACE_START = datetime.datetime(2017, 9, 4, 10, 30, 41)  # the shared trace's first submission (its README)
REPLAY_FROM = datetime.datetime(2017, 10, 1)
REPLAY_TO = datetime.datetime(2017, 11, 30, 23, 59)
HISTORY_FROM = datetime.datetime(2017, 9, 1)  # a month's history before: jobs finished by the replay's start
VC_RUNS = (  # (label, policy spec, durations)
    ("fifo", "fifo", None),
    ("fifo (Helios: head of line)", "fifo:head-of-line", None),
    ("las", "las", None),
    ("qssf", "qssf", "predicted"),
    ("qssf (lognormal)", "qssf:lognormal", "predicted"),
    ("qssf (median left)", "qssf:median-left", "predicted"),
    ("qssf (Helios: non-preemptive, head of line)", "qssf:non-preemptive:head-of-line", "predicted"),
    ("srtf (oracle)", "srtf", "oracle"),
    ("qssf (hindsight bound)", "qssf", "hindsight"),
    ("qssf (estimates)", "qssf", "estimates"),
    ("qssf (estimates, ratios)", "qssf:estimate-ratios", "estimates"),
    ("qssf (estimates taken as true)", "qssf", "estimates taken as true"),
)
ESTIMATES_ONLY = ("fifo", "las", "qssf", "srtf (oracle)", "qssf (estimates)", "qssf (estimates, ratios)",
                  "qssf (estimates taken as true)")
# the estimates' error bands (estimate ÷ truth) the extra JCT of qssf (estimates) over the oracle is summed in
ERROR_BANDS = ((0.0, 0.5, "over 2x too short"), (0.5, 2.0, "within 2x"), (2.0, math.inf, "over 2x too long"))
# Helios's error buckets for its Philly estimates (its estimators/philly_estimate.py, as described there):
# the share of jobs whose relative error |e| is within each bound; within a bucket e is drawn uniformly
ERROR_BOUNDS = np.array([0.0, 0.1, 0.5, 1.0, 10.0, 100.0])
ERROR_SHARES = np.array([0.0, 0.1, 0.5, 0.7, 0.9, 1.0])
HEAD_OF_LINE = "fifo (Helios: head of line)"  # Helios's FIFO, the baseline its own QSSF figures are measured from
LOADED = 2.0  # a VC is loaded when fifo's average JCT is at least this many times the oracle's
TARGET = 0.85  # item 19: qssf's share of the oracle's gain over fifo on every loaded VC, and never behind las


def vc_workloads(trace: Path, folder: Path, vcs: list[str]) -> dict[str, tuple[Path, dict]]:
    """Per VC, a trace file of its jobs submitted in the replay window (times from its start), and
    its history: the jobs submitted in the month before that finished by the replay's start
    (``gpus``, ``gpu_s`` in finish order)."""
    offset = (REPLAY_FROM - TRACE_START).total_seconds()
    last = (REPLAY_TO - TRACE_START).total_seconds()
    first = (HISTORY_FROM - TRACE_START).total_seconds()
    rows = {vc: [] for vc in vcs}
    history = {vc: [] for vc in vcs}
    with gzip.open(trace, "rt") as f:
        for row in csv.DictReader(f):
            vc = row["queue"]
            if vc not in rows:
                continue
            submit, duration, gpus = float(row["submit_time_s"]), float(row["duration_s"]), int(row["num_gpus"])
            if offset <= submit <= last:
                rows[vc].append((row["job_id"], submit - offset, row["duration_s"], gpus, vc))
            elif first <= submit < offset and submit + duration <= offset:
                history[vc].append((submit + duration, gpus, duration * gpus))
    out = {}
    for vc in vcs:
        path = folder / f"philly-{vc}.csv"
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["job_id", "submit_time_s", "duration_s", "num_gpus", "queue"])
            writer.writerows(rows[vc])
        done = sorted(history[vc])
        out[vc] = (path, {"gpus": np.array([h[1] for h in done], dtype=np.int64),
                          "gpu_s": np.array([h[2] for h in done])})
    return out


def helios_like_estimates(truth: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Estimates of ``truth`` (> 0) with Helios's error distribution: a relative error ``e`` drawn as its
    buckets say (10% of jobs within 10%, 50% within 50%, 70% within 100%, 90% within 1000%, all within
    10000%; uniform within a bucket), too long or too short at random. Too long is truth × (1 + e), too
    short truth ÷ (1 + e), so an estimate stays positive; Helios's own truth + truth × e (e signed) goes
    negative (or 0) for any e at or below -1, 15% of its draws (half of the 1000% and 10000% buckets)."""
    e = np.interp(rng.random(len(truth)), ERROR_SHARES, ERROR_BOUNDS)
    factor = 1.0 + e
    return np.where(rng.random(len(truth)) < 0.5, truth * factor, truth / factor)


def taught(vc: str, history: dict, estimates: np.random.Generator | None = None) -> DurationPredictor:
    """A predictor told about the VC's history, oldest finish first (its samples kept too); with
    ``estimates``, each history job with an estimate drawn by ``helios_like_estimates`` (and the
    ratios actual ÷ estimate kept as a sample too)."""
    predictor = DurationPredictor()
    predictor.keep_samples()
    if estimates is not None:  # their ratios actual ÷ estimate rank the estimated jobs (qssf's default)
        predictor.keep_estimate_ratios()
    n = len(history["gpus"])
    if n:
        groups = predictor.groups(user=None, name=None, queue=np.full(n, vc, dtype=object),
                                  num_gpus=history["gpus"], submit_time_s=np.zeros(n))
        predictor.observe(groups, history["gpu_s"],
                          None if estimates is None else helios_like_estimates(history["gpu_s"], estimates))
    return predictor


class TakenAsTrue(EstimateBias):
    """Each estimate believed exactly (no bias, the narrowest spread), learning nothing from the jobs that
    finish: what the estimates alone say, without the correction (not a bound: the index over a wider
    belief may do better or worse)."""

    def observe(self, gpu_s, estimated_gpu_s, users=None) -> None:
        pass

    def learnt(self) -> tuple[float, float]:
        return 0.0, self.min_log_sd


class Hindsight(DurationSamples):
    """Samples fixed before the replay, learning nothing from it: each group's every job of the VC,
    known in hindsight (no policy that knows only a job's group can know more)."""

    def observe(self, groups, gpu_s) -> None:
        pass


def hindsight(vc: str, history: dict, path: Path) -> DurationPredictor:
    """A predictor told about the VC's history whose samples are every replayed job of the VC, by
    group: the Gittins index over each group's true distribution of GPU time."""
    predictor = taught(vc, history)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    gpus = np.array([int(r["num_gpus"]) for r in rows], dtype=np.int64)
    gpu_s = np.array([float(r["duration_s"]) for r in rows]) * gpus
    groups = predictor.groups(user=None, name=None, queue=np.full(len(rows), vc, dtype=object), num_gpus=gpus,
                              submit_time_s=np.zeros(len(rows)))
    samples = Hindsight(window=max(len(rows), 1), least=1)
    DurationSamples.observe(samples, groups, gpu_s)
    predictor.samples = samples
    return predictor


def per_vc(trace: Path, vcs: list[str], config: SimConfig, gpus_per_node: int = 8, *, estimates_only: bool = False,
           estimate_seed: int = 0) -> dict:
    """Each VC replayed under fifo, las, qssf and srtf on the true durations, apportion's forms and
    Helios's, on the VC's own cluster (Helios's nodes × ``gpus_per_node``): average JCT, and the share of
    the oracle's gain over fifo (and over las, and over Helios's head-of-line fifo where it ran) that each
    qssf takes."""
    out = {}
    with tempfile.TemporaryDirectory() as folder:
        workloads = vc_workloads(trace, Path(folder), vcs)
        for vc in vcs:
            path, history = workloads[vc]
            size = HELIOS_VC_NODES[vc] * gpus_per_node
            inputs = load_inputs(WorkloadSettings(path=str(path), cluster=f"v100:{size}"))
            jct, cpu, each_jct, estimated_steps = {}, {}, {}, None
            for label, spec, durations in VC_RUNS:
                if estimates_only and label not in ESTIMATES_ONLY:
                    continue
                options = {"restart_cost_s": config.restart_cost_s}
                predictor, jobs = None, inputs.jobs
                if durations is not None and durations.startswith("estimates"):  # the replay's jobs and the history's, each with an estimate
                    rng = np.random.default_rng(estimate_seed)
                    as_true = durations == "estimates taken as true"
                    durations, predictor = "predicted", taught(vc, history, rng)
                    jobs = replace(jobs, estimated_steps=helios_like_estimates(jobs.total_steps, rng))
                    estimated_steps = jobs.estimated_steps
                    if as_true:
                        predictor.estimates = TakenAsTrue(min_log_sd=predictor.estimates.min_log_sd)
                elif durations == "hindsight":
                    durations, predictor = "predicted", hindsight(vc, history, path)
                elif durations == "predicted":
                    predictor = taught(vc, history)
                if durations is not None:
                    options["durations"] = durations
                simulator = Simulator(jobs, inputs.cluster, inputs.throughputs,
                                      policy_from_spec(spec, **options), config, predictor=predictor)
                started = time.process_time()
                result = simulator.run()
                jct[label] = round(result.summary["avg_jct_s"], 1)
                if label in ("srtf (oracle)", "qssf (estimates)"):
                    each_jct[label] = result.jct_s
                cpu[label] = round(time.process_time() - started, 1)
                print(f"{vc} ({size} GPUs), {label}: avg JCT {jct[label]:,.0f} s, {cpu[label]} s CPU", file=sys.stderr,
                      flush=True)
            fifo, las, oracle = jct["fifo"], jct["las"], jct["srtf (oracle)"]
            share = {label: {"of_gain_over_fifo": _share(fifo, jct[label], oracle),
                             "of_gain_over_las": _share(las, jct[label], oracle),
                             **({"of_gain_over_head_of_line_fifo": _share(jct[HEAD_OF_LINE], jct[label], oracle)}
                                if HEAD_OF_LINE in jct else {})}
                     for label in jct if label.startswith("qssf")}
            las_share = _share(fifo, las, oracle)
            out[vc] = {"gpus": size, "jobs": len(inputs.jobs), "history_jobs": len(history["gpus"]),
                       "fifo_over_oracle": round(fifo / oracle, 2), "loaded": bool(fifo >= LOADED * oracle),
                       "avg_jct_s": jct, "replay_cpu_s": cpu, "las_share_of_gain_over_fifo": las_share,
                       "qssf_share": share}
            if len(each_jct) == 2 and estimated_steps is not None:
                out[vc]["estimates_extra_jct_by_error"] = extra_by_error(
                    each_jct["qssf (estimates)"] - each_jct["srtf (oracle)"], estimated_steps / inputs.jobs.total_steps)
            for label, key in (("qssf", "qssf_meets_target"), ("qssf (hindsight bound)", "reachable_knowing_only_the_group"),
                               ("qssf (estimates)", "qssf_with_estimates_meets_target"),
                               ("qssf (estimates, ratios)", "qssf_with_estimates_by_ratios_meets_target"),
                               ("qssf (estimates taken as true)", "qssf_with_estimates_taken_as_true_meets_target")):
                if label in jct:
                    out[vc][key] = bool(share[label]["of_gain_over_fifo"] >= TARGET and jct[label] <= las)
            if "qssf (estimates)" in jct:
                print(f"{vc}: qssf (estimates) takes {share['qssf (estimates)']['of_gain_over_fifo']} of the oracle's "
                      f"gain over fifo (qssf {share['qssf']['of_gain_over_fifo']}); "
                      f"{'meets' if out[vc]['qssf_with_estimates_meets_target'] else 'misses'} the target; "
                      f"{'beats' if jct['qssf (estimates)'] < las else 'ties' if jct['qssf (estimates)'] == las else 'LOSES TO'}"
                      f" las; loaded: {out[vc]['loaded']}", file=sys.stderr, flush=True)
            if "qssf (estimates, ratios)" in jct:
                print(f"{vc}: qssf (estimates, ratios) takes {share['qssf (estimates, ratios)']['of_gain_over_fifo']}; "
                      f"{'meets' if out[vc]['qssf_with_estimates_by_ratios_meets_target'] else 'misses'} the target",
                      file=sys.stderr, flush=True)
            if "qssf (estimates taken as true)" in jct:
                print(f"{vc}: qssf (estimates taken as true) takes "
                      f"{share['qssf (estimates taken as true)']['of_gain_over_fifo']}", file=sys.stderr, flush=True)
            if "estimates_extra_jct_by_error" in out[vc]:
                print(f"{vc}: qssf (estimates) over the oracle, by estimate error: " + "; ".join(
                    f"{name} ({band['jobs']} jobs) {band['avg_jct_s']:+,.0f} s"
                    for name, band in out[vc]["estimates_extra_jct_by_error"].items()), file=sys.stderr, flush=True)
    return out


def extra_by_error(extra_jct_s: np.ndarray, estimate_over_truth: np.ndarray) -> dict:
    """Where qssf (estimates) loses to the oracle: its extra JCT per job (``extra_jct_s``, theirs less the
    oracle's) summed over the jobs in each of ``ERROR_BANDS`` of estimate ÷ truth, as seconds of the
    average JCT (the bands add up to the difference of the averages), and the jobs in each. A job
    that did not finish in one of the two replays (NaN) is left out of both."""
    finished = np.isfinite(extra_jct_s)
    n = max(int(finished.sum()), 1)
    return {name: {"jobs": int(band.sum()), "avg_jct_s": round(float(extra_jct_s[band].sum()) / n, 1)}
            for low, high, name in ERROR_BANDS
            for band in [finished & (estimate_over_truth >= low) & (estimate_over_truth < high)]}


def _share(baseline: float, policy: float, oracle: float) -> float:
    """(baseline - policy) / (baseline - oracle): 1 is the oracle's JCT, 0 the baseline's, < 0 worse."""
    return round((baseline - policy) / (baseline - oracle), 3) if baseline != oracle else math.nan


def timing_case(jobs: int, config: SimConfig) -> dict:
    """``jobs`` synthetic jobs with random users and names, replayed under qssf on predicted
    durations, on the true ones (the same policy with nothing to predict) and under las: the
    CPU of each replay, and of the predictions alone (the predicted replay's calls to its
    history feed, timed again on their own)."""
    inputs = load_inputs(WorkloadSettings(jobs=jobs, rate_per_hour=120.0, cluster=PHILLY_CLUSTER))
    rng = np.random.default_rng(0)
    users = np.array([f"user-{u}" for u in rng.integers(0, 200, jobs)], dtype=object)
    names = np.array([f"job-{k}" for k in rng.integers(0, 2000, jobs)], dtype=object)
    inputs = replace(inputs, jobs=replace(inputs.jobs, user=users, name=names))
    cpu, rounds, predicted = {}, {}, None
    for label, spec, durations in (("qssf", "qssf", "predicted"), ("qssf (lognormal)", "qssf:lognormal", "predicted"),
                                   ("qssf (oracle)", "qssf", "oracle"), ("las", "las", None)):
        simulator, result, cpu_s = replay(inputs, spec, durations, config)
        cpu[label], rounds[label] = round(cpu_s, 2), result.summary["decisions"]
        if label == "qssf":
            predicted = simulator
        print(f"timing, {label}: {cpu_s:.2f} s CPU, {rounds[label]} rounds", file=sys.stderr, flush=True)
    by_call = predicted.prediction_cpu_by_call()
    predicting_s = sum(by_call.values())
    return {
        "jobs": jobs, "users": 200, "names": 2000, "rounds": rounds, "replay_cpu_s": cpu,
        "prediction_cpu_s": round(predicting_s, 2),
        "prediction_cpu_s_by_call": {name: round(seconds, 2) for name, seconds in by_call.items()},
        "prediction_share": round(predicting_s / cpu["qssf"], 3),
        "qssf_cpu_over_oracle": round(cpu["qssf"] / cpu["qssf (oracle)"], 3),
        "qssf_cpu_over_lognormal": round(cpu["qssf"] / cpu["qssf (lognormal)"], 3),
        "qssf_cpu_over_las": round(cpu["qssf"] / cpu["las"], 3),
    }


def helios_figures(helios: str, python: str, trace: Path, vcs: list[str], gpus_per_node: int) -> dict:
    """Helios's own simulator on the same VCs and jobs (benchmarks/compare/helios_philly.py, run by
    ``python``, which needs pandas): per VC, its fifo, srtf and qssf average JCT."""
    command = [python, str(Path(__file__).resolve().parents[1] / "compare" / "helios_philly.py"), helios, "--trace", str(trace),
               "--policies", "fifo,srtf,qssf", "--vcs", ",".join(vcs)]
    if gpus_per_node != 8:
        command += ["--gpus-per-node", str(gpus_per_node)]
    done = subprocess.run(command, stdout=subprocess.PIPE, check=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def vc_main(args, config: SimConfig) -> None:
    """The per-VC case alone, with Helios's simulator's figures beside where asked."""
    vcs = args.vcs.split(",") if args.vcs else list(HELIOS_VC_NODES)
    unknown = sorted(set(vcs) - set(HELIOS_VC_NODES))
    if unknown:
        sys.exit(f"--vcs: '{unknown[0]}' is not one of Helios's Philly VCs ({', '.join(HELIOS_VC_NODES)})")
    out = {"trace": str(args.trace), "gpus_per_node": args.gpus_per_node,
           "loaded": f"fifo's average JCT >= {LOADED:g} x the oracle's (srtf on true durations)",
           "target": f"qssf >= {TARGET:g} of the oracle's gain over fifo, and an average JCT no worse than las's",
           "window": f"submitted {REPLAY_FROM} .. {REPLAY_TO}, history from {HISTORY_FROM}",
           "estimates": f"qssf (estimates): each job's estimate drawn with Helios's error buckets, seed {args.estimate_seed}",
           "per_vc": per_vc(args.trace, vcs, config, args.gpus_per_node, estimates_only=args.estimates_only,
                            estimate_seed=args.estimate_seed)}
    if args.helios:
        helios = helios_figures(args.helios, args.helios_python, args.trace, vcs, args.gpus_per_node)
        for vc, figures in helios.items():
            jct = figures["avg_jct_s"]
            figures["qssf_share_of_gain_over_fifo"] = _share(jct["fifo"], jct["qssf"], jct["srtf"])
        out["helios"] = helios
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, default=PHILLY, help="the Philly trace (philly_pollux_jobs.csv.gz)")
    parser.add_argument("--jobs", type=int, default=None, help="the trace's first N jobs only")
    parser.add_argument("--timing-jobs", type=int, default=100_000, help="synthetic jobs for the timing case (0: skip)")
    parser.add_argument("--timing-only", action="store_true", help="the timing case alone (no trace needed)")
    parser.add_argument("--per-vc", action="store_true", help="Philly one virtual cluster at a time, as Helios does")
    parser.add_argument("--vcs", default=None, help="--per-vc: only these VCs (comma separated)")
    parser.add_argument("--gpus-per-node", type=int, default=8,
                        help="--per-vc: each VC's GPUs are Helios's nodes × this (8: Helios's; 1: squeezed, loaded)")
    parser.add_argument("--estimates-only", action="store_true",
                        help="--per-vc: only fifo, las, the oracle, qssf and qssf given Helios-like estimates "
                             "(by its corrected lognormal, and by the estimates' ratios)")
    parser.add_argument("--estimate-seed", type=int, default=0, help="--per-vc: the seed the estimates are drawn with")
    parser.add_argument("--helios", default=None, help="--per-vc: a HeliosArtifact checkout, to run its simulator beside")
    parser.add_argument("--helios-python", default="python3", help="a Python with pandas, for --helios")
    parser.add_argument("--quick", action="store_true",
                        help="the trace's first 300 jobs and 1,000 synthetic ones: what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.timing_jobs = 300, 1000
    config = SimConfig()
    if args.timing_only:
        print(json.dumps({"timing": timing_case(args.timing_jobs, config)}))
        return
    if not args.trace.exists():
        sys.exit(f"the Philly trace is not at {args.trace}: nothing to measure (it is in ../shared/traces/; --trace)")
    if args.per_vc:
        vc_main(args, config)
        return
    inputs = load_inputs(WorkloadSettings(path=str(args.trace), cluster=PHILLY_CLUSTER, jobs=args.jobs))

    avg_jct, cpu, qssf_sim, qssf_result = {}, {}, None, None
    for label, spec, durations in RUNS:
        simulator, result, cpu_s = replay(inputs, spec, durations, config)
        avg_jct[label] = round(result.summary["avg_jct_s"], 1)
        cpu[label] = round(cpu_s, 1)
        if label == "qssf":
            qssf_sim, qssf_result = simulator, result
        print(f"{label}: avg JCT {avg_jct[label]:,.0f} s, {cpu_s:.1f} s CPU", file=sys.stderr, flush=True)

    history = qssf_sim.history
    truth = history.gpu_s
    in_replay = scores(history.first_gpu_s, history.first_log_sd, truth)
    finish = qssf_result.finish_s
    alternatives = {}
    for name, predictor in (("ladder (as in the replay)", DurationPredictor()),
                            ("everyone's running median", DurationPredictor(((),))),
                            ("ladder, no shrinkage", DurationPredictor(LADDER, shrinkage=1e-9)),
                            ("ladder, 200 most recent per group", DurationPredictor(recent=200))):
        alternatives[name] = scores(*offline(inputs.jobs, finish, truth, predictor, config.round_s), truth)

    fifo, oracle, qssf = avg_jct["fifo"], avg_jct["srtf (oracle)"], avg_jct["qssf"]
    las = avg_jct["las"]
    print(json.dumps({
        "workload": f"{inputs.workload_name} ({len(inputs.jobs)} jobs)",
        "cluster": inputs.cluster.describe(),
        "features": "queue (virtual cluster) and GPUs: the trace has no user or job name",
        **{k: in_replay[k] for k in ("median_abs_log_error", "rank_correlation", "within_predicted_iqr")},
        "predicted_jobs": in_replay["jobs"],
        "avg_jct_s": avg_jct,
        "fifo_over_oracle": round(fifo / oracle, 1),  # how loaded: at 50x, any order beats fifo by far
        "share_of_oracle_gain": round((fifo - qssf) / (fifo - oracle), 3) if fifo != oracle else math.nan,
        "share_of_oracle_gain_over_las": round((las - qssf) / (las - oracle), 3) if las != oracle else math.nan,
        "replay_cpu_s": cpu,
        "qssf_prediction_cpu_s": round(qssf_sim.prediction_cpu_s(), 2),
        "predictors_off_line": alternatives,
        "timing": timing_case(args.timing_jobs, config) if args.timing_jobs else None,
    }))


if __name__ == "__main__":
    main()
