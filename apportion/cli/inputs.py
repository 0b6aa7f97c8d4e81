"""The shared options turned into the library's inputs, with a one-line error (exit 2) for bad ones.

The checks themselves are ``apportion.arguments``'s, which the Python API calls too; here an
``ArgumentError`` becomes ``error: ...`` naming the flags.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from contextlib import contextmanager
from typing import TYPE_CHECKING, Optional, TypeVar

from apportion.cli.output import fail

if TYPE_CHECKING:
    from apportion.core.queues import QueueConfig

T = TypeVar("T")


@contextmanager
def as_flags():
    """An ArgumentError raised inside becomes the command's one-line error, the arguments named as flags."""
    from apportion.arguments import ArgumentError, flag

    try:
        yield
    except ArgumentError as exc:
        raise fail(exc.spelled(flag)) from None


def checked(call: Callable[..., T], *args, **kwargs) -> T:
    """``call(*args, **kwargs)``, an ArgumentError a one-line error naming the flags."""
    with as_flags():
        return call(*args, **kwargs)


def keywords_of(call: Callable, given: dict) -> dict:
    """The options in ``given`` (a command's parameters, by name) that ``call`` (``apportion.arguments``'
    ``replay_arguments`` or ``sweep_arguments``) takes by keyword: each command passes what it was given
    by name, without listing every option again."""
    taken = {p.name for p in inspect.signature(call).parameters.values() if p.kind is p.KEYWORD_ONLY}
    return {name: value for name, value in given.items() if name in taken}


def load_queues(path: Optional[str]) -> Optional[QueueConfig]:
    """The --queues file, or None without one."""
    from apportion.arguments import load_queues as read

    return checked(read, path)


def market_notes(replay) -> None:
    """What the user should know about how a rented replay's market was read, on stderr."""
    from apportion.cli.output import errors, escape

    if replay.market is not None:
        for note in replay.market.notes:
            errors.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)


def preemptions_line(result) -> str | None:
    """Where a rented run's spot preemptions came from, said under its results."""
    if result.rented is None:
        return None
    return f"spot preemptions: {result.rented.market.preemptions_from}"
