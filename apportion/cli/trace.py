"""`apportion trace info FILE`: what a trace holds, the first thing to look at before simulating it.

The numbers come from ``apportion.workloads.trace_summary``; this module reads the options and prints
them, as tables for people or as JSON (``--json``) for scripts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from apportion.cli.help import HelpCommand, HelpGroup
from apportion.cli.output import console, escape, fail, print_json, print_line, print_table

app = typer.Typer(cls=HelpGroup, no_args_is_help=True, help="Look at a job trace before simulating it.")


@app.command(cls=HelpCommand)
def info(
    file: Path = typer.Argument(..., metavar="FILE", help="A trace: apportion's CSV or a public trace as it ships "
                                "(Philly, Helios, Alibaba PAI 2020 or 2023; docs/workloads.md)."),
    cluster: Optional[str] = typer.Option(None, "--cluster", metavar="SPEC",
                                          help="Also the load the trace would put on this cluster "
                                               "(TYPE:GPUS,... or a YAML file): GPU-hours asked / available."),
    trace_format: Optional[str] = typer.Option(None, "--trace-format", metavar="NAME",
                                               help="Read FILE as this format instead of telling it by its "
                                                    "content: apportion, philly, philly-log, helios, pai, "
                                                    "alibaba-2023."),
    as_json: bool = typer.Option(False, "--json", help="Print the numbers as JSON, nothing else."),
) -> None:
    """Jobs, time span, arrivals over time, GPU counts, durations, GPU types and the load on a cluster."""
    from apportion.core.errors import InputError
    from apportion.workloads.trace_csv import read_trace_rows
    from apportion.workloads.trace_summary import summarize

    try:
        target = None
        if cluster is not None:
            from apportion.workloads.cluster_file import load_cluster

            target = load_cluster(cluster)
        summary = summarize(read_trace_rows(file, trace_format), str(file), target)
    except (InputError, OSError, ValueError) as exc:
        raise fail(str(exc)) from None
    if as_json:
        print_json(summary)
    else:
        _show(summary)


def _show(s: dict) -> None:
    from rich.table import Table

    arrivals, gpus, durations = s["arrivals"], s["gpus"], s["duration_s"]
    print_line(f"{s['file']}  ({s['format']})")
    print_line(f"{s['jobs']:,} jobs submitted over {_time(s['span_s'])}; the last ends {_time(s['last_end_s'])} "
               f"after the first is submitted")
    for why, count in s["left_out"].items():
        print_line(f"left out: {count:,} {why}")
    for note in s["notes"]:
        print_line(f"note: {note}")
    unit = {3600: "hour", 86400: "day", 604800: "week"}[arrivals["bin_s"]]
    print_line(f"arrivals: {arrivals['mean_per_hour']:.3g}/h on average; by {unit}, from "
               f"{arrivals['quietest_bin_per_hour']:.3g}/h to {arrivals['busiest_bin_per_hour']:.3g}/h "
               f"({arrivals['empty_bins']} {unit}s with none)")
    print_line(f"per {unit}: {_spark(arrivals['per_bin'])}")

    table = Table(title="GPUs per job", title_justify="left")
    for name in ("GPUs", "jobs", "share", "GPU-hours"):
        table.add_column(name, justify="right")
    for row in gpus["histogram"]:
        table.add_row(row["gpus"], f"{row['jobs']:,}", f"{row['jobs'] / s['jobs']:.1%}", f"{row['gpu_hours']:,.0f}")
    print_table(table)
    table = Table(title="Durations", title_justify="left")
    for name in ("duration", "jobs", "share"):
        table.add_column(name, justify="right")
    for row in durations["histogram"]:
        table.add_row(row["duration"], f"{row['jobs']:,}", f"{row['jobs'] / s['jobs']:.1%}")
    print_table(table)
    print_line(f"durations: median {_time(durations['median'])}, mean {_time(durations['mean'])}, "
               f"p90 {_time(durations['p90'])}, max {_time(durations['max'])}")
    table = Table(title="GPU types asked for", title_justify="left")
    table.add_column("GPU type")
    for name in ("jobs", "GPU-hours"):
        table.add_column(name, justify="right")
    for row in s["gpu_types"]:
        table.add_row(escape(row["gpu_type"]) or "(not given)", f"{row['jobs']:,}", f"{row['gpu_hours']:,.0f}")
    print_table(table)
    print_line(f"{gpus['total_gpu_hours']:,.0f} GPU-hours asked in all; {gpus['mean']:.2f} GPUs a job on average, "
               f"{gpus['max']} at most")
    load = s.get("cluster")
    if load is not None:
        print_line(f"on {load['gpus']:,} GPUs over {_time(load['window_s'])}: {load['gpu_hours_asked']:,.0f} GPU-hours "
                   f"asked / {load['gpu_hours_available']:,.0f} available = load "
                   + (f"{load['load']:.2f}" if load["load"] is not None else "n/a"))
        if load["jobs_larger_than_cluster"]:
            console.print(f"[yellow]{load['jobs_larger_than_cluster']:,} jobs ask for more GPUs than the cluster "
                          "has: they would never run[/]", highlight=False)


def _time(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


def _spark(counts: list[int], width: int = 60) -> str:
    """Counts as a line of block characters, at most ``width`` wide (bins merged to fit); a blank where none."""
    import numpy as np

    values = np.asarray(counts, dtype=float)
    if len(values) > width:
        edges = np.linspace(0, len(values), width + 1).astype(int)
        values = np.add.reduceat(values, edges[:-1])
    top = values.max() or 1.0
    levels = np.where(values > 0, np.maximum(1, np.round(values / top * 8)), 0).astype(int)  # none: a blank
    return "".join(" ▁▂▃▄▅▆▇█"[level] for level in levels.tolist())
