"""The replay's figure: real against simulated JCT per job, each job's error, and both JCT CDFs.

Built without pyplot (Agg renders it), as ``apportion.report.plots`` does.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from apportion.fidelity.comparison import Fidelity

SIZE_IN = (15.0, 4.6)
DPI = 120


def fidelity_figure(fidelity: Fidelity) -> Figure:
    """Three panels: simulated vs real JCT (one dot a job), per-job relative error, JCT CDFs."""
    fig = Figure(figsize=SIZE_IN, dpi=DPI, layout="constrained")
    scatter_ax, error_ax, cdf_ax = fig.subplots(1, 3, width_ratios=(1, 1.3, 1))
    errors = fidelity.errors
    fig.suptitle(
        f"{fidelity.settings.policy} on {fidelity.settings.describe_slots()}, rounds of {fidelity.settings.round_s:g} s: "
        f"average JCT error {errors['avg_jct_error']:.1%}, p90 per-job error {errors['p90_job_error']:.1%}",
        fontsize=12,
    )
    rows = fidelity.compared
    real = np.array([r.real_jct_s for r in rows])
    sim = np.array([r.sim_jct_s for r in rows])

    scatter_ax.set_title("JCT per job", fontsize=11)
    if len(rows):
        top = float(max(real.max(), sim.max())) * 1.05
        line = np.array([0.0, top])
        scatter_ax.fill_between(line, line * 0.9, line * 1.1, color="0.85", label="±10%")
        scatter_ax.plot(line, line, color="0.4", linewidth=1, label="simulated = real")
        scatter_ax.scatter(real, sim, s=18, color="C0", zorder=3)
        scatter_ax.set(xlim=(0, top), ylim=(0, top))
        scatter_ax.legend(loc="upper left", fontsize=9)
    scatter_ax.set(xlabel="real JCT (s)", ylabel="simulated JCT (s)")
    scatter_ax.grid(True, alpha=0.3)

    error_ax.set_title("Simulated vs real JCT, per job (by submission)", fontsize=11)
    if len(rows):
        relative = (sim / real - 1.0) * 100.0
        colors = np.where(np.abs(relative) <= 10.0, "C0", "C3")
        error_ax.bar(range(len(rows)), relative, color=colors)
        error_ax.set_xticks(range(len(rows)), [str(r.job_id) for r in rows], fontsize=7,
                            rotation=90 if len(rows) > 20 else 0)
        for level in (-10.0, 10.0):
            error_ax.axhline(level, color="0.5", linestyle=":", linewidth=1)
        error_ax.axhline(0.0, color="0.3", linewidth=0.8)
    error_ax.set(xlabel="job", ylabel="error (%)")
    error_ax.grid(True, axis="y", alpha=0.3)

    cdf_ax.set_title("Job completion time", fontsize=11)
    for values, name, color in ((real, "real", "C1"), (sim, "simulated", "C0")):
        if len(values):
            ordered = np.sort(values)
            fraction = np.arange(1, len(ordered) + 1) / len(ordered) * 100.0
            cdf_ax.plot(np.append(ordered[0], ordered), np.append(0.0, fraction), drawstyle="steps-post",
                        color=color, linewidth=1.6, label=name)
    cdf_ax.set(xlabel="JCT (s)", ylabel="jobs (%)", ylim=(0, 101))
    cdf_ax.grid(True, alpha=0.3)
    if len(rows):
        cdf_ax.legend(loc="lower right", fontsize=9)
    return fig
