"""The server's clients: `apportion queue`, `cancel`, `logs` and `status` (`submit` and `wait`: submit.py).

Light on purpose: these import the HTTP client and nothing of the scheduler itself.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from apportion.cli import options as opt
from apportion.cli.arrays import collapse_arrays
from apportion.cli.output import console, errors, escape, fail, print_json, print_json_text, print_table
from apportion.cli.output import cell_text as _text
from apportion.cli.safe_text import log_text, printable
from apportion.stdio import stdout_to_stderr


def client_for(server: Optional[str], token: Optional[str], token_file: Optional[Path] = None):
    """The API client, with the caller's credential (one-line error for an unusable one)."""
    from apportion.serve.client import Client, ClientError

    try:
        client = Client(server, token, token_file=token_file)
    except ClientError as exc:
        raise fail(str(exc)) from None
    if token is not None:
        errors.print("warning: --token is visible to every user of this machine (ps, /proc); use --token-file, "
                     "APPORTION_TOKEN or ~/.config/apportion/token", highlight=False)
    return client


def claimed_user(client, user: Optional[str]) -> Optional[str]:
    """The user a request names: ``--user``, else (with no credential, whose user the server knows) the OS user."""
    from apportion.serve.jobs.jobspec import default_user

    return user or (None if client.token else default_user())


def call(function, *args):
    """``function(*args)`` of the client, its stdout kept off ours; a client error is one line, exit 2."""
    from apportion.serve.client import ClientError

    try:
        with stdout_to_stderr():
            return function(*args)
    except ClientError as exc:
        raise fail(str(exc)) from None


def span(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _submitted(when: float, now: float) -> str:
    import time as _time

    return _time.strftime("%H:%M:%S" if now - when < 86400 else "%Y-%m-%d %H:%M", _time.localtime(when))


def _finish_at(job: dict, now: float) -> str:
    """When a job is expected to finish, as a clock time; ≥ when it is not running (it may wait first)."""
    import time as _time

    when = job.get("estimated_finish")
    if when is None:
        return "-"
    shown = _time.strftime("%H:%M:%S" if when - now < 86400 else "%Y-%m-%d %H:%M", _time.localtime(when))
    return ("" if job["status"] == "running" else "≥") + shown


WAITING_SHOWN = 50  # waiting jobs `apportion queue` lists without --all: about a screenful
RICH_ROWS = 200  # a table this long or shorter is drawn by rich on a terminal, in colour; a longer one as plain lines
COLUMNS = ("ID", "NAME", "USER", "QUEUE", "PRIO", "STATUS(REASON)", "GPUS", "ALLOC", "SUBMITTED", "RUNTIME", "PROGRESS",
           "STALL", "EST.FINISH")
RIGHT = tuple(column in ("ID", "PRIO", "GPUS", "RUNTIME", "PROGRESS", "STALL") for column in COLUMNS)
WAITING = ("queued", "preempted")


def queue(
    as_json: bool = opt.json_option("the jobs (a list)"),
    show_all: bool = typer.Option(False, "--all", help="Every job ever submitted, every row (default: running jobs, jobs that ended in the last hour, and the first 50 waiting)."),
    expand: bool = typer.Option(False, "--expand", help="Each task of a job array on a line of its own (default: an array is one line)."),
    array: Optional[str] = typer.Option(None, "--array", metavar="ARRAY_ID", help="Only the tasks of this job array, one a line."),
    server: Optional[str] = opt.Server,
    token: Optional[str] = opt.Token,
    token_file: Optional[Path] = opt.TokenFile,
) -> None:
    """List jobs: ID NAME USER QUEUE PRIO STATUS(REASON) GPUS ALLOC SUBMITTED RUNTIME PROGRESS STALL EST.FINISH.

    A job array is one line, ``12[0-15]``, its status how many of its tasks are in each state and
    its progress summed over them; ``--expand`` or ``--array 12`` lists its tasks.

    STALL is the share of a job's step time spent waiting for data, from its latest progress
    report (``-``: the job does not time its waits; an array's, the mean of its tasks').

    EST.FINISH is when an active job is expected to finish, from the history of the jobs that
    finished on this server (never past its total_steps); ≥ for a job that is not running now.
    Without --all, only the first 50 waiting jobs are listed, and a line counts the others.
    """
    import time as _time

    from apportion.serve.client import ACTIVE_SHOWN_S, recent

    client = client_for(server, token, token_file)
    now = _time.time()
    more_waiting = 0
    named = array.strip() if array is not None else None
    if named is not None and not (named.isascii() and named.isdigit() and len(named) < 19):
        jobs = []  # an id that cannot be an array's has no tasks
    elif as_json:  # the server's JSON as it came, every page (not parsed: 50,000 jobs in well under a second)
        ended_after = None if show_all else now - ACTIVE_SHOWN_S
        text = call(lambda: client.jobs_text(ended_after=ended_after, array=named))
        print_json_text(text)
        return
    elif named is not None:  # the server picks the array's tasks
        jobs = call(lambda: client.jobs(array=named))
        if not show_all:
            jobs = recent(jobs, now)
    elif show_all:
        jobs = call(client.jobs)
    else:  # what a screen shows: the running and the recently ended, the first waiting, and a count of the rest
        shown = call(lambda: client.jobs(status="running,completed,failed,cancelled",
                                          ended_after=now - ACTIVE_SHOWN_S))
        waiting = [j for j in call(lambda: client.jobs(status=",".join(WAITING), limit=WAITING_SHOWN + 1))
                   if j["status"] in WAITING]
        if len(waiting) > WAITING_SHOWN:
            counts = call(client.status)["counts"]
            more_waiting = max(1, sum(counts.get(s, 0) for s in WAITING) - WAITING_SHOWN)
        by_id = {j["id"]: j for j in [*shown, *waiting[:WAITING_SHOWN]]}
        jobs = sorted(recent(by_id.values(), now), key=lambda j: int(j["id"]) if str(j["id"]).isdigit() else 0)
    if as_json:
        print_json(jobs)
        return
    if not jobs:
        console.print((f"no tasks of array {escape(array)}" if array is not None else "no jobs")
                      + ("" if show_all else " (--all shows jobs that ended more than an hour ago)"))
        return
    if not expand and array is None:
        jobs = collapse_arrays(jobs)
    rows = [_job_cells(j, now) for j in jobs]
    if console.is_terminal and len(rows) <= RICH_ROWS:
        print_table(_rich_table(rows, [j["status"] for j in jobs]))
    else:
        from apportion.cli.plain_table import table_lines

        out = console.file
        for line in table_lines(COLUMNS, RIGHT, rows):
            out.write(line + "\n")
        out.flush()
    if more_waiting:
        console.print(f"… and {more_waiting:,} more waiting (--all)", highlight=False)
    _privacy_blocks(client)
    failed = [_text(j["id"]) for j in jobs if j["status"] == "failed" and j.get("last_lines")]
    if failed:  # each failure's reason is in its row; its log is one command away, never reprinted here
        console.print(escape(f"failed: {', '.join(failed)}; the log of one: apportion logs {failed[0]}"),
                      highlight=False, soft_wrap=True)


def _privacy_blocks(client) -> None:
    """The server's privacy blocks and their budgets, after the jobs, when it has any."""
    from apportion.cli.blocks_table import print_budgets
    from apportion.serve.client import ClientError

    try:
        with stdout_to_stderr():
            info = client.blocks()
    except ClientError:  # a server older than privacy blocks
        return
    if info.get("blocks"):
        console.print()
        print_budgets(info)


def _job_cells(j: dict, now: float) -> list[str]:
    """A job's row of `apportion queue`, as plain text cells."""
    reason = _text(j["reason"], 60)
    if j.get("hangs"):  # attempts stopped as hung, whatever its reason says now
        reason = f"{reason}; " if reason else ""
        reason += f"hung {j['hangs']}×"
    status = _text(j["status"]) + (f"({reason})" if reason else "")
    progress = f"{j['steps_done']}/{j['total_steps']} ({100 * j['steps_done'] / max(1, j['total_steps']):.0f}%)"
    if j.get("target_examples"):  # an elastic job's target in examples, its batch changing between attempts
        done = min(j["examples_done"], j["target_examples"])
        progress = f"{_count(done)}/{_count(j['target_examples'])} ex ({100 * done / j['target_examples']:.0f}%)"
    return [_text(j["id"]), _text(j["name"]), _text(j["user"]), _text(j["queue"] or "-"), f"{j['priority']:g}", status,
            str(j["gpus"]), _text(_alloc(j)), _submitted(j["submitted"], now), span(j["runtime_s"]), progress,
            stall_cell(j.get("data_stall")), _finish_at(j, now)]


def _alloc(j: dict) -> str:
    """A job's slots, and the nodes its ranks run on where the server knows them (Ray):
    ``v100:0,v100:1 on 10.0.0.5/3f2a9c1b,10.0.0.6/77d0e412``; ``-`` for none."""
    nodes = j.get("nodes")  # a server from before nodes were shown has none
    return (j["alloc"] or "-") + (f" on {','.join(map(str, nodes))}" if nodes else "")


def stall_cell(share: Optional[float]) -> str:
    """A data stall as `queue` shows it: ``23%``, ``-`` when the job has not said."""
    return "-" if share is None else f"{100 * share:.0f}%"


def _rich_table(rows: list[list[str]], statuses: list[str]):
    """The rows as a rich table, each status in its colour."""
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False, show_edge=False)
    for column, right in zip(COLUMNS, RIGHT):
        table.add_column(column, justify="right" if right else "left", no_wrap=True, overflow="ellipsis")
    colours = {"running": "green", "completed": "blue", "failed": "red", "preempted": "yellow", "cancelled": "dim"}
    for cells, status in zip(rows, statuses):
        shown = [escape(cell) for cell in cells]
        name = _text(status)
        shown[5] = f"[{colours.get(status, 'default')}]{escape(name)}[/]" + escape(cells[5][len(name):])
        table.add_row(*shown)
    return table


def _slots_per_type(slots: list[dict]) -> str:
    """``k80: 250 (219 busy), v100: 250 (248 busy, 2 offline)``: the slots of each type, in the server's order."""
    total: dict[str, int] = {}
    busy: dict[str, int] = {}
    offline: dict[str, int] = {}
    for slot in slots:
        total[slot["gpu_type"]] = total.get(slot["gpu_type"], 0) + 1
        busy[slot["gpu_type"]] = busy.get(slot["gpu_type"], 0) + bool(slot["job"])
        offline[slot["gpu_type"]] = offline.get(slot["gpu_type"], 0) + bool(slot.get("offline"))
    return ", ".join(f"{t}: {n:,} ({busy[t]:,} busy" + (f", {offline[t]:,} offline)" if offline[t] else ")")
                     for t, n in total.items())


def _slot_holder(slot: dict) -> str:
    """``job 3 on 10.0.0.5/3f2a9c1b``, ``job 3``, ``offline`` (its node is gone) or ``idle``."""
    if slot["job"]:
        return f"job {slot['job']}" + (f" on {slot['node']}" if slot.get("node") else "")
    return "offline" if slot.get("offline") else "idle"


def _count(n: int) -> str:
    """A count of examples in a few characters: 960, 12.3k, 4.5M."""
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= size:
            return f"{n / size:.3g}{suffix}"
    return str(n)


def cancel(
    job_id: str = typer.Argument(..., metavar="JOB_ID", help="The job's id, or a job array's (see `apportion queue`)."),
    user: Optional[str] = opt.User,
    server: Optional[str] = opt.Server,
    token: Optional[str] = opt.Token,
    token_file: Optional[Path] = opt.TokenFile,
) -> None:
    """Cancel a job (a running attempt gets SIGTERM, then SIGKILL after the grace period), or
    every task still active of the job array JOB_ID names."""
    client = client_for(server, token, token_file)
    answer = call(client.cancel, job_id, claimed_user(client, user)) or {}
    count = answer.get("cancelled", 1)
    if count == 1 and not answer.get("array"):
        console.print(f"cancelled job {escape(job_id)}", highlight=False)
    else:
        console.print(f"cancelled array {escape(job_id)}: {count} task{'s' if count != 1 else ''}", highlight=False)


def logs(
    job_id: str = typer.Argument(..., metavar="JOB_ID", help="The job's id."),
    attempt: Optional[int] = typer.Option(None, "--attempt", help="Which attempt (default: the latest)."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing as the job writes, across attempts, until it ends."),
    raw: bool = typer.Option(False, "--raw", help="Print the output as the job wrote it, escape sequences included (default: control characters escaped, a carriage return as a new line)."),
    server: Optional[str] = opt.Server,
    token: Optional[str] = opt.Token,
    token_file: Optional[Path] = opt.TokenFile,
) -> None:
    """Print a job's output (stdout and stderr) of one attempt; then, on stderr, how much of its
    step time the job waited for data, when it times its waits. Control characters in the output
    are escaped (``\\x1b[...``), so a job cannot drive the terminal of whoever reads its log; --raw
    prints it as written."""
    import sys

    from apportion.serve.client import ClientError

    client = client_for(server, token, token_file)
    shown = None  # the attempt whose output was printed last
    held = ""  # a carriage return ending a chunk: a line break of its own, or half of one ending in the next
    try:
        for number, text in client.log_chunks(job_id, attempt, follow):
            if shown is not None and number != shown:
                if held:  # the last attempt's output ended in a carriage return: its line ends before the next
                    sys.stdout.write("\n")
                    held = ""
                errors.print(f"--- attempt {printable(number, lines=False)} ---", highlight=False, markup=False)
            shown = number
            if not raw:
                text, held = held + text, ""
                if text.endswith("\r"):
                    text, held = text[:-1], "\r"
                text = log_text(text)
            sys.stdout.write(text)
            sys.stdout.flush()
        if held:
            sys.stdout.write("\n")
        summary = stall_summary(client.job(job_id))
    except ClientError as exc:
        raise fail(str(exc)) from None
    if summary:
        errors.print(f"--- {printable(summary, lines=False)} ---", highlight=False, markup=False)


def stall_summary(job: dict) -> str:
    """``waited for data 23% of its step time (fetch 15%, pre-processing 8%) ...``; "" when the job
    has never said."""
    if job.get("data_stall") is None:
        return ""
    parts = ""
    if job.get("fetch_stall") is not None and job.get("preprocess_stall") is not None:
        parts = f" (fetch {stall_cell(job['fetch_stall'])}, pre-processing {stall_cell(job['preprocess_stall'])})"
    return (f"job {_text(job['id'])} waited for data {stall_cell(job['data_stall'])} of its step time{parts},"
            " as of its latest progress report")


SLOTS_LISTED = 16  # `apportion status` names each slot's holder up to this many slots; beyond, counts per type


def status(
    as_json: bool = opt.json_option("the status"),
    list_slots: bool = typer.Option(False, "--slots", help=f"Name each slot and its job, however many (default: up to {SLOTS_LISTED}; beyond, the slots of each type, busy and idle)."),
    server: Optional[str] = opt.Server,
    token: Optional[str] = opt.Token,
    token_file: Optional[Path] = opt.TokenFile,
) -> None:
    """The server: policy, round, slots and who holds them, jobs by status."""
    info = call(client_for(server, token, token_file).status)
    if as_json:
        print_json(info)
        return
    console.print(f"[bold]{escape(info['server'])}[/]: policy {escape(info['policy'])}, round {info['round']} "
                  f"(every {info['round_s']:g} s, next decided in {info['next_round_in_s']:.0f} s)", highlight=False)
    console.print(f"state: {escape(info['state_dir'])} (server pid {info['pid']})", highlight=False, soft_wrap=True)
    full = info.get("out_of_space")
    if full:  # writes answer 507 until there is space again
        free = "free space unknown" if full["free_bytes"] is None else f"{full['free_bytes']} bytes free"
        console.print(f"[bold red]out of space[/] since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(full['since']))}"
                      f" ({free}): submissions and cancels are refused until there is space", highlight=False)
    if list_slots or len(info["slots"]) <= SLOTS_LISTED:
        slots = ", ".join(f"{s['id']}({s['gpu_type']})={_slot_holder(s)}" for s in info["slots"])
    else:
        slots = _slots_per_type(info["slots"]) + " (--slots names each)"
    console.print(f"slots: {escape(slots)}", highlight=False)
    cores = info.get("cores")
    if cores and cores["split"] != "off":  # a server from before CPU cores were split has none
        held = ", ".join(f"job {job}={','.join(map(str, c['cpus']))} ({c['share']:g})" for job, c in cores["jobs"].items())
        console.print(escape(f"cores: {cores['node_cores']}, {cores['split']} split, held by {cores['held_by'] or '?'}"
                             + (f": {held}" if held else "")), highlight=False, soft_wrap=True)
    node = info.get("node")
    if node and (node["cpus_asked"] or node["memory_gb_asked"]):  # placement counts them only when jobs ask
        of_cores = f" of {node['cores']}" if node["cores"] else ""
        of_memory = f" of {node['memory_gib']:g}" if node["memory_gib"] else ""
        console.print(escape(f"asked by the jobs on its slots: {node['cpus_asked']:g}{of_cores} cores, "
                             f"{node['memory_gb_asked']:g}{of_memory} GiB"), highlight=False)
    console.print("jobs: " + escape(", ".join(f"{n} {k}" for k, n in info["counts"].items())), highlight=False)
    if info.get("hangs"):
        console.print(f"hung attempts stopped: {info['hangs']}", highlight=False)
    if info.get("rented"):
        console.print(escape(_rented_line(info["rented"])), highlight=False, soft_wrap=True)
    for budget in info.get("budgets") or ():  # a server from before budgets has none
        console.print(escape(_budget_line(budget)), highlight=False, soft_wrap=True)
    if info["round_ms"]["median"] is not None:
        console.print(f"round overhead: median {info['round_ms']['median']:.1f} ms over {info['round_ms']['rounds_this_run']} rounds",
                      highlight=False)


def _budget_line(b: dict) -> str:
    """``budget of alice: 3 of 50,000 active jobs, 0.1 of 1,000 MB stored, …; 20 submits/s (200 at once)``."""
    return (f"budget of {b['user']}: {b['active_jobs']:,} of {b['max_active_jobs']:,} active jobs, "
            f"{b['stored_mb']:,.1f} of {b['max_stored_mb']:,g} MB stored, {b['demand_rows']:,} of "
            f"{b['max_demand_rows']:,} demand rows, {b['after_edges']:,} of {b['max_after_edges']:,} after edges; "
            f"{b['submit_rate']:g} submits/s ({b['submit_burst']:,} at once)")


def _rented_line(rented: dict) -> str:
    """``rented (spot-fallback): held aws/us-east-1/p3.2xlarge/spot ×1; $1.23 (aws/…: $1.23)``."""
    held = ", ".join(f"{label} ×{n}" for label, n in rented["held"].items()) or "nothing"
    spent = ", ".join(f"{label}: ${usd:.2f}" for label, usd in rented["usd"].items())
    return f"rented ({rented['provisioning']}): held {held}; ${rented['usd_total']:.2f} spent" + (f" ({spent})" if spent else "")
