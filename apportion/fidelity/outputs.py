"""A replay's files: fidelity.json (everything), jobs.csv (the jobs side by side), fidelity.png."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from apportion.fidelity.comparison import Fidelity

JSON_FILE = "fidelity.json"
JOBS_FILE = "jobs.csv"
PLOT_FILE = "fidelity.png"
JOB_COLUMNS = ("job_id", "name", "kind", "submitted_s", "real_jct_s", "sim_jct_s", "jct_error", "real_queueing_s",
               "sim_queueing_s", "real_preemptions", "sim_preemptions")


def write_fidelity(fidelity: Fidelity, out_dir: str | Path) -> list[Path]:
    """Write the three files into ``out_dir`` (created if needed); returns their paths."""
    from apportion.fidelity.plot import fidelity_figure

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    document = fidelity.to_dict()
    json_path = out / JSON_FILE
    json_path.write_text(strict_json(document, indent=2) + "\n", encoding="utf-8")
    jobs_path = out / JOBS_FILE
    with jobs_path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(JOB_COLUMNS)
        for row in document["rows"]:
            writer.writerow(["" if row[c] is None else row[c] for c in JOB_COLUMNS])
    figure = fidelity_figure(fidelity)
    plot_path = out / PLOT_FILE
    figure.savefig(plot_path, dpi=figure.dpi)
    return [json_path, jobs_path, plot_path]


def strict_json(document: Any, **options: Any) -> str:
    """``document`` as standard JSON: a figure a run was too short to give (NaN, infinite) is null, where
    Python's encoder would write ``NaN`` or ``Infinity``, which other JSON readers refuse."""
    return json.dumps(_nulled(document), allow_nan=False, **options)


def _nulled(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _nulled(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nulled(item) for item in value]
    return value
