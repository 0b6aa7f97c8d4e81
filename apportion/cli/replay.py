"""`apportion replay`: a finished serve run and its simulation, side by side."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer

from apportion.cli import options as opt
from apportion.cli.flow import replay_command
from apportion.cli.output import console, escape, fail, print_line, print_table


def replay(
    state_dir: Path = typer.Argument(..., metavar="STATE_DIR", help="The --state-dir of a finished `apportion serve` run."),
    speeds: str = typer.Option("job", "--speeds", help="job: each job trains at its own measured speed; kind: at its job kind's.", rich_help_panel="Simulation"),
    costs: str = typer.Option("measured", "--costs", help="measured: the start-up, stop and finish costs the run measured per job kind, each start-up the kind's median scaled by how slow the other jobs' start-ups were around the moment it begins; kind: each kind's mean costs alone; constant: --restart-cost-s for each resume, nothing else.", rich_help_panel="Simulation"),
    clock: str = typer.Option("wall", "--clock", help="wall: rounds as the server ran them (early rounds to fill idle slots, leases from an attempt's first step, decided ahead); rounds: the simulator's fixed rounds.", rich_help_panel="Simulation"),
    restart_cost_s: float = typer.Option(10.0, "--restart-cost-s", help="Seconds a resume costs a job kind the run never measured (every kind, with --costs constant).", rich_help_panel="Simulation"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write fidelity.json, jobs.csv (side by side) and fidelity.png to this directory.", rich_help_panel="Output"),
    as_json: bool = opt.json_option("the comparison", "Output"),
) -> None:
    """Simulate a finished serve run's workload under its policy and round length, with the speeds
    and costs it measured, and show the two side by side: JCT, queueing and preemptions per job."""
    from apportion.core.errors import InputError
    from apportion.fidelity import replay_run
    from apportion.fidelity.comparison import CLOCKS, COSTS, SPEEDS

    for flag, value, choices in (("--speeds", speeds, SPEEDS), ("--costs", costs, COSTS), ("--clock", clock, CLOCKS)):
        if value not in choices:
            raise fail(f"{flag} must be one of {', '.join(choices)}, got '{value}'")
    if restart_cost_s < 0:
        raise fail(f"--restart-cost-s must be >= 0, got {restart_cost_s}")

    def work(_, progress):
        def report(ended: int, total: int, now_s: float) -> None:
            progress.update("replay", total=total, completed=ended, day=now_s / 86400)

        try:
            return replay_run(state_dir, speeds=speeds, costs=costs, clock=clock, restart_cost_s=restart_cost_s,
                              progress=report)
        except InputError as exc:
            raise fail(str(exc)) from None

    def write(_, fidelity, out: Path) -> list:
        from apportion.fidelity.outputs import write_fidelity

        return write_fidelity(fidelity, out)

    replay_command(out=out, as_json=as_json, prepare=lambda: None, tasks=lambda _: {"replay": 1}, work=work,
                   to_json=lambda _, fidelity: fidelity.to_dict(), show=lambda _, fidelity: _print(fidelity),
                   write=write)


def _print(fidelity) -> None:
    from rich.table import Table
    from apportion.fidelity.measured import STARTUPS

    settings, options = fidelity.settings, fidelity.options
    console.print(f"[bold]{escape(settings.policy)}[/] on {escape(settings.describe_slots())}, rounds of "
                  f"{settings.round_s:g} s: {len(fidelity.rows)} jobs of {escape(fidelity.state_dir)} replayed "
                  f"(speeds {options['speeds']}, costs {options['costs']}, clock {options['clock']})", highlight=False)
    jobs = Table(header_style="bold")
    for name in ("job", "name", "kind", "submitted", "real JCT", "sim JCT", "error", "real queueing",
                 "sim queueing", "real preempt.", "sim preempt."):
        jobs.add_column(name, justify="left" if name in ("name", "kind") else "right")
    for r in fidelity.rows:
        jobs.add_row(str(r.job_id), escape(r.name), escape(r.kind), _s(r.submitted_s), _s(r.real_jct_s),
                     _s(r.sim_jct_s), _pct(r.jct_error), _s(r.real_queueing_s), _s(r.sim_queueing_s),
                     str(r.real_preemptions), str(r.sim_preemptions))
    print_table(jobs)
    totals, errors = fidelity.totals, fidelity.errors
    summary = Table(header_style="bold")
    for name in ("", "real", "simulated"):
        summary.add_column(name, justify="left" if not name else "right")
    for key, label in (("avg_jct_s", "avg JCT"), ("avg_queueing_s", "avg queueing"), ("makespan_s", "makespan")):
        summary.add_row(label, _s(totals["real"][key]), _s(totals["simulated"][key]))
    summary.add_row("preemptions", f"{totals['real']['preemptions']:g}", f"{totals['simulated']['preemptions']:g}")
    print_table(summary)
    print_line(f"average JCT error {_pct(errors['avg_jct_error'], signed=False)} (simulated "
               f"{'slower' if errors['avg_jct_bias'] > 0 else 'faster'}), p90 per-job error "
               f"{_pct(errors['p90_job_error'], signed=False)}, mean per-job error "
               f"{_pct(errors['mean_job_error'], signed=False)}")
    if errors["unfinished_in_simulation"]:
        print_line(f"{errors['unfinished_in_simulation']} job(s) never finished in the simulation")
    for job in fidelity.left_out:
        print_line(f"left out: job {job['id']} ({escape(job['name'])}) did not complete for real ({job['status']})")
    costs = fidelity.measured.describe()
    for kind in sorted({k for by_kind in costs.values() for k in by_kind}):
        parts = [f"{name.removesuffix('_s').replace('_', ' ')} {c['mean']:.2f} ± {c['std']:.2f} s"
                 + (f" (median {c['median']:.2f} s, {c['n']})" if name in STARTUPS else f" ({c['n']})")
                 for name, by_kind in costs.items() if (c := by_kind.get(kind))]
        print_line(f"measured {escape(kind)}: " + ", ".join(parts))
    if fidelity.options["costs"] == "measured" and fidelity.measured.startups:
        window_s = fidelity.measured.best_window_s()
        print_line("start-ups charged their kind's mean: no moment of the run was slower than another"
                   if math.isinf(window_s) else
                   f"start-ups charged their kind's median times how slow the other jobs' start-ups within "
                   f"{window_s:g} s of them were")


def _s(seconds: float) -> str:
    return "—" if not math.isfinite(seconds) else f"{seconds:.1f} s"


def _pct(fraction: float, signed: bool = True) -> str:
    return "—" if not math.isfinite(fraction) else f"{fraction:+.1%}" if signed else f"{fraction:.1%}"
