"""``apportion submit`` (a job file, flags and a command after ``--``, or both) and ``apportion wait``.

A flag sets the job-file field of the same meaning (``submit_flags.FLAGS``), over the file's
when there is one; the job is checked as a job file is, and an error names the flag that gave
the field, or the file's line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from apportion.cli import options as opt
from apportion.cli.jobs import claimed_user, client_for
from apportion.cli.output import console, errors, escape, fail, print_json
from apportion.cli.submit_flags import EXAMPLE, FlagError, default_name, flag_of, given_command, given_fields
from apportion.stdio import stdout_to_stderr

TIMED_OUT = 124  # `apportion wait`'s exit status when its --timeout passed first, as timeout(1)'s


def submit(
    ctx: typer.Context,
    job_file: Optional[Path] = typer.Argument(None, metavar="JOB_FILE", show_default=False,
                                              help="A job YAML (docs/serve.md); without one, give --steps and the "
                                                   "command after --."),
    wait: bool = typer.Option(False, "--wait", help="Then wait until the job ends: exit 0 if it completed, 1 if it "
                                                    "failed or was cancelled."),
    user: Optional[str] = opt.User,
    server: Optional[str] = opt.Server,
    token: Optional[str] = opt.Token,
    token_file: Optional[Path] = opt.TokenFile,
    as_json: bool = opt.json_option('{"id": ..., "user": ...}'),
) -> None:
    """Submit a job: a job file, or flags and the command after -- (apportion submit --gpus 2 --steps 1000 --
    python train.py --lr 3e-4; its words run as they are, without a shell), or a job file and flags that override
    its fields. A job that does not fit is rejected here, naming the flag or the file's line."""
    from apportion.serve.client import ClientError

    if ctx.args:
        raise fail(f"one job file at most, then {' '.join(ctx.args)[:80]!r}: a command goes after --, as in {EXAMPLE}")
    fields = _fields(ctx)
    spec = _spec(job_file, fields)
    client = client_for(server, token, token_file)
    try:
        with stdout_to_stderr():
            answer = client.submit(spec, user or spec.user or claimed_user(client, None))
    except ClientError as exc:
        if exc.field:  # the server's own checks (what fits on it): name the flag, or the file's line
            raise fail(_refusal(exc.field, exc.message, job_file, fields)) from None
        raise fail(str(exc)) from None
    if as_json:
        print_json({"id": answer["id"], "user": answer["user"], **({"tasks": answer["tasks"]} if spec.array else {})})
    elif spec.array:
        first = int(answer["id"]) + 1  # its tasks take the ids after the array's
        console.print(f"submitted array {escape(answer['id'])}: {escape(spec.name)}[{escape(spec.array)}] "
                      f"({escape(answer['user'])}, {answer['tasks']} tasks: jobs {first}-{first + answer['tasks'] - 1}, "
                      f"{spec.gpus} slot(s) and {spec.total_steps} steps each)", highlight=False)
    else:
        console.print(f"submitted job {escape(answer['id'])}: {escape(spec.name)} ({escape(answer['user'])}, "
                      f"{spec.gpus} slot(s), {spec.total_steps} steps)", highlight=False)
    if wait:
        _wait_and_exit(client, answer["id"], None, quiet=as_json)


def wait(
    job_id: str = typer.Argument(..., metavar="JOB_ID", help="The job's id (see `apportion queue`)."),
    timeout: Optional[float] = typer.Option(None, "--timeout", min=0,
                                            help=f"Give up after this many seconds (exit {TIMED_OUT}); default: wait "
                                                 "as long as it takes."),
    server: Optional[str] = opt.Server,
    token: Optional[str] = opt.Token,
    token_file: Optional[Path] = opt.TokenFile,
    as_json: bool = opt.json_option("the job as it ended"),
) -> None:
    """Wait until a job ends, then say how: exit 0 if it completed, 1 if it failed or was cancelled."""
    _wait_and_exit(client_for(server, token, token_file), job_id, timeout, quiet=False, as_json=as_json)


def _wait_and_exit(client, job_id: str, timeout: float | None, quiet: bool, as_json: bool = False) -> None:
    """Wait for ``job_id`` to end; print how (unless ``quiet``) and exit 0 if it completed, else 1."""
    from apportion.serve.client import ClientError, WaitTimedOut

    if timeout is not None and not timeout >= 0:
        raise fail(f"--timeout: must be a number of seconds >= 0, got {timeout}")
    try:
        with stdout_to_stderr():
            job = client.wait(job_id, timeout)
    except WaitTimedOut as exc:
        errors.print(escape(str(exc)), highlight=False, soft_wrap=True)
        raise typer.Exit(code=TIMED_OUT) from None
    except ClientError as exc:
        raise fail(str(exc)) from None
    if as_json:
        print_json(job)
    elif not quiet:
        reason = f": {job['reason']}" if job["reason"] and job["status"] != "completed" else ""
        console.print(f"job {escape(job['id'])} ({escape(job['name'])}) {escape(job['status'])}{escape(reason)}",
                      highlight=False, soft_wrap=True)
    raise typer.Exit(code=0 if job["status"] == "completed" else 1)


def _fields(ctx: typer.Context) -> dict:
    """The job fields the flags and the command after ``--`` give."""
    try:
        fields = given_fields(ctx)
    except FlagError as exc:
        raise fail(str(exc)) from None
    command = given_command(ctx)
    if command is not None:
        if not command:
            raise fail(f"nothing after --: give the command to run, as in {EXAMPLE}")
        fields["command"] = command
    return fields


def _spec(job_file: Path | None, fields: dict):
    """The checked job: the file with the flags' fields over it, or the flags' fields alone."""
    from apportion.core.errors import InputError
    from apportion.serve.jobs.jobspec import load_job_file, spec_from_fields

    if job_file is None:
        missing = [what for what, field in (("--steps N", "total_steps"), ("the command after --", "command"))
                   if field not in fields]
        if missing:
            raise fail(f"a job without a job file needs {' and '.join(missing)}, as in {EXAMPLE}")
        fields.setdefault("name", default_name(fields["command"]))
    elif job_file.suffix in (".py", ".sh") and "command" not in fields:
        raise fail(f"{job_file} is a script, not a job file: put the command after --, as in "
                   f"apportion submit --steps 1000 -- python {job_file}")
    try:
        if job_file is None:
            return spec_from_fields(fields, "command line")
        return load_job_file(job_file, overrides=fields)
    except InputError as exc:
        if exc.field and flag_of(exc.field) and exc.field.split(".")[0].split("[")[0] in fields:
            raise fail(f"{flag_of(exc.field)}: {exc.message}") from None
        raise fail(str(exc)) from None


def _refusal(field: str, message: str, job_file: Path | None, fields: dict) -> str:
    """The server's refusal of ``field``, told as the flag that gave it, or at the job file's line."""
    from apportion.core.errors import InputError
    from apportion.serve.jobs.jobspec import field_line

    if flag_of(field) and field.split(".")[0].split("[")[0] in fields:
        return f"{flag_of(field)}: {message}"
    if job_file is not None:
        return str(InputError(str(job_file), message, line=field_line(job_file, field), field=field))
    return str(InputError("command line", message, field=field))
