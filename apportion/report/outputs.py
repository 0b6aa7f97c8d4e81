"""Write a replay's results to disk: summary JSON, per-job and timeline CSVs, PNG plots and report.html.

Cells are formatted column by column from numpy arrays and joined into lines in bulk (no
per-job lookups into the result), so a million-job result takes seconds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np

from apportion.report.html import REPORT_HTML, write_report
from apportion.report.plots import comparison_figure, run_figure
from apportion.sim.result import JobStatus, SimResult

SUMMARY_FILE = "summary.json"
JOBS_FILE = "jobs.csv"
TIMELINE_FILE = "timeline.csv"
REPORT_FILE = "report.png"
COMPARISON_JSON = "comparison.json"
COMPARISON_PNG = "comparison.png"

JOB_COLUMNS = (
    "job_id", "kind", "num_gpus", "submit_s", "start_s", "finish_s", "jct_s", "queueing_s",
    "gpu_types", "preemptions", "moves", "steps_done", "total_steps", "status", "deadline_s",
    "unschedulable_reason",
)
PRIVACY_JOB_COLUMNS = ("privacy_claim", "privacy_delay_s")  # after JOB_COLUMNS when the jobs claimed privacy budget
RENTED_JOB_COLUMNS = ("dollars", "out_of_budget")  # after JOB_COLUMNS when the jobs rented their instances
STALL_JOB_COLUMNS = ("data_stall",)  # last, when the jobs' speeds depended on their CPU cores
COMPARISON_JOB_COLUMNS = ("policy", *JOB_COLUMNS)  # every policy's rows of jobs.csv, one after another
TIMELINE_COLUMNS = ("time_s", "busy_gpus", "utilization", "running_jobs", "queued_jobs")
_NEEDS_QUOTES = ',"\r\n'
_CHUNK_ROWS = 100_000
_STATUS_BY_VALUE = {s.value: s.name.lower() for s in JobStatus}
_STATUS_NAMES = np.array([_STATUS_BY_VALUE.get(v, str(v)) for v in range(max(JobStatus) + 1)], dtype=object)


def write_run(result: SimResult, out_dir: Path) -> list[Path]:
    """Write summary.json, jobs.csv, timeline.csv, report.png and report.html for one replay into ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [
        _write_json(out_dir / SUMMARY_FILE, result.summary),
        _write_csv(out_dir / JOBS_FILE, job_header([result]), job_columns(result)),
        _write_csv(out_dir / TIMELINE_FILE, TIMELINE_COLUMNS, timeline_columns(result)),
    ]
    paths.append(_save(run_figure(result), out_dir / REPORT_FILE))
    paths.append(write_report([result], out_dir / REPORT_HTML))
    return paths


def write_comparison(results: Sequence[SimResult], out_dir: Path) -> list[Path]:
    """Write comparison.json (summaries in the order given), jobs.csv (every policy's jobs, a policy
    column first), comparison.png and report.html for several replays."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    document = {"policies": [r.summary for r in results]}
    return [
        _write_json(out_dir / COMPARISON_JSON, document),
        _write_csv(out_dir / JOBS_FILE, ("policy", *job_header(results)), comparison_job_columns(results)),
        _save(comparison_figure(list(results)), out_dir / COMPARISON_PNG),
        write_report(list(results), out_dir / REPORT_HTML),
    ]


def job_header(results: Sequence[SimResult]) -> tuple[str, ...]:
    """jobs.csv's columns: JOB_COLUMNS, then the privacy claims', the data stall's and what each job spent
    renting its instances, each when every replay has them."""
    privacy, stall, rented = _extras(results)
    return (*JOB_COLUMNS, *(PRIVACY_JOB_COLUMNS if privacy else ()), *(STALL_JOB_COLUMNS if stall else ()),
            *(RENTED_JOB_COLUMNS if rented else ()))


def _extras(results: Sequence[SimResult]) -> tuple[bool, bool, bool]:
    """Whether every replay has privacy claims, whether every one has data stalls, and whether every one rented."""
    return (bool(results) and all(r.privacy is not None for r in results),
            bool(results) and all(r.data_stall is not None for r in results),
            bool(results) and all(r.rented is not None for r in results))


def job_values(result: SimResult, privacy: bool | None = None, stall: bool | None = None,
               rented: bool | None = None) -> dict[str, np.ndarray]:
    """jobs.csv's columns, in ``job_header`` order, as arrays of values (NaN where a time is unknown):
    what ``job_columns`` writes and what a notebook's DataFrame holds (``privacy``, ``stall``, ``rented``:
    with the claims' columns, the data stall's, the dollars'; None: when the replay has them)."""
    jobs = result.jobs
    start = result.first_start_s
    values = {
        "job_id": np.asarray(jobs.job_id),
        "kind": np.asarray(jobs.kinds, dtype=object)[jobs.kind],
        "num_gpus": np.asarray(jobs.num_gpus),
        "submit_s": jobs.submit_time_s,
        "start_s": start,
        "finish_s": result.finish_s,
        "jct_s": result.jct_s,
        "queueing_s": start - jobs.submit_time_s,
        "gpu_types": gpu_type_labels(result.time_on_type, result.cluster.gpu_types),
        "preemptions": np.asarray(result.preemptions),
        "moves": np.asarray(result.moves),
        "steps_done": result.steps_done,
        "total_steps": jobs.total_steps,
        "status": _STATUS_NAMES[result.status],
        "deadline_s": np.full(len(jobs), np.nan) if jobs.deadline_s is None else jobs.deadline_s,
        "unschedulable_reason": np.asarray(result.reasons, dtype=object),
    }
    if result.privacy is not None if privacy is None else privacy:
        values["privacy_claim"] = np.asarray(result.privacy.words, dtype=object)
        values["privacy_delay_s"] = result.privacy.delay_s
    if result.data_stall is not None if stall is None else stall:
        values["data_stall"] = result.data_stall
    if result.rented is not None if rented is None else rented:
        values["dollars"] = result.rented.spent_usd
        values["out_of_budget"] = np.asarray(result.rented.out_of_budget, dtype=bool)
    return values


def job_columns(result: SimResult, privacy: bool | None = None, stall: bool | None = None,
                rented: bool | None = None) -> list[list[str]]:
    """The jobs.csv columns, in ``job_header`` order, as lists of cell text (arguments as for ``job_values``)."""
    return [_JOB_CELLS.get(name, _decimals)(values)
            for name, values in job_values(result, privacy, stall, rented).items()]


def comparison_job_columns(results: Sequence[SimResult]) -> list[list[str]]:
    """The comparison's jobs.csv columns, in COMPARISON_JOB_COLUMNS order: each policy's jobs in turn."""
    width = len(job_header(results))
    privacy, stall, rented = _extras(results)
    each = [job_columns(r, privacy=privacy, stall=stall, rented=rented) for r in results]
    policy = [cell for r in results for cell in _text(np.full(len(r.jobs), r.policy, dtype=object))]
    return [policy] + [[cell for columns in each for cell in columns[c]] for c in range(width)]


def timeline_values(result: SimResult) -> dict[str, np.ndarray]:
    """timeline.csv's columns, in TIMELINE_COLUMNS order, as arrays of values."""
    timeline = result.timeline
    return {
        "time_s": timeline[:, 0],
        "busy_gpus": timeline[:, 1].astype(np.int64),
        "utilization": timeline[:, 1] / max(result.cluster.num_gpus, 1),
        "running_jobs": timeline[:, 2].astype(np.int64),
        "queued_jobs": timeline[:, 3].astype(np.int64),
    }


def timeline_columns(result: SimResult) -> list[list[str]]:
    """The timeline.csv columns, in TIMELINE_COLUMNS order, as lists of cell text."""
    values = timeline_values(result)
    return [
        _decimals(values["time_s"]),
        _integers(values["busy_gpus"]),
        _decimals(values["utilization"], 6),
        _integers(values["running_jobs"]),
        _integers(values["queued_jobs"]),
    ]


def gpu_type_labels(time_on_type: np.ndarray, gpu_types: Sequence[str]) -> np.ndarray:
    """Per job, the GPU types it held, '+'-joined in cluster order ('' if none); one join per distinct set."""
    used = np.asarray(time_on_type) > 0
    names = np.asarray(gpu_types, dtype=object)
    if used.shape[1] > 62:  # too many types for a bit mask: one join per job
        return np.array(["+".join(names[row]) for row in used], dtype=object)
    bits = np.arange(used.shape[1], dtype=np.int64)
    distinct, inverse = np.unique(used.astype(np.int64) @ (1 << bits), return_inverse=True)
    labels = np.array(["+".join(names[(code >> bits) & 1 == 1]) for code in distinct], dtype=object)
    return labels[inverse.reshape(-1)]


def _decimals(values: np.ndarray, places: int = 3) -> list[str]:
    """Floats rounded to ``places`` and written by repr (so '3600.0', '12.345'); '' where NaN."""
    values = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(values)
    if finite.all():
        return list(map(repr, np.round(values, places).tolist()))
    cells = np.full(len(values), "", dtype=object)
    cells[finite] = list(map(repr, np.round(values[finite], places).tolist()))
    return cells.tolist()


def _integers(values: np.ndarray) -> list[str]:
    return list(map(str, np.asarray(values).astype(np.int64).tolist()))


def _text(values: np.ndarray) -> list[str]:
    """Cells as text, quoted as the csv module would only in a column that needs it (most never do)."""
    cells = list(map(str, np.asarray(values, dtype=object).tolist()))
    joined = "".join(cells)
    if any(c in joined for c in _NEEDS_QUOTES):
        cells = [_quote(c) for c in cells]
    return cells


def _quote(cell: str) -> str:
    return '"' + cell.replace('"', '""') + '"' if any(c in cell for c in _NEEDS_QUOTES) else cell


def _write_csv(path: Path, header: Sequence[str], columns: list[list[str]]) -> Path:
    """Join pre-formatted cells into lines, a chunk of rows at a time (far faster than csv.writer on floats)."""
    rows = len(columns[0]) if columns else 0
    with path.open("w", newline="", encoding="utf-8") as f:
        f.write(",".join(header) + "\n")
        for lo in range(0, rows, _CHUNK_ROWS):
            chunk = [column[lo:lo + _CHUNK_ROWS] for column in columns]
            f.write("\n".join(map(",".join, zip(*chunk))) + "\n")
    return path


def _write_json(path: Path, document: dict) -> Path:
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return path


def _save(figure, path: Path) -> Path:
    figure.savefig(path, dpi=figure.dpi)
    return path


def _yes(values: np.ndarray) -> list[str]:
    return _text(np.where(values, "yes", "").astype(object))


# how jobs.csv writes each column of job_values (the rest: decimals, 3 places)
_JOB_CELLS = {
    "job_id": _text, "kind": _text, "num_gpus": _integers, "gpu_types": _text, "preemptions": _integers,
    "moves": _integers, "status": np.ndarray.tolist, "unschedulable_reason": _text, "privacy_claim": _text,
    "data_stall": lambda values: _decimals(values, 6), "out_of_budget": _yes,
}
