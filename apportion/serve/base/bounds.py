"""Bounds on everything a request to the server may carry, and the checks that enforce them.

Every number and every string that reaches the server from outside (a job file, a request
body, a job's progress report) has a bound here, far beyond any real use and low enough that
it fits the state file (SQLite's 64-bit integers), a policy's LP and a terminal line. A value
past its bound is a typo, a unit mistake or an attack: it is refused with an InputError naming
the field, before anything is stored. docs/serve.md lists the bounds.
"""

from __future__ import annotations

import math
import unicodedata
from typing import Collection, Sequence

from apportion.core.errors import InputError
from apportion.core.limits import MAX_GPUS, MAX_STEPS

__all__ = ["MAX_GPUS", "MAX_STEPS"]

MAX_NAME = 256  # characters of a name, user, queue, kind, GPU type, environment variable name
MAX_PATH = 4096  # characters of workdir and checkpoint_dir (Linux's PATH_MAX)
MAX_URL = 2048  # characters of a job's notify URL
MAX_COMMAND = 16 * 1024  # characters of a command: the shell line, or its arguments together
MAX_ARGS = 1024  # arguments of a command given as a list
MAX_ENV = 256  # environment variables of one job
MAX_ENV_VALUE = 16 * 1024  # characters of one environment variable's value
MAX_GPU_TYPES = 64  # entries of gpu_types
MAX_CPUS = 65_536  # CPU cores a job may ask for
MAX_MEMORY_GB = 1_048_576.0  # host memory a job may ask for, GiB
MAX_AFTER = 128  # jobs a job may wait for (its `after`); their ids fit in the few dozen names of MAX_JOB_CHARS
MAX_ARRAY_TASKS = 10_000  # tasks of one job array: one submit stores this many jobs at most
MAX_ARRAY_INDEX = 10**9  # an array task's index (APPORTION_ARRAY_INDEX)
MAX_ARRAY_TEXT = 16 * 1024  # characters of a job file's `array` (a list of indices included)
MAX_PRIORITY = 1000.0  # a job's weight; more would only make a policy's LP badly scaled
MAX_ATTEMPT = 2**31  # an attempt number in a lease or progress call
MAX_JOB_ID = 2**63 - 1  # the largest id the state file can hold
MAX_STEPS_PER_S = 1e6  # a job's reported speed: far above any training step rate
MAX_LOG_OFFSET = 2**62  # a byte offset into a job's log
MAX_BATCH = 2**31  # examples in an elastic job's batch
MAX_NOISE_SCALE = 1e15  # a reported gradient noise scale, in examples
MAX_STEP_S = 1e6  # a reported time of one step or of its synchronisation, in seconds
MIN_HUNG_AFTER_S = 10.0  # a job's hung_after_s: less and a lease call slowed by a busy server would look hung
MAX_RETRY_BACKOFF_S = 3600.0  # a crash's first retry waits at most an hour (--retry-backoff-s)
MAX_HUNG_AFTER_S = 7 * 86400.0  # a week of silence: beyond it a job could hold its slots doing nothing for good
MAX_TIME_LIMIT_S = 366 * 86400.0  # a job's time_limit: a year of running time
# characters of the largest valid job: its environment, command, paths, GPU types and a few dozen names
MAX_JOB_CHARS = (MAX_ENV * (MAX_NAME + MAX_ENV_VALUE) + MAX_COMMAND + 2 * MAX_PATH + MAX_URL
                 + (MAX_GPU_TYPES + 32) * MAX_NAME)
# bytes of a request body (about 34 MB): that job with every character escaped as JSON's \uXXXX (6
# bytes), with margin; a longer body is refused (413) before it is read (edge.py)
MAX_BODY = 8 * MAX_JOB_CHARS
MAX_IDEMPOTENCY_KEY = 128  # characters of a submit's Idempotency-Key header
# Unicode categories a name may not hold: control and format characters, lone surrogates, line and
# paragraph separators (api_schema.py's patterns are made of the same)
REFUSED_IN_LINE = ("Cc", "Cf", "Cs", "Zl", "Zp")


def check_line(value: str, field: str, source: str, *, most: int = MAX_NAME) -> str:
    """``value`` if it is one printable line of at most ``most`` characters; else InputError.

    Names, users and queues are printed in tables and log lines: a control character (a new
    line, an escape sequence) would forge or break those lines.
    """
    if len(value) > most:
        raise InputError(source, f"must be at most {most:,} characters, got {len(value):,}", field=field)
    bad = next((c for c in value if unicodedata.category(c) in REFUSED_IN_LINE), None)
    if bad is not None:
        raise InputError(source, f"must be one line without control characters, got {bad!r}", field=field)
    return value


def check_text(value: str, field: str, source: str, *, most: int) -> str:
    """``value`` if it has at most ``most`` characters and no NUL (which no process argument,
    path or environment variable can hold); else InputError."""
    if len(value) > most:
        raise InputError(source, f"must be at most {most:,} characters, got {len(value):,}", field=field)
    if "\0" in value:
        raise InputError(source, "must not contain a NUL character", field=field)
    if any("\ud800" <= c <= "\udfff" for c in value):
        raise InputError(source, "must be valid Unicode (it holds a lone surrogate)", field=field)
    return value


def check_int(value: object, field: str, source: str, *, least: int, most: int) -> int:
    """``value`` as an int if it is a whole number from ``least`` to ``most`` (a whole float such as
    ``1e3`` counts); else InputError saying what was expected and what came."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(source, f"must be a whole number from {least:,} to {most:,}, got {_shown(value)}", field=field)
    if not least <= value <= most:
        raise InputError(source, f"must be a whole number from {least:,} to {most:,}, got {_shown(value)}", field=field)
    return value


def check_number(value: object, field: str, source: str, *, least: float, most: float) -> float:
    """``value`` as a float if it is a finite number from ``least`` to ``most``; else InputError."""
    expected = f"a finite number >= {least:g}" if most == math.inf else f"a number from {least:g} to {most:g}"
    try:
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    except OverflowError:  # an integer beyond any float
        number = math.nan
    if not (math.isfinite(number) and least <= number <= most):
        raise InputError(source, f"must be {expected}, got {_shown(value)}", field=field)
    return number


def _shown(value: object) -> str:
    """A value in an error message: short, and with its type when it is not a number."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**15:
        return f"{float(value):.3g}" if value.bit_length() < 1000 else f"a number of {value.bit_length():,} bits"
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    if isinstance(value, int) and not isinstance(value, bool):
        return text
    return f"{text} ({_KINDS.get(type(value), type(value).__name__)})"


_KINDS = {str: "a string", bool: "true/false", list: "a list", dict: "a mapping"}


def check_fields(value: object, known: Sequence[str], source: str, *, shape: str, field: str = "") -> dict:
    """``value`` if it is a mapping holding only ``known`` keys; else InputError naming ``field``
    (saying ``shape``, what it should be) or its first unknown key (``field.key``). Every spec file's
    mapping goes through here: the job file and each of its parts."""
    if not isinstance(value, dict):
        raise InputError(source, shape, field=field or None)
    unknown = sorted(str(k) for k in value if k not in known)
    if unknown:
        name = clip(unknown[0])
        raise InputError(source, f"unknown field (known: {', '.join(known)})", field=f"{field}.{name}" if field else name)
    return value


def check_count(items: Collection, field: str, source: str, *, most: int, what: str, verb: str = "have") -> None:
    """InputError naming ``field`` when ``items`` (a list or a mapping) holds more than ``most``:
    "must VERB at most MOST WHAT, got N", before any item is looked at."""
    if len(items) > most:
        raise InputError(source, f"must {verb} at most {most:,} {what}, got {len(items):,}", field=field)


def clip(text: str, most: int = 60) -> str:
    """``text`` cut to ``most`` characters for a one-line error message (a field name can be
    anything), each character that is not printable (a new line, a lone surrogate) as its escape."""
    text = text if len(text) <= most else text[: most - 1] + "…"
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def json_object(body: object, source: str) -> dict:
    """A request's ``body`` if it is a JSON object (a mapping); else InputError saying what it is."""
    if isinstance(body, dict):
        return body
    if body is None:
        raise InputError(source, "the body must be a JSON object")
    if isinstance(body, bytes):
        raise InputError(source, "the body must be a JSON object, sent as Content-Type: application/json")
    raise InputError(source, f"the body must be a JSON object, got {type(body).__name__}")
