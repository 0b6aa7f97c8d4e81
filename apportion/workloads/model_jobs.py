"""Jobs that name a model and a layout instead of a job kind: their speeds from the perf model.

A trace row may leave ``kind`` empty and say what it trains instead: ``model`` (a preset of
``apportion.perf``, e.g. ``gpt3-1.3b``), ``global_batch`` (sequences per iteration) and
``layout`` (``tp=2 pp=1 mb=4 recompute=selective zero=1``; empty or ``auto``: the fastest
layout that fits, planned for each GPU type and count). Each distinct (model, batch, layout)
becomes a job kind of its own, named ``gpt3-1.3b gb=64 tp=2 pp=1 mb=4``, whose steps/s on every
GPU type at every GPU count is one iteration of that layout as ``apportion.perf.predict`` times
it (NaN where the layout does not divide the GPUs or does not fit in the GPU's memory). The
simulator then schedules it like any other kind.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from apportion.core.errors import InputError
from apportion.core.throughputs import ThroughputTable

MODEL_COLUMNS = ("model", "layout", "global_batch")
# layout keys a trace cell may give, and the Layout field each sets
LAYOUT_KEYS = {"tp": "tp", "pp": "pp", "mb": "micro_batch", "recompute": "recompute", "sp": "sequence_parallel",
               "zero": "zero", "schedule": "schedule", "v": "virtual_stages", "ep": "ep", "precision": "precision",
               "stages": "stage_layers", "capacity": "capacity_factor"}


@dataclass(frozen=True)
class ModelJob:
    """What a model row trains: a preset, a global batch and a layout (None: planned per GPU)."""

    model: str
    global_batch: int
    layout: tuple[tuple[str, str], ...] | None  # (key, value) in LAYOUT_KEYS order

    @property
    def kind(self) -> str:
        layout = "auto" if self.layout is None else " ".join(f"{k}={v}" for k, v in self.layout)
        return f"{self.model} gb={self.global_batch} {layout}"


def parse_layout(text: str) -> tuple[tuple[str, str], ...] | None:
    """``'tp=2 pp=1 mb=4'`` -> ((tp, 2), (pp, 1), (mb, 4)); ``''`` or ``'auto'`` -> None.
    ValueError naming the bad item."""
    text = text.strip()
    if text in ("", "auto"):
        return None
    given: dict[str, str] = {}
    for item in text.replace(";", " ").split():
        key, sep, value = item.partition("=")
        if key == "sp" and not sep:
            value = "true"
        elif not sep or not value:
            raise ValueError(f"layout item '{item}' is not key=value (keys: {', '.join(LAYOUT_KEYS)})")
        if key not in LAYOUT_KEYS:
            raise ValueError(f"unknown layout key '{key}' (known: {', '.join(LAYOUT_KEYS)})")
        given[key] = value
    return tuple((k, given[k]) for k in LAYOUT_KEYS if k in given)


def _layout_fields(layout: tuple[tuple[str, str], ...]) -> dict:
    from apportion.perf.parallel import parse_stage_layers

    fields: dict = {}
    for key, value in layout:
        name = LAYOUT_KEYS[key]
        if key in ("tp", "pp", "mb", "zero", "v", "ep"):
            fields[name] = int(value)
        elif key == "sp":
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(f"sp must be true or false, got '{value}'")
            fields[name] = value.lower() in ("true", "1", "yes")
        elif key == "stages":
            fields[name] = parse_stage_layers(value)
        elif key == "capacity":
            fields[name] = float(value)
        else:
            fields[name] = value
    return fields


def check_model_job(job: ModelJob, gpus: int | None = None) -> None:
    """ValueError when the preset is unknown or the layout cannot be used: a key it cannot read, a
    size (tp, pp, mb, v, ep) that is not a positive whole number, and, given the job's ``gpus``,
    tp × pp that does not divide them or anything else ``perf.parallel.layout_problems`` finds at
    that count (heads or layers the sizes do not divide, a global batch that mb × dp does not)."""
    from apportion.perf.parallel import layout_problems, size_problems
    from apportion.perf.transformer import get_preset

    model = get_preset(job.model)
    if job.layout is None:
        return
    try:
        layout = _layout(job, gpus, "bf16")
    except ValueError as err:
        raise ValueError(f"layout: {err}") from None
    problems = size_problems(replace(layout, dp=1))  # dp is what tp × pp leave of the GPUs: below
    if not problems and gpus is not None:
        if gpus % (layout.tp * layout.pp):
            problems = [f"tp × pp = {layout.tp * layout.pp} does not divide the job's {gpus} GPU(s)"]
        else:
            problems = layout_problems(model, layout)
    if problems:
        raise ValueError(f"layout: {problems[0]}")


def _layout(job: ModelJob, gpus: int | None, precision: str):
    """The perf Layout ``job`` names on ``gpus`` GPUs (data parallel over what tp × pp leave, 0 where
    they do not divide them; 1 when ``gpus`` is None), at ``precision`` unless it names one."""
    from apportion.perf.parallel import Layout

    fields = _layout_fields(job.layout)
    tp, pp = fields.pop("tp", 1), fields.pop("pp", 1)
    fields.setdefault("precision", precision)
    fields.setdefault("schedule", ("interleaved" if fields.get("virtual_stages", 1) > 1 else "1f1b") if pp > 1
                      else "none")
    if gpus is None:
        dp = 1
    else:
        dp = gpus // (tp * pp) if tp >= 1 and pp >= 1 and gpus % (tp * pp) == 0 else 0
    return Layout(tp=tp, pp=pp, dp=dp, global_batch=job.global_batch, **fields)


@lru_cache(maxsize=4096)
def steps_per_s(job: ModelJob, gpu_type: str, gpus: int) -> float:
    """One iteration's rate of ``job`` on ``gpus`` GPUs of ``gpu_type``; NaN where it cannot run."""
    from apportion.perf import get_accelerator, plan, predict
    from apportion.perf.parallel import layout_problems
    from apportion.perf.planner import default_precision
    from apportion.perf.transformer import get_preset

    try:
        acc = get_accelerator(gpu_type)
    except ValueError:
        return float("nan")  # a GPU type the perf model does not know
    model = get_preset(job.model)
    if job.layout is None:
        best = plan(model, gpus, acc, job.global_batch, top=1, keep_rejected=False).best
        return 1.0 / best[0].step_time_s if best else float("nan")
    layout = _layout(job, gpus, default_precision(acc))
    if layout.precision == "fp8" and "fp8" not in acc.peak_flops:
        return float("nan")
    if layout_problems(model, layout):  # dp 0 among them: tp × pp does not divide the GPUs
        return float("nan")
    one = predict(model, layout, acc)
    return 1.0 / one.step_time_s if one.fits else float("nan")


def with_model_kinds(throughputs: ThroughputTable, jobs: dict[ModelJob, set[int]]) -> ThroughputTable:
    """``throughputs`` and a kind for each model job, at every scale of the table and every GPU
    count a job asks for (the table's own kinds estimated at the new counts as ``at_scales`` does)."""
    if not jobs:
        return throughputs
    counts = sorted(set(throughputs.scales).union(*jobs.values()))
    base = throughputs.at_scales(np.asarray(counts))
    kinds = tuple(job.kind for job in jobs)
    rates = np.array([[[steps_per_s(job, gpu, n) for n in counts] for gpu in base.gpu_types] for job in jobs])
    sources = {job.kind: f"predicted by apportion.perf: {job.kind} (one iteration = one step)" for job in jobs}
    return base.merged_with(ThroughputTable(kinds, base.gpu_types, tuple(counts), rates, {}, sources))


def model_jobs_of_columns(columns: dict[str, np.ndarray], lines: np.ndarray, source: str) -> dict[ModelJob, set[int]]:
    """The model jobs of a trace's columns with the GPU counts each is asked at; InputError naming
    the line and field of a bad model, batch or layout, or of a row with both a kind and a model."""
    if "model" not in columns:
        return {}
    n = len(lines)
    model = columns["model"]
    batch = columns.get("global_batch", np.full(n, "", dtype=object))
    layout = columns.get("layout", np.full(n, "", dtype=object))
    kind = columns.get("kind", np.full(n, "", dtype=object))
    jobs: dict[ModelJob, set[int]] = {}
    checked: set[ModelJob] = set()
    for row in np.flatnonzero(model != "").tolist():
        line = int(lines[row])
        if kind[row] != "":
            raise InputError(source, "a row names either a job kind or a model, not both", line=line, field="model")
        check_model_name(model[row], source, line)
        try:
            global_batch = int(batch[row])
            if global_batch < 1:
                raise ValueError
        except ValueError:
            raise InputError(source, f"a model row needs a positive whole global batch, got '{batch[row]}'",
                             line=line, field="global_batch") from None
        try:
            job = ModelJob(model[row].strip(), global_batch, parse_layout(layout[row]))
        except ValueError as err:
            raise InputError(source, str(err), line=line, field="layout") from None
        if job not in checked:
            try:
                check_model_job(job)
            except ValueError as err:
                field = "layout" if str(err).startswith("layout:") else "model"
                raise InputError(source, str(err).removeprefix("layout: "), line=line, field=field) from None
            checked.add(job)
        try:
            gpus = int(float(columns["num_gpus"][row]))
        except ValueError:
            gpus = 1  # the row's own check reports it
        jobs.setdefault(job, set()).add(max(1, gpus))
    return jobs


def check_model_name(name: str, source: str, line: int) -> None:
    """InputError naming the line and the ``model`` field when ``name`` is not a preset of the perf
    model, before anything else about the row (its batch, its layout) is asked."""
    from apportion.perf.transformer import get_preset

    try:
        get_preset(name.strip())
    except ValueError as err:
        raise InputError(source, str(err), line=line, field="model") from None


def model_job_of_kind(kind: str) -> ModelJob | None:
    """The model job a kind name made by ``ModelJob.kind`` stands for (``gpt3-1.3b gb=64 tp=2``);
    None for any other name, or one whose preset or layout the perf model does not know."""
    parts = kind.split(" ", 2)
    if len(parts) < 3 or not parts[1].startswith("gb=") or not parts[1][3:].isdigit():
        return None
    try:
        job = ModelJob(parts[0], int(parts[1][3:]), parse_layout(parts[2]))
        check_model_job(job)
    except (ValueError, KeyError):
        return None
    return job if job.kind == kind and job.global_batch > 0 else None


def model_kind_names(columns: dict[str, np.ndarray]) -> np.ndarray:
    """Each row's model kind name ('' where the row names no model); rows already checked."""
    n = len(next(iter(columns.values())))
    out = np.full(n, "", dtype=object)
    if "model" not in columns:
        return out
    batch = columns.get("global_batch", np.full(n, "", dtype=object))
    layout = columns.get("layout", np.full(n, "", dtype=object))
    for row in np.flatnonzero(columns["model"] != "").tolist():
        out[row] = ModelJob(columns["model"][row].strip(), int(batch[row]), parse_layout(layout[row])).kind
    return out
