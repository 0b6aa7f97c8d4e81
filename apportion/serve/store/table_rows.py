"""Rows of a round table as dicts, for the few jobs a round handles one by one, built a batch at a
time; their service columns (JSON text) parsed once per change, not once per round."""

from __future__ import annotations

import json
import math

import numpy as np

_SERVICE = ("service_by_type", "shared_by_type")


class TableRows:
    """Builds round-table rows; keeps the service texts the last round read or wrote with their
    values (never changed in place: a new value is a new dict), so that a text it wrote is not
    parsed again the next round."""

    def __init__(self) -> None:
        self._known: dict[str, dict] = {"{}": {}}
        self._last: dict[str, dict] = {}
        self._known_seconds: dict[tuple, tuple[float, ...]] = {}
        self._last_seconds: dict[tuple, tuple[float, ...]] = {}

    def next_round(self) -> None:
        """Forget the texts no round has used since the last call: what is kept is what one round uses."""
        self._last, self._known = self._known, {"{}": {}}
        self._last_seconds, self._known_seconds = self._known_seconds, {}

    def parsed(self, text: str) -> dict:
        """The value of a service column's JSON ``text``."""
        value = self._known.get(text)
        if value is None:
            value = self._last.get(text)
            if value is None:
                value = json.loads(text)
            self._known[text] = value
        return value

    def seconds_by_type(self, text: str, gpu_types: tuple[str, ...]) -> tuple[float, ...]:
        """A service column's JSON ``text`` ({type: seconds}) as seconds on each of ``gpu_types`` (0: none)."""
        key = (text, gpu_types)
        seconds = self._known_seconds.get(key)
        if seconds is None:
            seconds = self._last_seconds.get(key)
            if seconds is None:
                value = self.parsed(text)
                seconds = tuple(float(value.get(t, 0.0)) for t in gpu_types)
            self._known_seconds[key] = seconds
        return seconds

    def text(self, value: dict) -> str:
        """``value`` as the column's JSON text (``json.dumps``'s), kept to be read back without parsing."""
        text = _service_text(value)
        self._known[text] = value
        return text

    def rows(self, table: dict[str, np.ndarray], positions: np.ndarray) -> list[dict]:
        """Rows ``positions`` of ``table`` as dicts, with their slots listed and service parsed."""
        names = list(table)
        values = [table[name][positions].tolist() for name in names]
        rows = [dict(zip(names, row)) for row in zip(*values)]
        for row in rows:
            row["slot_list"] = row["slots"].split(",") if row["slots"] else []
            for name in _SERVICE:
                row[name] = self.parsed(row[name])
        return rows

    def row(self, table: dict[str, np.ndarray], i: int) -> dict:
        """Row ``i`` of ``table`` as a dict (:meth:`rows`)."""
        return self.rows(table, np.array([i], dtype=np.int64))[0]


def _service_text(value: dict) -> str:
    """``json.dumps(value)`` of a service column's {name: seconds}, written directly when every name
    is plain printable ASCII and every number a finite float (as they are), else by json."""
    parts = []
    for name, seconds in value.items():
        if not (type(name) is str and type(seconds) is float and math.isfinite(seconds) and name.isascii()
                and name.isprintable() and '"' not in name and "\\" not in name):
            return json.dumps(value)
        parts.append(f'"{name}": {seconds!r}')
    return "{" + ", ".join(parts) + "}"
