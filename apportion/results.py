"""What ``apportion.simulate``, ``compare`` and ``sweep`` return: the replays, their jobs, timeline
and summary as pandas DataFrames, and report.html shown inline in Jupyter.

pandas is an optional extra (``pip install 'apportion[notebook]'``), imported only when a
DataFrame is asked for; everything else here works without it.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from pathlib import Path

from apportion.report.html import report_page
from apportion.report.outputs import job_values, timeline_values
from apportion.sim import SimResult

EXTRA = "notebook"
REPORT_HEIGHT_PX = 900  # the inline report's frame; the page scrolls inside it


def pandas():
    """The pandas module, or an ImportError saying which extra brings it."""
    try:
        import pandas
    except ImportError:
        raise ImportError(f"DataFrames need pandas: pip install 'apportion[{EXTRA}]'") from None
    return pandas


def _inline(page: str, height_px: int = REPORT_HEIGHT_PX) -> str:
    """A whole HTML page as one notebook output: in a frame of its own, so that its styles and
    scripts touch nothing else in the notebook."""
    return (f'<iframe srcdoc="{html.escape(page, quote=True)}" style="width:100%;height:{height_px}px;border:0" '
            'sandbox="allow-scripts"></iframe>')


class Run:
    """One replay: ``result`` (the SimResult), ``jobs``, ``timeline`` and ``summary`` as DataFrames."""

    def __init__(self, result: SimResult, workload: str):
        self.result = result
        self.workload = workload

    @property
    def policy(self) -> str:
        return self.result.policy

    @property
    def summary(self):
        """One row: the replay's summary figures (those of ``apportion simulate --json``)."""
        return pandas().DataFrame([self.result.summary])

    @property
    def jobs(self):
        """One row a job, the columns of jobs.csv (times in seconds, NaN where unknown)."""
        return pandas().DataFrame(job_values(self.result))

    @property
    def timeline(self):
        """One row a decision, the columns of timeline.csv."""
        return pandas().DataFrame(timeline_values(self.result))

    def report_html(self) -> str:
        """report.html as text: the page ``out=`` writes."""
        return report_page([self.result])

    def write(self, out: str | Path) -> list[Path]:
        """Write summary.json, jobs.csv, timeline.csv, report.png and report.html into directory ``out``."""
        from apportion.report.outputs import write_run

        return write_run(self.result, Path(out))

    def _repr_html_(self) -> str:
        return _inline(self.report_html())

    def __repr__(self) -> str:
        return f"<Run {self.policy}: {self.workload}, {_brief(self.result.summary)}>"


class Comparison:
    """Several policies on one workload: each policy's ``Run`` (``comparison["las"]``), and the
    summaries, jobs and timelines of all as DataFrames, a ``policy`` column first."""

    def __init__(self, results: Sequence[SimResult], workload: str):
        self.results = list(results)
        self.workload = workload
        self.runs = {r.policy: Run(r, workload) for r in self.results}

    @property
    def policies(self) -> list[str]:
        return [r.policy for r in self.results]

    def __getitem__(self, policy: str) -> Run:
        return self.runs[policy]

    def __iter__(self):
        return iter(self.runs.values())

    def __len__(self) -> int:
        return len(self.results)

    @property
    def summary(self):
        """One row a policy, indexed by policy: the figures of ``apportion compare --json``."""
        frame = pandas().DataFrame([r.summary for r in self.results])
        return frame.set_index("policy", drop=False).rename_axis(None)

    @property
    def jobs(self):
        """Every policy's jobs, one after another, a ``policy`` column first."""
        return self._stacked(job_values)

    @property
    def timeline(self):
        """Every policy's timeline, one after another, a ``policy`` column first."""
        return self._stacked(timeline_values)

    def _stacked(self, values_of):
        pd = pandas()
        frames = [pd.DataFrame(values_of(r)) for r in self.results]
        for result, frame in zip(self.results, frames):
            frame.insert(0, "policy", result.policy)
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def report_html(self) -> str:
        return report_page(self.results)

    def write(self, out: str | Path) -> list[Path]:
        """Write comparison.json, jobs.csv, comparison.png and report.html into directory ``out``."""
        from apportion.report.outputs import write_comparison

        return write_comparison(self.results, Path(out))

    def _repr_html_(self) -> str:
        return _inline(self.report_html())

    def __repr__(self) -> str:
        each = "; ".join(f"{r.policy}: {_brief(r.summary)}" for r in self.results)
        return f"<Comparison on {self.workload}: {each}>"


class Sweep:
    """A grid of replays: ``cells`` (one row a replay) and ``summary`` (one row a policy, cluster
    and load: each metric's mean over the seeds, and ``METRIC_ci95``, the half-width of its 95%
    interval) as DataFrames; ``grid`` describes the grid. A sweep keeps no jobs or timelines."""

    def __init__(self, rows: Sequence[dict], means: Sequence[dict], grid: dict, metrics: Sequence[str]):
        self.rows = list(rows)
        self.means = list(means)
        self.grid = grid
        self.metrics = list(metrics)

    @property
    def cells(self):
        """One row a replay: its policy, cluster, load and seed, and its metrics."""
        return pandas().DataFrame(self.rows)

    @property
    def summary(self):
        """One row a (policy, cluster, load): seeds, then each metric's mean and ``_ci95``."""
        flat = []
        for entry in self.means:
            row = {key: entry[key] for key in ("policy", "cluster", "rate_per_hour", "seeds")}
            for metric in self.metrics:
                row[metric] = entry[metric]["mean"]
                row[f"{metric}_ci95"] = entry[metric]["ci95"]
            flat.append(row)
        return pandas().DataFrame(flat)

    def figure(self):
        """Each metric against the load, one line a policy, the interval as error bars (matplotlib)."""
        from apportion.report.sweep import sweep_figure

        return sweep_figure(self.means)

    def write(self, out: str | Path) -> list[Path]:
        """Write sweep.json, sweep-cells.csv and sweep.png into directory ``out``."""
        from apportion.report.sweep import write_sweep

        return write_sweep(self.rows, self.means, self.grid, Path(out))

    def _repr_html_(self) -> str:
        from apportion.report.sweep import sweep_html

        figure = self.figure()
        png = io.BytesIO()
        figure.savefig(png, format="png", dpi=figure.dpi)
        image = base64.b64encode(png.getvalue()).decode("ascii")
        return sweep_html(self.means, [m for m in self.metrics if m not in ("completed", "preemptions")]) + \
            f'<img alt="each metric against the load" src="data:image/png;base64,{image}">'

    def __repr__(self) -> str:
        return (f"<Sweep of {len(self.rows)} replays: {', '.join(self.grid['policies'])} × "
                f"{len(self.grid['rates_per_hour'])} loads × {len(self.grid['seeds'])} seeds>")


def _brief(summary: dict) -> str:
    """A replay's summary in a few words: jobs completed, average JCT, utilization."""
    from apportion.report.tables import format_duration

    utilization = summary.get("utilization")
    return (f"{summary.get('completed', 0)}/{summary.get('jobs', 0)} jobs completed, avg JCT "
            f"{format_duration(summary.get('avg_jct_s'))}, utilization "
            f"{'—' if utilization is None else f'{utilization * 100:.1f}%'}")
