"""A table as rich prints it into a pipe (``box.SIMPLE_HEAD``, no edges, no colour), line by
line and without rich's layout, which takes seconds for the thousands of rows of a large
cluster's `apportion queue`."""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence

from rich.cells import cell_len

GAP = "   "  # a cell's right padding, the column divider and the next cell's left padding


def table_lines(header: Sequence[str], right: Sequence[bool], rows: Sequence[Sequence[str]]) -> Iterator[str]:
    """The lines of the table of ``rows`` (plain text cells) under ``header``; ``right[k]``: column
    ``k`` is right-aligned. Each column as wide as its widest cell, in terminal cells."""
    widths = [cell_len(title) for title in header]
    sizes = [[cell_len(cell) for cell in row] for row in rows]
    for row in sizes:
        widths = [max(w, n) for w, n in zip(widths, row)]
    yield _line(header, [cell_len(title) for title in header], widths, right)
    yield "─" * (sum(widths) + len(GAP) * (len(widths) - 1))
    for row, size in zip(rows, sizes):
        yield _line(row, size, widths, right)


def _line(cells: Iterable[str], sizes: Iterable[int], widths: Sequence[int], right: Sequence[bool]) -> str:
    return GAP.join((" " * (w - n) + c) if r else (c + " " * (w - n))
                    for c, n, w, r in zip(cells, sizes, widths, right))
