"""The round table's rows kept between rounds: one array of objects, a row a job in id order.

A round reads every active job's columns; only the jobs written since the last read are read
again from the state file and replace their rows here, so a round costs its changes, not its
jobs. The columns are views of the array: numpy arrays of the values SQLite returned; a column
asked for as numbers is converted once and kept, its changed rows converted as they change.
"""

from __future__ import annotations

import numpy as np


class RoundRows:
    """Rows of the columns ``names`` (the first one the job id), in id order."""

    def __init__(self, names: tuple[str, ...], rows: list[tuple]) -> None:
        self.names = names
        self._ids, self._rows = _as_arrays(rows, len(names))
        self._typed: dict[tuple[str, str], np.ndarray] = {}  # (name, dtype) -> the column converted, read-only

    def replace(self, changed: list[int], fresh: list[tuple], *, in_place: bool) -> RoundRows:
        """These rows after the jobs ``changed`` were read again: each is ``fresh``'s row of that id
        (``fresh`` in id order), or gone when ``fresh`` has none. ``in_place``: change these rows
        (columns taken from them earlier change too); else a new RoundRows, this one as it was."""
        target = self if in_place else RoundRows(self.names, [])
        if not changed:
            if not in_place:
                target._ids, target._rows = self._ids, self._rows.copy()
            return target
        asked = np.unique(np.asarray(changed, dtype=np.int64))
        fresh_ids, fresh_rows = _as_arrays(fresh, len(self.names))
        n = len(self._ids)
        place = np.minimum(np.searchsorted(self._ids, asked), max(n - 1, 0))
        held = (place < n) & (self._ids[place] == asked) if n else np.zeros(len(asked), dtype=bool)
        if np.array_equal(asked[held], fresh_ids):  # the usual case: the same jobs, their values changed
            rows = self._rows if in_place else self._rows.copy()
            rows[place[held]] = fresh_rows
            target._ids, target._rows = self._ids, rows
            if in_place:
                for (name, dtype), column in self._typed.items():
                    column.flags.writeable = True
                    column[place[held]] = np.asarray(fresh_rows[:, self.names.index(name)], dtype=dtype)
                    column.flags.writeable = False
            return target
        keep = np.ones(n, dtype=bool)
        keep[place[held]] = False
        ids = np.concatenate([self._ids[keep], fresh_ids])
        order = np.argsort(ids, kind="stable")
        target._ids, target._rows = ids[order], np.concatenate([self._rows[keep], fresh_rows])[order]
        target._typed = {}
        return target

    def patch(self, ids: np.ndarray, columns: dict[str, list]) -> np.ndarray:
        """Set the values ``columns`` (name -> a value a job) of the rows of jobs ``ids`` (ascending), in
        place; [k] whether each job has a row here (those without are left alone)."""
        n = len(self._ids)
        place = np.minimum(np.searchsorted(self._ids, ids), max(n - 1, 0))
        found = (self._ids[place] == ids) if n else np.zeros(len(ids), dtype=bool)
        if not found.any():
            return found
        at = place[found]
        for name, values in columns.items():
            k = self.names.index(name)
            picked = np.empty(int(found.sum()), dtype=object)
            picked[:] = [v for v, keep in zip(values, found.tolist()) if keep]
            self._rows[at, k] = picked
            for (typed_name, dtype), column in self._typed.items():
                if typed_name == name:
                    column.flags.writeable = True
                    column[at] = np.asarray(picked, dtype=dtype)
                    column.flags.writeable = False
        return found

    def columns(self) -> RoundColumns:
        """Name -> that column over the rows (a view)."""
        return RoundColumns(self)

    def typed(self, name: str, dtype) -> np.ndarray:
        """Column ``name`` as ``dtype`` (None: NaN as floats), read-only, kept until its rows change."""
        key = (name, np.dtype(dtype).str)
        column = self._typed.get(key)
        if column is None:
            column = self._typed[key] = np.asarray(self._rows[:, self.names.index(name)], dtype=dtype)
            column.flags.writeable = False
        return column


class RoundColumns(dict):
    """The columns of some RoundRows by name (arrays of objects), with :meth:`typed` for numbers."""

    def __init__(self, rows: RoundRows) -> None:
        super().__init__((name, rows._rows[:, k]) for k, name in enumerate(rows.names))
        self._of = rows

    def typed(self, name: str, dtype) -> np.ndarray:
        """Column ``name`` as ``dtype`` (:meth:`RoundRows.typed`; as objects, the column itself)."""
        return self[name] if np.dtype(dtype) == object else self._of.typed(name, dtype)


def _as_arrays(rows: list[tuple], width: int) -> tuple[np.ndarray, np.ndarray]:
    """(the ids, the rows as a [len(rows), width] array of objects)."""
    block = np.empty((len(rows), width), dtype=object)
    if rows:
        block[:] = rows
    ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
    return ids, block
