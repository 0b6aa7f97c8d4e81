"""The one error type for bad user input: it names the file, line and field."""

from __future__ import annotations


class InputError(ValueError):
    """A malformed cluster spec, workload row, job file or throughput file.

    ``str(err)`` is one line a user can act on: ``source:line: field 'f': what is wrong``.
    """

    def __init__(
        self,
        source: str,
        message: str,
        *,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.source = source
        self.line = line
        self.field = field
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        what = f"field '{self.field}': {self.message}" if self.field else self.message
        return f"{where}: {what}"
