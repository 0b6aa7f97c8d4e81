"""`apportion history`: finished jobs' accounting (GPU-hours by type, wait, run time, attempts,
preemptions, how they ended), from the server or read directly from a state directory."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from apportion.cli import options as opt
from apportion.cli.output import console, escape, fail, print_json, print_line, print_table

SHOWN = 100  # rows a table shows by default: the latest


def history(
    user: Optional[str] = typer.Option(None, "--user", help="Only these users' jobs (comma-separated).", rich_help_panel="Filters"),
    queue: Optional[str] = typer.Option(None, "--queue", help="Only jobs of these queues (comma-separated).", rich_help_panel="Filters"),
    state: str = typer.Option("finished", "--state", help="Statuses, comma-separated: completed, failed, cancelled, queued, running, preempted; or finished (the first three), active (the last three), all.", rich_help_panel="Filters"),
    since: Optional[str] = typer.Option(None, "--since", help="Jobs in the system at or after this time: 2h, 3d (ago), 2026-11-27, 2026-11-27T10:00 (local time).", rich_help_panel="Filters"),
    until: Optional[str] = typer.Option(None, "--until", help="Jobs submitted before this time (the same forms as --since).", rich_help_panel="Filters"),
    by: Optional[str] = typer.Option(None, "--by", help="Totals per user, type (GPU type) or queue instead of a row a job.", rich_help_panel="Output"),
    limit: int = typer.Option(SHOWN, "--limit", help="Rows the table shows, the latest (0: all); the total line counts every job. --json and --csv give all.", rich_help_panel="Output"),
    as_json: bool = opt.json_option("the jobs, the total and any groups", "Output"),
    as_csv: bool = typer.Option(False, "--csv", help="Print the rows (or with --by, the groups) as CSV.", rich_help_panel="Output"),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", help="Read this server's state directory directly, read-only (the server may be running or stopped), instead of asking the server.", rich_help_panel="Server"),
    server: Optional[str] = opt.Server,
    token: Optional[str] = opt.Token,
    token_file: Optional[Path] = opt.TokenFile,
) -> None:
    """List finished jobs with their accounting: GPU types and GPU-hours (each attempt's slots ×
    the time it held them), wait (first start − submit), run time, attempts, preemptions and how
    each ended; a total line. --by totals per user, GPU type or queue."""
    from apportion.core.errors import InputError
    from apportion.serve.store import usage

    if as_json and as_csv:
        raise fail("--json and --csv: choose one")
    if limit < 0:
        raise fail(f"--limit must be >= 0, got {limit}")
    now = time.time()
    try:  # checked here, and the times given as Unix seconds: the dates are this machine's local time
        filters = usage.parse_filters(user=user, queue=queue, state=state, since=since, until=until, now=now,
                                      source="apportion history")
        grouping = usage.parse_grouping(by, source="apportion history")
    except InputError as exc:
        raise fail(_flag_error(exc)) from None
    shown = None if (as_json or as_csv or not limit) else limit
    if state_dir is not None:
        report = _from_state_dir(state_dir, filters, grouping, shown, now)
    else:
        from apportion.cli.jobs import call, client_for

        client = client_for(server, token, token_file)
        report = call(lambda: client.history(user=user, queue=queue, state=state, by=grouping, limit=shown,
                                              since=None if filters.since is None else repr(filters.since),
                                              until=None if filters.until is None else repr(filters.until)))
    if as_json:
        print_json(report)
    elif as_csv:
        _print_csv(report)
    elif grouping:
        _print_groups(report)
    else:
        _print_jobs(report, now)


def _from_state_dir(state_dir: Path, filters, grouping: str | None, limit: int | None, now: float) -> dict:
    """The report from the state file itself, opened read-only (no lock, no write: a running server
    goes on as before); every field shown, as to the operator who can read the file anyway. The
    file is read as untrusted (serve/store/untrusted_state.py): a damaged or hostile one is one line."""
    from apportion.serve.store import usage
    from apportion.serve.store.untrusted_state import DamagedState, read_accounting

    path = Path(state_dir) / "state.db"
    if not path.is_file():
        raise fail(f"--state-dir {state_dir}: no state file there (state.db): is it a server's --state-dir?")
    try:
        columns = read_accounting(path)
    except DamagedState as exc:
        raise fail(f"--state-dir {state_dir}: {exc}") from None
    table = usage.usage(*columns, filters, now)
    return usage.report(table, lambda user: True, grouping, limit)


def _flag_error(exc) -> str:
    """An InputError about a filter, naming the flag."""
    return f"--{exc.field}: {exc.message}" if exc.field else str(exc)


def _print_jobs(report: dict, now: float) -> None:
    from rich import box
    from rich.table import Table

    from apportion.cli.jobs import span
    from apportion.cli.output import cell

    jobs = report["jobs"]
    if not jobs:
        console.print("no jobs match")
        return
    table = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False, show_edge=False)
    right = ("ID", "GPU-HOURS", "WAIT", "RUN", "ATTEMPTS", "PREEMPT")
    for column in ("ID", "NAME", "USER", "QUEUE", "TYPES", "GPU-HOURS", "WAIT", "RUN", "ATTEMPTS", "PREEMPT",
                   "SUBMITTED", "EXIT"):
        table.add_column(column, justify="right" if column in right else "left", no_wrap=True, overflow="ellipsis")
    for j in jobs:
        table.add_row(cell(j["id"]), cell(j["name"]), cell(j["user"]), cell(j["queue"] or "-"),
                      cell(",".join(j["gpu_types"]) or "-"), _hours(j["gpu_hours_total"], j["gpu_hours"]),
                      span(j["wait_s"]), span(j["run_s"]), str(j["attempts"]), str(j["preemptions"]),
                      _clock(j["submitted"], now), cell(_exit(j), 72))
    print_table(table)
    if report["matched"] > len(jobs):
        print_line(f"the latest {len(jobs)} of {report['matched']} jobs shown (--limit 0: all; --by user|type|queue:"
                   " totals)")
    print_line(_total_line(report["total"]))


def _print_groups(report: dict) -> None:
    from rich import box
    from rich.table import Table

    from apportion.cli.jobs import span
    from apportion.cli.output import cell

    key = report["by"]
    if not report["groups"]:
        console.print("no jobs match")
        return
    table = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False, show_edge=False)
    for column in (key.upper(), "JOBS", "GPU-HOURS", "MEAN WAIT", "MEAN RUN", "PREEMPTIONS", "FAILURES"):
        table.add_column(column, justify="left" if column == key.upper() else "right", no_wrap=True)
    for g in report["groups"]:
        table.add_row(cell(g[key] or "-"), str(g["jobs"]), _hours(g["gpu_hours"], g["gpu_hours_by_type"]),
                      span(g["mean_wait_s"]), span(g["mean_run_s"]), str(g["preemptions"]), str(g["failures"]))
    print_table(table)
    print_line(_total_line(report["total"]))


def _print_csv(report: dict) -> None:
    """The rows (or the groups), one line each, GPU-hours in a column per type; times in ISO 8601;
    control characters in text escaped."""
    import csv
    import sys

    from apportion.cli.safe_text import printable

    total = report["total"]
    types = sorted(total["gpu_hours_by_type"])
    writer = csv.writer(sys.stdout, lineterminator="\n")

    def writerow(values: list) -> None:  # text cells' control characters escaped: none reach the terminal
        writer.writerow([printable(v, lines=False) if isinstance(v, str) else v for v in values])

    if "groups" in report:
        key = report["by"]
        writerow([key, "jobs", "gpu_hours", *(f"gpu_hours_{t}" for t in types), "mean_wait_s", "mean_run_s",
                  "preemptions", "failures"])
        for g in report["groups"]:
            writerow([g[key], g["jobs"], g["gpu_hours"], *(g["gpu_hours_by_type"].get(t, 0) for t in types),
                      _blank(g["mean_wait_s"]), _blank(g["mean_run_s"]), g["preemptions"], g["failures"]])
        return
    writerow(["id", "name", "user", "queue", "status", "exit_code", "reason", "gpu_types", "gpu_hours",
              *(f"gpu_hours_{t}" for t in types), "wait_s", "run_s", "attempts", "preemptions", "submitted",
              "started", "finished"])
    for j in report["jobs"]:
        writerow([j["id"], j["name"], j["user"], j["queue"], j["status"], _blank(j["exit_code"]), j["reason"],
                  " ".join(j["gpu_types"]), j["gpu_hours_total"], *(j["gpu_hours"].get(t, 0) for t in types),
                  _blank(j["wait_s"]), j["run_s"], j["attempts"], j["preemptions"], _iso(j["submitted"]),
                  _iso(j["started"]), _iso(j["finished"])])


def _exit(job: dict) -> str:
    """How a job ended: its status, its exit code, its reason."""
    code = "" if job["exit_code"] is None else f" (exit {job['exit_code']})"
    reason = f": {job['reason']}" if job["reason"] else ""
    return f"{job['status']}{code}{reason}"


def _hours(total: float, by_type: dict) -> str:
    """GPU-hours, and each type's beside them when there are several."""
    shown = f"{total:.2f}"
    if len(by_type) > 1:
        shown += " (" + ", ".join(f"{escape(t)} {h:.2f}" for t, h in by_type.items()) + ")"
    return shown


def _total_line(total: dict) -> str:
    from apportion.cli.jobs import span

    by_type = ", ".join(f"{t} {h:.2f}" for t, h in total["gpu_hours_by_type"].items())
    return (f"total: {total['jobs']} job(s), {total['gpu_hours']:.2f} GPU-hours" + (f" ({by_type})" if by_type else "")
            + f", mean wait {span(total['mean_wait_s'])}, mean run {span(total['mean_run_s'])}, "
            f"{total['preemptions']} preemption(s), {total['failures']} failed")


def _clock(when: float | None, now: float) -> str:
    if when is None:
        return "-"
    return time.strftime("%H:%M:%S" if now - when < 86400 else "%Y-%m-%d %H:%M", time.localtime(when))


def _iso(when: float | None) -> str:
    if when is None:
        return ""
    from datetime import datetime

    return datetime.fromtimestamp(when).astimezone().isoformat(timespec="seconds")


def _blank(value) -> object:
    return "" if value is None else value
