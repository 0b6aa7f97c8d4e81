"""A job array: one job file submitted as one job per index, as Slurm's ``--array``.

A job file's ``array:`` lists the indices: ``0-15``, ``0-15:2`` (every second), ``1,3,5-7``,
optionally ending ``%N``: at most N of its tasks started and not ended at once (admission holds
the others back: ``mechanism/admission.py``'s ArrayLimitStage). Each task is
a job of its own (its own id, attempts and checkpoints) named ``NAME[INDEX]``; the array has an
id of its own, taken from the jobs' ids and held by no job, so that ``after``, ``cancel`` and
``queue --array`` name the whole array and each task keeps its own id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from apportion.core.errors import InputError
from apportion.serve.base.bounds import MAX_ARRAY_INDEX, MAX_ARRAY_TASKS, MAX_ARRAY_TEXT, MAX_NAME, check_count, check_text, clip

_PIECE = re.compile(r"([0-9]{1,12})(?:-([0-9]{1,12})(?::([0-9]{1,12}))?)?")  # digits enough to pass any bound
_FORMS = "indices such as 0-15, 0-15:2 or 1,3,5-7, optionally ending %N (at most N at once)"


@dataclass(frozen=True)
class ArraySpec:
    """The indices of an array's tasks, ascending, and how many may be under way at once (None: all)."""

    indices: tuple[int, ...]
    most_running: int | None = None

    def __len__(self) -> int:
        return len(self.indices)


def array_text(value: object, source: str) -> str | None:
    """A job file's ``array`` as checked text (a whole number is one index; a list, its items
    joined by commas); InputError naming ``array`` when it is malformed or names too many tasks."""
    read = read_array(value, source)
    return None if read is None else read[0]


def read_array(value: object, source: str) -> tuple[str, ArraySpec] | None:
    """A job file's ``array`` read once: its checked text (``array_text``) and the indices it names
    (``parse_array``); None when it has none. What a submit checks and stores comes from this one read."""
    if value is None:
        return None
    if isinstance(value, list):
        check_count(value, "array", source, most=MAX_ARRAY_TASKS, what="tasks", verb="name")
        for i, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, (int, str)):
                raise InputError(source, f"must be an index or a range such as 5-7, got {clip(repr(item), 40)}",
                                 field=f"array[{i}]")
        value = ",".join(str(item) for item in value)
    elif isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise InputError(source, f"must be {_FORMS}, got {clip(repr(value), 40)}", field="array")
    text = "".join(check_text(value, "array", source, most=MAX_ARRAY_TEXT).split())
    return text, parse_array(text, source)


def parse_array(text: str, source: str) -> ArraySpec:
    """The indices ``text`` names, and its %N. InputError naming ``array`` when it cannot be read,
    a range runs backwards, an index is past MAX_ARRAY_INDEX, or the array would have more than
    MAX_ARRAY_TASKS tasks: counted before any index is listed, so a huge range costs nothing."""
    body, percent, limit = text.partition("%")
    if percent and (not re.fullmatch(r"[0-9]{1,9}", limit) or not 1 <= int(limit) <= MAX_ARRAY_TASKS):
        raise InputError(source, f"%N (at most N tasks at once) must be a whole number from 1 to {MAX_ARRAY_TASKS:,},"
                         f" got {clip(limit, 20)!r}", field="array")
    ranges: list[range] = []
    for piece in body.split(","):
        match = _PIECE.fullmatch(piece)
        if match is None:
            raise InputError(source, f"must be {_FORMS}; {clip(piece, 30)!r} is none of those", field="array")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        step = int(match.group(3)) if match.group(3) is not None else 1
        if last > MAX_ARRAY_INDEX or first > MAX_ARRAY_INDEX:
            raise InputError(source, f"indices run from 0 to {MAX_ARRAY_INDEX:,}; {clip(piece, 30)!r} goes past",
                             field="array")
        if last < first:
            raise InputError(source, f"the range {piece} runs backwards (write {last}-{first})", field="array")
        if step < 1:
            raise InputError(source, f"the step of {piece} must be at least 1", field="array")
        ranges.append(range(first, last + 1, step))
        if sum(len(r) for r in ranges) > MAX_ARRAY_TASKS:
            raise InputError(source, f"names more than {MAX_ARRAY_TASKS:,} tasks (the most one array may have)",
                             field="array")
    return ArraySpec(tuple(sorted({i for r in ranges for i in r})), int(limit) if percent else None)


def task_spec(spec: dict, index: int) -> dict:
    """Task ``index``'s stored spec: the array's, named ``NAME[INDEX]``, checkpointing in a directory of
    its own (``INDEX`` under the array's ``checkpoint_dir`` where one is given; else the server's
    per-job default, which is its own already)."""
    task = {**spec, "name": task_name(spec["name"], index)}
    if spec.get("checkpoint_dir"):
        task["checkpoint_dir"] = str(Path(spec["checkpoint_dir"]) / str(index))
    return task


def task_row_spec(task: dict) -> dict:
    """What a task's own row keeps of its spec (task_spec's): only the spec's numbers and flags, which
    queries over the jobs table read (``time_limit``, ``hung_after_s``, ``cpus``), a few bytes whatever
    the request. Everything else (env, command, claims, its name and checkpoint directory, which its
    index makes) comes from its array's spec, stored once (``StateStore.insert_array``): ``composed_spec``."""
    return {key: value for key, value in task.items() if isinstance(value, (bool, int, float))}


def composed_spec(array_spec: dict, row_spec: dict, index: int) -> dict:
    """Task ``index``'s whole spec from its array's (stored once) and what its own row keeps: task_spec's.
    The values the tasks share are the array's own objects, not copies: read them, never change them."""
    return {**task_spec(array_spec, index), **row_spec}


def most_running(text: str) -> int | None:
    """The N of a stored array's ``%N`` (None: no limit)."""
    _, percent, limit = text.partition("%")
    return int(limit) if percent and re.fullmatch(r"[0-9]{1,9}", limit) else None


def task_name(name: str, index: int) -> str:
    return f"{name}[{index}]"


def array_environment(array_id: int, index: int, count: int) -> dict[str, str]:
    """What a task's attempts are told of its array (docs/serve-contract.md)."""
    return {"APPORTION_ARRAY_ID": str(array_id), "APPORTION_ARRAY_INDEX": str(index),
            "APPORTION_ARRAY_COUNT": str(count)}


def check_task_names(name: str, array: ArraySpec, source: str) -> None:
    """InputError naming ``name`` when ``NAME[INDEX]`` would be past MAX_NAME characters for some task."""
    longest = len(task_name(name, array.indices[-1]))
    if longest > MAX_NAME:
        raise InputError(source, f"must leave room for its tasks' [INDEX]: {name[:20]!r}… with "
                         f"[{array.indices[-1]}] is {longest:,} characters, more than {MAX_NAME}", field="name")
