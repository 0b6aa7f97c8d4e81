"""Workload readers from outside apportion: ``--workload READER:PATH``.

``READER`` is an entry point's name in the ``apportion.workloads`` group or ``path/to/reader.py:Name``;
it names a function ``read(path: str)`` that returns the trace's rows, each a mapping from the
columns of apportion's trace CSV (docs/workloads.md: ``submit_time_s``, ``num_gpus``, ``duration_s``
or ``steps``, ``kind`` …) to values. apportion then reads those rows exactly as it reads a CSV, with
the same checks; an error names the plugin, the file and the row (1 is the first row the reader
returned). A ``--workload`` that is an existing file is always read as a file.
"""

from __future__ import annotations

import csv
import io
import re
import tempfile
from pathlib import Path
from typing import Any, Callable

from apportion.core.errors import InputError
from apportion.plugins import Plugin, PluginError, from_entry_point, from_file, is_file_spec, split_file_spec

_ENTRY_POINT_SPEC = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9_.-]*):(?P<path>.+)$")


def plugin_reader(workload: str) -> tuple[Plugin, str] | None:
    """(the reader, the path it reads) when ``workload`` is ``READER:PATH`` naming a plugin; None for a
    plain file (read by apportion's own readers). PluginError when the reader named is broken."""
    if Path(workload).exists():
        return None
    if is_file_spec(workload):
        spec, rest = split_file_spec(workload)
        if not rest.startswith(":") or len(rest) < 2:
            raise PluginError(f"workload plugin {spec}: give the file it reads, as --workload {spec}:PATH")
        plugin, path = from_file("workload", spec), rest[1:]
    else:
        match = _ENTRY_POINT_SPEC.match(workload)
        if match is None or "/" in match["name"]:
            return None
        plugin, path = from_entry_point("workload", match["name"]), match["path"]
        if plugin is None:
            return None
    if not callable(plugin.value):
        raise PluginError(f"workload plugin {plugin.name} ({plugin.source}): is a {type(plugin.value).__name__}, "
                          "not a function read(path) -> rows")
    return plugin, path


def read_with_plugin(plugin: Plugin, path: str, read_csv: Callable[[str], Any]) -> Any:
    """``read_csv`` (apportion's trace reader on a path) over the rows ``plugin`` reads from ``path``."""
    where = f"workload plugin {plugin.name} ({plugin.source})"
    try:
        rows = [dict(row) for row in plugin.value(path)]
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - the plugin's own code
        raise PluginError(f"{where}: reading {path} failed: {type(exc).__name__}: {exc}") from None
    if not rows:
        raise PluginError(f"{where}: read no rows from {path}")
    columns = list(dict.fromkeys(str(key) for row in rows for key in row))
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows({str(k): "" if v is None else v for k, v in row.items()} for row in rows)
    with tempfile.TemporaryDirectory(prefix="apportion-plugin-rows-") as folder:
        rows_file = Path(folder) / "rows.csv"
        rows_file.write_text(text.getvalue())
        try:
            return read_csv(str(rows_file))
        except InputError as err:
            source = f"{path} (read by {plugin.name})"
            row = None if err.line is None or err.line < 2 else err.line - 1  # line 1: the columns
            raise InputError(source, err.message.replace(str(rows_file), source), line=row, field=err.field) from None
