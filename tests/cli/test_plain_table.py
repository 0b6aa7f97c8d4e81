"""A long table into a pipe is printed line by line, with the characters rich prints for it."""

from __future__ import annotations

import io

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from apportion.cli.plain_table import table_lines

HEADER = ("ID", "NAME", "PRIO", "STATUS(REASON)", "EST.FINISH")
RIGHT = (True, False, True, False, False)
ROWS = [["1", "cnn", "1", "running", "05:51:21"],
        ["12", "long name ü 日本語", "0.5", "queued(waiting for slots)", "≥05:54:32"],
        ["103", "[blink]root[/blink]", "1000", "", "-"]]


def rich_text(rows) -> str:
    table = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False, show_edge=False)
    for title, right in zip(HEADER, RIGHT):
        table.add_column(title, justify="right" if right else "left", no_wrap=True, overflow="ellipsis")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    out = io.StringIO()
    Console(file=out, width=100_000, color_system=None).print(table)
    return out.getvalue()


def test_the_lines_are_rich_s_table_into_a_pipe_wide_characters_and_markup_as_typed():
    assert "\n".join(table_lines(HEADER, RIGHT, ROWS)) + "\n" == rich_text(ROWS)


def test_a_table_without_rows_is_its_header_and_rule():
    assert list(table_lines(HEADER, RIGHT, [])) == ["ID   NAME   PRIO   STATUS(REASON)   EST.FINISH", "─" * 46]
