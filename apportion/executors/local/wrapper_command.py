"""How a wrapper shows in its command line, by which ``scan`` and the spare pool find it in ``/proc``.

A wrapper runs as ``python -m MARKER --option value … [-- COMMAND]``. Wrappers started by an
earlier version of apportion named the module by its earlier path; they are still recognised, so
that a server upgraded while its jobs run adopts them instead of killing them as lost.
"""

from __future__ import annotations

MARKER = "apportion.executors.local.wrapper"
EARLIER_MARKERS = ("apportion.executors.wrapper",)


def options_start(argv: list[str]) -> int | None:
    """Where a wrapper's options begin in its command line; None when it is no wrapper's."""
    marker = next((m for m in (MARKER, *EARLIER_MARKERS) if m in argv), None)
    return None if marker is None else argv.index(marker) + 1
