"""Read Gavel's throughput file format (stanford-futuredata/gavel) into a ThroughputTable.

The format is JSON: GPU type → job key → ``{"null": steps/s alone, "<other key>": [this, other]}``.
A job key is either a job type (``"ResNet-50 (batch size 64)"``, one GPU) or the text of a
Python tuple ``"('ResNet-50 (batch size 64)', 4)"`` (job type, number of GPUs). An entry
``"<other key>": [a, b]`` says the two jobs shared the GPU(s) at a and b steps/s; ``[0.0, 0.0]``
means the pair did not fit. See docs/throughputs.md.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import numpy as np

from apportion.core.errors import InputError
from apportion.core.throughputs import ThroughputTable

ALONE = "null"  # the key of the steps/s a job gets when it has its GPUs to itself
_BATCH_SIZE = re.compile(r"^(?P<model>.*?)\s*\(\s*batch size\s+(?P<bs>\d+)\s*\)\s*$", re.IGNORECASE)


def gavel_kind_name(job_type: str) -> str:
    """apportion's kind name for a Gavel job type: ``"ResNet-50 (batch size 64)"`` → ``"resnet50/bs64"``.

    The model part is lowercased with everything but letters and digits dropped; a trailing
    ``(batch size N)`` becomes ``/bsN``. So ``"LM (batch size 5)"`` → ``"lm/bs5"``, ``"A3C"`` →
    ``"a3c"``, ``"CycleGAN"`` → ``"cyclegan"``. Raises ValueError if no letter or digit is left.
    """
    match = _BATCH_SIZE.match(job_type)
    model, suffix = (match["model"], f"/bs{int(match['bs'])}") if match else (job_type, "")
    name = re.sub(r"[^0-9a-z]", "", model.lower())
    if not name:
        raise ValueError(f"job type {job_type!r} has no letters or digits to name a kind")
    return name + suffix


def read_gavel_throughputs(path: str | Path) -> ThroughputTable:
    """The throughput table in the Gavel-format JSON file at ``path``; bad input raises InputError."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(source, "no such throughput file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(source, f"cannot read: {err}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(source, f"not valid JSON: {err.msg}", line=err.lineno) from None
    return parse_gavel_throughputs(data, source)


def parse_gavel_throughputs(data: object, source: str) -> ThroughputTable:
    """The table a parsed Gavel-format document describes; ``source`` names it in errors.

    Kinds, GPU types and scales keep their order of first appearance (scales sorted). A job
    alone at 0.0 steps/s did not fit its GPUs and becomes NaN ("cannot run there"); entries the
    file lacks are NaN. Pairs are kept where both jobs use one GPU; pair entries of multi-GPU
    jobs are skipped (Gavel writes only ``[0.0, 0.0]`` there).
    """
    reader = _Reader(source)
    reader.document(data)
    kinds = list(dict.fromkeys(kind for _, kind, _ in reader.rates))
    scales = sorted({scale for _, _, scale in reader.rates})
    if not scales:
        raise InputError(source, "no throughputs in the file")
    row, column, depth = ({name: i for i, name in enumerate(names)}
                          for names in (kinds, reader.gpu_types, scales))
    table = np.full((len(kinds), len(reader.gpu_types), len(scales)), np.nan)
    for (gpu, kind, scale), value in reader.rates.items():
        rate = value if value > 0 else np.nan  # 0 steps/s alone: the job does not fit there
        table[row[kind], column[gpu], depth[scale]] = rate
    origin = f"Gavel-format throughput file {source}"
    return ThroughputTable(
        tuple(kinds), tuple(reader.gpu_types), tuple(scales), table, reader.pairs,
        {kind: origin for kind in kinds},
    )


@dataclass
class _Reader:
    """Walks one document, collecting rates and pairs; every error names ``source`` and a key path."""

    source: str
    gpu_types: list[str] = field(default_factory=list)
    rates: dict[tuple[str, str, int], float] = field(default_factory=dict)  # (gpu, kind, GPUs)
    pairs: dict[tuple[str, str, str], tuple[float, float]] = field(default_factory=dict)

    def document(self, data: object) -> None:
        if not isinstance(data, Mapping):
            raise InputError(self.source, f"expected a JSON object of GPU types, got {_what(data)}")
        for gpu_key, jobs in data.items():
            gpu = str(gpu_key).strip().lower()
            if not gpu:
                self.fail("empty GPU type name", repr(gpu_key))
            if gpu in self.gpu_types:
                self.fail(f"GPU type '{gpu}' appears twice", gpu_key)
            if not isinstance(jobs, Mapping):
                self.fail(f"expected an object of jobs, got {_what(jobs)}", gpu_key)
            self.gpu_types.append(gpu)
            for job_key, entry in jobs.items():
                path = f"{gpu_key} → {job_key}"
                self.job(gpu, entry, path, *self.key(job_key, path))

    def job(self, gpu: str, entry: object, path: str, kind: str, scale: int) -> None:
        if not isinstance(entry, Mapping):
            self.fail(f"expected an object, got {_what(entry)}", path)
        if (gpu, kind, scale) in self.rates:
            self.fail(f"kind '{kind}' on {scale} GPU(s) appears twice", path)
        self.rates[(gpu, kind, scale)] = math.nan  # known kind; stays NaN without a "null" entry
        for other_key, value in entry.items():
            where = f"{path} → {other_key}"
            if other_key == ALONE:
                self.rates[(gpu, kind, scale)] = self.number(value, where)
                continue
            other_kind, other_scale = self.key(other_key, where)
            if not isinstance(value, (list, tuple)) or len(value) != 2:
                self.fail(f"expected [this, other] steps/s, got {_what(value)}", where)
            this, other = (self.number(v, where) for v in value)
            if scale == 1 and other_scale == 1:
                self.pairs[(kind, other_kind, gpu)] = (this, other)

    def key(self, key: object, where: str) -> tuple[str, int]:
        """(kind name, number of GPUs) of a job key: a job type, or a (job type, GPUs) tuple's text."""
        if not isinstance(key, str) or not key.strip():
            self.fail("a job key must be a non-empty string", where)
        text = key.strip()
        job_type, scale = text, 1
        if text.startswith("("):
            try:
                value = ast.literal_eval(text)  # literals only: never evaluates code
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                value = None
            if not (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str)
                    and type(value[1]) is int and value[1] >= 1):
                self.fail(f"cannot read job key {key!r}: expected \"('<job type>', <GPUs >= 1>)\"", where)
            job_type, scale = value
        try:
            return gavel_kind_name(job_type), scale
        except ValueError as err:
            self.fail(str(err), where)

    def number(self, value: object, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(f"expected a number of steps/s, got {_what(value)}", where)
        if not math.isfinite(value) or value < 0:
            self.fail(f"steps/s must be a finite number >= 0, got {value!r}", where)
        return float(value)

    def fail(self, message: str, where: object) -> NoReturn:
        raise InputError(self.source, message, field=str(where))


def _what(value: object) -> str:
    """A short description of a JSON value for an error message."""
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)}"
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
