"""Read privacy blocks (a CSV file of their own) and the claims a trace's rows make on them.

The block file: ``block,arrival_s,epsilon,delta`` and, for Rényi accounting, ``rdp_orders``
(the orders, space-separated, the same on every row). A trace's rows claim budget in the
columns ``privacy_blocks`` (block names, space-separated; empty: no claim), ``privacy_epsilon``
and ``privacy_delta`` (what the job takes of each block, under ε-δ), or ``privacy_rdp``
(``order:epsilon`` pairs at exactly the block file's orders, under Rényi), and optionally
``privacy_weight`` (what granting the claim is worth, 1 by default). Anything wrong raises
InputError naming the file, line and field.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np

from apportion.core.errors import InputError
from apportion.core.jobs import JobTable
from apportion.core.limits import MAX_SUBMIT_TIME_S
from apportion.core.privacy import Blocks, Claims
from apportion.workloads.text_file import read_text

BLOCK_COLUMNS = ("block", "arrival_s", "epsilon", "delta")
CLAIM_COLUMNS = ("privacy_blocks", "privacy_epsilon", "privacy_delta", "privacy_rdp", "privacy_weight")


def read_blocks(path: str | Path) -> Blocks:
    """The blocks of the file at ``path``, in file order."""
    source = str(path)
    header, rows = _read_csv(source)
    for name in BLOCK_COLUMNS:
        if name not in header:
            raise InputError(source, f"missing required column (header has: {', '.join(header)})", line=1,
                             field=name)
    names, arrival, epsilon, delta, orders = [], [], [], [], None
    rdp = "rdp_orders" in header
    seen: dict[str, int] = {}
    for line, row in rows:
        name = row["block"].strip()
        if not name or any(c.isspace() for c in name):
            raise InputError(source, f"a block name is one word, got '{name}'", line=line, field="block")
        if name in seen:
            raise InputError(source, f"block '{name}' is named on line {seen[name]} too", line=line, field="block")
        seen[name] = line
        at = _number(source, line, "arrival_s", row["arrival_s"])
        if not 0 <= at <= MAX_SUBMIT_TIME_S:
            raise InputError(source, f"must be from 0 to {MAX_SUBMIT_TIME_S:g} s, got '{row['arrival_s']}'",
                             line=line, field="arrival_s")
        eps = _number(source, line, "epsilon", row["epsilon"])
        if not eps > 0:
            raise InputError(source, f"a block's budget must be more than 0, got '{row['epsilon']}'", line=line,
                             field="epsilon")
        dlt = _number(source, line, "delta", row["delta"])
        if not (0 < dlt < 1 if rdp else 0 <= dlt < 1):
            low = "more than 0" if rdp else "from 0"
            raise InputError(source, f"must be {low} and less than 1, got '{row['delta']}'", line=line, field="delta")
        if rdp:
            these = _orders(source, line, row["rdp_orders"])
            if orders is None:
                orders = these
            elif not np.array_equal(these, orders):
                raise InputError(source, "every block must give the same Rényi orders as the first "
                                         f"({' '.join(f'{a:g}' for a in orders)})", line=line, field="rdp_orders")
        names.append(name), arrival.append(at), epsilon.append(eps), delta.append(dlt)
    if not names:
        raise InputError(source, "no blocks: the file has a header but no rows")
    return Blocks(np.array(names, dtype=object), np.array(arrival), np.array(epsilon), np.array(delta), orders)


def has_claims(path: str | Path) -> bool:
    """Whether the trace at ``path`` has a ``privacy_blocks`` column."""
    header, _ = _read_csv(str(path), header_only=True)
    return "privacy_blocks" in header


def read_claims(path: str | Path, jobs: JobTable, blocks: Blocks) -> Claims:
    """The claims the trace at ``path`` makes, one per row of ``jobs`` (matched by ``job_id``; a
    row with no ``privacy_blocks`` claims nothing)."""
    source = str(path)
    header, rows = _read_csv(source)
    if "privacy_blocks" not in header:
        raise InputError(source, "no privacy claims: the trace has no 'privacy_blocks' column", line=1,
                         field="privacy_blocks")
    rdp = blocks.rdp
    if rdp and "privacy_rdp" not in header:
        raise InputError(source, "the blocks are under Rényi accounting: give each claim's 'privacy_rdp'", line=1,
                         field="privacy_rdp")
    if not rdp and "privacy_epsilon" not in header:
        raise InputError(source, "the blocks are under ε-δ accounting: give each claim's 'privacy_epsilon'",
                         line=1, field="privacy_epsilon")
    if "job_id" not in header:
        raise InputError(source, "privacy claims are matched to jobs by 'job_id': the trace has none", line=1,
                         field="job_id")
    row_of = {str(job): i for i, job in enumerate(jobs.job_id.tolist())}
    index = blocks.index_of()
    columns = len(blocks.orders) if rdp else 2
    per_job: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(jobs)
    weight = np.ones(len(jobs))
    for line, row in rows:
        job = row_of.get(row["job_id"].strip())
        names = row["privacy_blocks"].split()
        if job is None or not names:
            continue
        unknown = [name for name in names if name not in index]
        if unknown:
            raise InputError(source, f"no block '{unknown[0]}' in the block file", line=line, field="privacy_blocks")
        if len(set(names)) < len(names):
            raise InputError(source, "a block is named twice", line=line, field="privacy_blocks")
        if rdp:
            demand = _rdp_demand(source, line, row.get("privacy_rdp", ""), blocks.orders)
        else:
            eps = _number(source, line, "privacy_epsilon", row["privacy_epsilon"])
            dlt = _number(source, line, "privacy_delta", row.get("privacy_delta", "") or "0")
            for field, value in (("privacy_epsilon", eps), ("privacy_delta", dlt)):
                if value < 0:
                    raise InputError(source, f"must be 0 or more, got '{row[field]}'", line=line, field=field)
            demand = np.array([eps, dlt])
        if (row.get("privacy_weight") or "").strip():
            weight[job] = _number(source, line, "privacy_weight", row["privacy_weight"])
            if not weight[job] > 0:
                raise InputError(source, f"must be more than 0, got '{row['privacy_weight']}'", line=line,
                                 field="privacy_weight")
        per_job[job] = (np.array([index[name] for name in names], dtype=np.int64), demand)
    counts = np.array([0 if entry is None else len(entry[0]) for entry in per_job], dtype=np.int64)
    start = np.zeros(len(jobs) + 1, dtype=np.int64)
    np.cumsum(counts, out=start[1:])
    block = np.zeros(int(start[-1]), dtype=np.int64)
    demand = np.zeros((int(start[-1]), columns))
    for job, entry in enumerate(per_job):
        if entry is not None:
            block[start[job]:start[job + 1]] = entry[0]
            demand[start[job]:start[job + 1]] = entry[1]
    return Claims(start, block, demand, weight)


def _read_csv(source: str, header_only: bool = False) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """The header and each non-blank row (its line, column -> text) of a CSV file, gzip or not."""
    text = read_text(source)
    reader = csv.reader(io.StringIO(text, newline=""))
    header = [name.strip() for name in next(reader, [])]
    if not any(header):
        raise InputError(source, "empty file; expected a header row", line=1)
    if header_only:
        return header, []
    rows = []
    for line, record in enumerate(reader, start=2):
        if not record:
            continue
        if len(record) != len(header):
            raise InputError(source, f"has {len(record)} fields, the header has {len(header)}", line=line)
        rows.append((line, dict(zip(header, record))))
    return header, rows


def _number(source: str, line: int, field: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(source, f"'{text}' is not a number", line=line, field=field) from None
    if not math.isfinite(value):
        raise InputError(source, f"'{text}' is not a finite number", line=line, field=field)
    return value


def _orders(source: str, line: int, text: str) -> np.ndarray:
    words = text.split()
    if not words:
        raise InputError(source, "give the Rényi orders, e.g. '2 4 8 16 32 64'", line=line, field="rdp_orders")
    orders = np.array([_number(source, line, "rdp_orders", word) for word in words])
    if np.any(orders <= 1) or np.any(np.diff(orders) <= 0):
        raise InputError(source, f"orders must be more than 1 and increasing, got '{text}'", line=line,
                         field="rdp_orders")
    return orders


def _rdp_demand(source: str, line: int, text: str, orders: np.ndarray) -> np.ndarray:
    pairs = {}
    for word in text.split():
        order, _, value = word.partition(":")
        if not value:
            raise InputError(source, f"'{word}' is not 'order:epsilon'", line=line, field="privacy_rdp")
        pairs[_number(source, line, "privacy_rdp", order)] = _number(source, line, "privacy_rdp", value)
    expected = " ".join(f"{a:g}" for a in orders)
    if sorted(pairs) != orders.tolist():
        raise InputError(source, f"give ε at exactly the block file's orders ({expected}), got '{text}'", line=line,
                         field="privacy_rdp")
    demand = np.array([pairs[a] for a in orders.tolist()])
    if np.any(demand < 0):
        raise InputError(source, f"ε must be 0 or more at every order, got '{text}'", line=line, field="privacy_rdp")
    return demand
