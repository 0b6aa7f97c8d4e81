"""The job fields ``apportion submit`` takes as flags: one table from flag to job-file field.

Each flag's text is turned into the value a job file would hold (a number, a list, a mapping)
and nothing more: the job file's own checks (``serve/jobs/jobspec.py``) judge it, and an error they
raise about a field a flag gave is told as that flag's (``--gpus: must be ...``). A new field is
one row of :data:`FLAGS`.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import typer

from apportion.cli.help import HelpCommand
from apportion.cli.options import params_of

PANEL = "Job fields (override a job file's)"
EXAMPLE = "apportion submit --steps 1000 -- python train.py"
_PREFIX = "job_field__"  # a flag's parameter name: never one of the command's own
_GIVEN = "apportion.job_fields"  # ctx.meta key: the fields the flags gave
_COMMAND = "apportion.job_command"  # ctx.meta key: the words after --, or None when there was no --


@dataclass(frozen=True)
class Flag:
    """``flag`` sets job-file field ``field``; ``read`` says how its text becomes the field's value:
    ``text`` as given, ``number`` an int or float when it reads as one, ``path`` made absolute from
    here, ``list`` the items of every use (each may be ``A,B``), ``env`` ``NAME=VALUE`` of every use,
    ``privacy`` ``BLOCK,BLOCK:EPSILON[:DELTA]`` as the ``privacy`` mapping."""

    flag: str
    field: str
    read: str
    metavar: str
    help: str

    @property
    def repeats(self) -> bool:
        return self.read in ("list", "env")


FLAGS = (
    Flag("--name", "name", "text", "NAME", "The job's name (default: the script's, e.g. train for python train.py)."),
    Flag("--steps", "total_steps", "number", "N", "Steps the job trains for (total_steps)."),
    Flag("--gpus", "gpus", "number", "N", "GPUs (or CPU slots) it runs on (default 1)."),
    Flag("--gpu-type", "gpu_types", "list", "TYPE", "A GPU type it may run on (repeat, or TYPE,TYPE; default any)."),
    Flag("--priority", "priority", "number", "WEIGHT", "Its weight, 0 (best effort) to 1000 (default 1)."),
    Flag("--queue", "queue", "text", "QUEUE", "Its queue."),
    Flag("--env", "env", "env", "NAME=VALUE", "An environment variable for it (repeat for more)."),
    Flag("--after", "after", "list", "ID,ID", "Jobs that must complete before it starts."),
    Flag("--notify", "notify", "text", "URL", "An http(s) URL POSTed a JSON summary when it ends."),
    Flag("--array", "array", "text", "INDICES", "A job array: one job per index (0-15, 0-15:2, 1,3,5-7; %4: 4 at once)."),
    Flag("--privacy", "privacy", "privacy", "BLOCKS:EPS[:DELTA]", "Privacy budget it claims of each block (mon,tue:0.5:1e-7)."),
    Flag("--time-limit", "time_limit", "text", "TIME", "Running time over all its attempts, then it fails (3600, 90m, 12h, 2d)."),
    Flag("--estimated-duration", "estimated_duration_s", "text", "TIME", "Its own estimate of its wall time on the "
         "fastest type it may use (3600, 90m, 12h): qssf ranks by it, corrected by how wrong yours were."),
    Flag("--workdir", "workdir", "path", "DIR", "Where the command runs (default: this directory)."),
    Flag("--checkpoint-dir", "checkpoint_dir", "path", "DIR", "Where its checkpoints go (default: the server's state directory)."),
    Flag("--checkpoint-every", "checkpoint_every", "text", "WHEN", "Periodic checkpoints: auto, auto:SECONDS, off or SECONDS."),
    Flag("--kind", "kind", "text", "KIND", "Its throughput kind (default: its name)."),
)
BY_FIELD = {f.field: f for f in FLAGS}
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


class FlagError(ValueError):
    """A flag's text that cannot be a field's value at all (``--env`` without ``=``)."""


class SubmitCommand(HelpCommand):
    """``apportion submit``: every row of :data:`FLAGS` is one of its options, and what follows ``--``
    is the job's command; read them with :func:`given_fields` and :func:`given_command`."""

    _field_params: list | None = None
    allow_extra_args = True  # words past the job file are told to go after -- (submit.py), not refused by click

    def get_params(self, ctx):
        if self._field_params is None:
            self._field_params = _field_params()
            self.params.extend(self._field_params)
        return super().get_params(ctx)

    def collect_usage_pieces(self, ctx) -> list[str]:
        return [self.options_metavar, "[JOB_FILE]", "[-- COMMAND...]"]

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        if "--" in args:
            cut = args.index("--")
            ctx.meta[_COMMAND] = args[cut + 1:]
            args = args[:cut]
        else:
            ctx.meta[_COMMAND] = None
        return super().parse_args(ctx, args)

    def invoke(self, ctx):
        given = {}
        for param in self._field_params or ():
            value = ctx.params.pop(param.name)
            if value is not None and value != ():
                given[param.name.removeprefix(_PREFIX)] = value
        ctx.meta[_GIVEN] = given
        return super().invoke(ctx)


def given_fields(ctx: typer.Context) -> dict:
    """The job fields the flags gave, as a job file would hold them; FlagError for a flag whose text
    cannot be one."""
    fields = {}
    for field, value in ctx.meta.get(_GIVEN, {}).items():
        flag = BY_FIELD[field]
        fields[field] = _READ[flag.read](flag, value)
    return fields


def given_command(ctx: typer.Context) -> list[str] | None:
    """The words after ``--`` (None when there was no ``--``)."""
    return ctx.meta.get(_COMMAND)


def flag_of(field: str) -> str | None:
    """How a user names job field ``field`` (``env.LR`` -> ``--env LR``) when a flag gave it; None otherwise."""
    top = field.split(".")[0].split("[")[0]
    if top == "command":
        return "the command after --"
    flag = BY_FIELD.get(top)
    if flag is None:
        return None
    key = field[len(top) + 1:] if field.startswith(f"{top}.") else ""
    return f"{flag.flag} {key}" if key else flag.flag


def default_name(command: list[str]) -> str:
    """A job's name from its command, as Slurm names a ``--wrap`` job: the script it runs
    (``python train.py`` -> ``train``, ``python -m pkg.train`` -> ``pkg.train``), else the program."""
    for i, word in enumerate(command[1:], start=1):
        if word == "-m" and i + 1 < len(command):
            return command[i + 1]
        if not word.startswith("-") and Path(word).suffix:
            return Path(word).stem or word
    return Path(command[0]).name or command[0]


def _number(flag: Flag, text: str) -> int | float | str:
    """An int or a float when ``text`` reads as one; else the text, for the field's check to name."""
    text = text.strip()
    if _NUMBER.fullmatch(text):
        number = float(text)
        return int(text) if text.lstrip("+-").isdigit() else number
    return text


def _list(flag: Flag, values: list[str]) -> list[str]:
    return [item.strip() for value in values for item in value.split(",")]


def _env(flag: Flag, values: list[str]) -> dict[str, str]:
    env = {}
    for value in values:
        name, equals, text = value.partition("=")
        if not equals:
            raise FlagError(f"{flag.flag}: must be NAME=VALUE, got {value[:80]!r}")
        env[name] = text
    return env


def _privacy(flag: Flag, text: str) -> dict:
    """``mon,tue:0.5:1e-7`` as ``{blocks: [mon, tue], epsilon: 0.5, delta: 1e-7}`` (ε-δ; a Rényi claim
    needs a job file's ``rdp``)."""
    blocks, _, amounts = text.partition(":")
    claim: dict = {"blocks": [b.strip() for b in blocks.split(",") if b.strip()]}
    for key, value in zip(("epsilon", "delta"), amounts.split(":") if amounts else ()):
        claim[key] = _number(flag, value)
    return claim


_READ = {
    "text": lambda flag, text: text,
    "number": _number,
    "path": lambda flag, text: str(Path(text).expanduser().absolute()),
    "list": _list,
    "env": _env,
    "privacy": _privacy,
}


def _field_params() -> list:
    """The rows of FLAGS as typer options (text, or a list of texts for a flag that repeats)."""
    parameters = [
        inspect.Parameter(_PREFIX + f.field, inspect.Parameter.KEYWORD_ONLY,
                          annotation=Optional[List[str]] if f.repeats else Optional[str],
                          default=typer.Option(None, f.flag, metavar=f.metavar, help=f.help, show_default=False,
                                               rich_help_panel=PANEL))
        for f in FLAGS
    ]
    return params_of(parameters)
