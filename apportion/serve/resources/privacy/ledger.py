"""The server's privacy-budget ledger, kept in the state file (tables ``privacy_blocks`` and
``privacy_claims``; docs/privacy.md): the blocks an admin added with what jobs that started
consumed of each, and each job's claim (one row a job: its blocks, its demand on each, where it stands).

Each round builds the simulator's admission stage (``mechanism/privacy_budget.py``) from these
rows for the jobs not started yet that claim budget, asks it, and writes back what it decided,
so both clocks grant by one implementation. A claim's life on the server: ``pending`` (its job
not asked yet: it waits for the jobs it runs after) → ``waiting`` → ``granted`` (its job enters
rounds) → ``consumed`` at its job's first start; or ``rejected`` (its job fails). A granted
claim whose job ends before it ever started is ``returned``; a pending or waiting one is
``withdrawn``. A claim's blocks are kept only while it is open: consumed, its demand is added to
its blocks' ``consumed`` totals; settled any way, its blocks are dropped. A round reads one row per
job that asks, whatever the number of blocks it names.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from apportion.core.errors import InputError
from apportion.core.privacy import FIT_TOLERANCE, Blocks, Claims, fits
from apportion.mechanism.privacy_budget import REJECTED_PORTIONS, ClaimState, Ledger, PrivacyStage
from apportion.mechanism.privacy_policies import PrivacyPolicy
from apportion.serve.jobs.privacy_spec import BlockSpec, ClaimSpec
from apportion.serve.store.schema import TableFamily, add_columns
from apportion.serve.store.state import StateStore

STATES = ("pending", "waiting", "granted", "consumed", "rejected", "returned", "withdrawn")
OPEN = ("pending", "waiting", "granted")  # a claim whose job may still start
MAX_BLOCKS = 10_000  # blocks one server keeps
MAX_DEMAND_ROWS = 200_000  # rows of privacy_demands one submit may add (tasks × blocks × columns)
_OF_STAGE = {ClaimState.UNSEEN: "pending", ClaimState.WAITING: "waiting", ClaimState.GRANTED: "granted",
             ClaimState.REJECTED: "rejected"}
_TO_STAGE = {name: int(state) for state, name in _OF_STAGE.items()}
SCHEMA = """
CREATE TABLE IF NOT EXISTS privacy_blocks (  -- data blocks with a privacy budget (ledger.py)
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- in the order added: a block's place in the ledger
    name TEXT NOT NULL UNIQUE,
    epsilon REAL NOT NULL,              -- the guarantee (ε, δ) training on it must keep
    delta REAL NOT NULL,
    orders TEXT NOT NULL DEFAULT '',    -- Rényi orders, space-separated; '' for ε-δ accounting
    added REAL NOT NULL,                -- its arrival: budget unlocks from here
    arrived_claims INTEGER NOT NULL DEFAULT 0, -- claims that arrived for it (by N unlocks 1/N with each)
    consumed TEXT NOT NULL DEFAULT '',  -- what jobs that started consumed of it, a JSON list over its columns; '' none
    lost TEXT NOT NULL DEFAULT '',      -- rr: portions lost with rejected claims, a JSON list over its columns; '' none
    retired INTEGER NOT NULL DEFAULT 0  -- rr: 1 once all its budget is unlocked and handed out: it releases no more
);
CREATE TABLE IF NOT EXISTS privacy_claims (  -- each job's claim on the blocks, one row a job that claims
    job_id INTEGER PRIMARY KEY,
    state TEXT NOT NULL,                -- pending, waiting, granted, consumed, rejected, returned, withdrawn
    weight REAL NOT NULL DEFAULT 1,     -- what granting it is worth to pack
    arrived REAL,                       -- first asked by a round (its job's `after` done): it counts from here
    decided REAL,                       -- granted or rejected
    settled REAL,                       -- consumed (its job's first start), returned or withdrawn (it ended unstarted)
    reason TEXT NOT NULL DEFAULT '',    -- why it was rejected
    blocks BLOB,                        -- while open: its blocks' privacy_blocks ids, int64 little-endian, in its order
    demand TEXT NOT NULL DEFAULT '',    -- what it takes of each of them, a JSON list over the blocks' columns
    held BLOB,                          -- rr, while it waits: the portions handed out, float64 [blocks, columns]
    cells INTEGER NOT NULL DEFAULT 0    -- blocks × columns: what it costs a round while open
);
CREATE INDEX IF NOT EXISTS privacy_claims_open ON privacy_claims(state) WHERE state IN ('pending', 'waiting', 'granted');
"""
_ADDED_COLUMNS = {  # table -> its columns added since: a state file of an older apportion gains them
    "privacy_blocks": {"consumed": "TEXT NOT NULL DEFAULT ''", "lost": "TEXT NOT NULL DEFAULT ''",
                       "retired": "INTEGER NOT NULL DEFAULT 0"},
    "privacy_claims": {"blocks": "BLOB", "demand": "TEXT NOT NULL DEFAULT ''", "held": "BLOB",
                       "cells": "INTEGER NOT NULL DEFAULT 0"},
}


def _migrate(store) -> None:
    with store.transaction() as conn:
        for table, columns in _ADDED_COLUMNS.items():
            add_columns(conn, table, columns)


TABLES = TableFamily("privacy", SCHEMA, _migrate)  # the ledger's tables, kept in the state file beside the jobs
_OPEN_SQL = "('pending', 'waiting', 'granted')"
_ENDED_SQL = "('completed', 'failed', 'cancelled')"


@dataclass(frozen=True)
class BlockBudget:
    """A block as ``apportion blocks list`` shows it: its guarantee, and in ε (under Rényi, at
    ``order``, the order with the most left) what is unlocked, granted to jobs not started yet,
    consumed by jobs that started, and left (its whole budget less granted, consumed and, under rr, lost)."""

    name: str
    epsilon: float
    delta: float
    orders: tuple[float, ...] | None
    added: float
    claims: int  # claims arrived for it
    waiting: int  # claims on it not decided yet
    unlocked: float
    granted: float
    consumed: float
    left: float
    order: float | None  # Rényi: the order the amounts are at

    def to_dict(self) -> dict:
        return {"name": self.name, "epsilon": self.epsilon, "delta": self.delta,
                "rdp_orders": None if self.orders is None else list(self.orders), "added": self.added,
                "claims": self.claims, "waiting": self.waiting, "unlocked": self.unlocked, "granted": self.granted,
                "consumed": self.consumed, "left": self.left, "order": self.order}


@dataclass(frozen=True)
class _Snapshot:
    """What a round's stage started from, to write back only what it changed."""

    job_ids: np.ndarray  # [n] the claims' jobs, in the stage's claim order
    state: np.ndarray  # [n]
    arrived_claims: np.ndarray  # [B]
    block_ids: np.ndarray  # [B] privacy_blocks.id of each of the stage's blocks
    held: np.ndarray | None  # [m, A] round robin's portions
    lost: np.ndarray  # [B, A] round robin's portions lost with rejected claims
    retired: np.ndarray  # [B] round robin's retired blocks


class PrivacyLedger:
    """The blocks and claims of one state file, granted by ``policy``; a claim not granted within
    ``timeout_s`` (None: never) is rejected. Round robin retires a block all unlocked and handed out
    and, with ``rejected_portions`` "lost" (PrivateKube's, the simulator's default), loses what a
    rejected claim held, as the simulator does (``mechanism/privacy_budget.py``); both kept per block."""

    def __init__(self, store: StateStore, policy: PrivacyPolicy, timeout_s: float | None = None,
                 rejected_portions: str = "lost") -> None:
        if rejected_portions not in REJECTED_PORTIONS:
            raise ValueError(f"rejected_portions must be one of {', '.join(REJECTED_PORTIONS)}, "
                             f"got '{rejected_portions}'")
        self.store, self.policy, self.timeout_s = store, policy, timeout_s
        self.rejected_portions = rejected_portions
        store.add_family(TABLES)  # its tables, in the state file beside the jobs
        self._fold_demand_rows()

    def _fold_demand_rows(self) -> None:
        """A state file of an older apportion kept a row per claim, block and column (``privacy_demands``):
        fold the open claims' rows into their claim's row, the consumed ones into their blocks' totals,
        and drop the table, so that neither a round nor /blocks reads them again."""
        if not self.store.rows("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'privacy_demands'"):
            return
        with self.store.transaction() as conn:
            found = self._blocks()
            if found is not None:
                ids, blocks, _ = found
                columns = blocks.budget.shape[1]
                consumed = self._consumed(ids, blocks)
                for block, col, amount in conn.execute(
                        "SELECT d.block, d.col, SUM(d.amount) FROM privacy_claims c JOIN privacy_demands d USING"
                        " (job_id) WHERE c.state = 'consumed' GROUP BY d.block, d.col").fetchall():
                    place = int(np.searchsorted(ids, block))
                    if place < len(ids) and ids[place] == block and col < columns:
                        consumed[place, col] += amount
                conn.executemany("UPDATE privacy_blocks SET consumed = ? WHERE id = ?",
                                 [(_demand_text(consumed[b]), int(ids[b])) for b in np.flatnonzero(consumed.any(axis=1))])
                rows = conn.execute(f"SELECT d.job_id, d.position, d.block, d.col, d.amount, d.held FROM privacy_claims c"
                                    f" JOIN privacy_demands d USING (job_id) WHERE c.state IN {_OPEN_SQL}"
                                    f" ORDER BY d.job_id, d.position, d.col").fetchall()
                claims: dict[int, dict[int, list]] = {}
                for job_id, position, block, col, amount, held in rows:
                    entry = claims.setdefault(job_id, {}).setdefault(position, [block, np.zeros(columns),
                                                                               np.zeros(columns)])
                    if col < columns:
                        entry[1][col], entry[2][col] = amount, held
                for job_id, entries in claims.items():
                    ordered = [entries[p] for p in sorted(entries)]
                    portions = np.array([e[2] for e in ordered])
                    conn.execute("UPDATE privacy_claims SET blocks = ?, demand = ?, held = ?, cells = ? WHERE job_id = ?",
                                 (_block_bytes(np.array([e[0] for e in ordered])), _demand_text(ordered[0][1]),
                                  portions.astype(_AMOUNT).tobytes() if portions.any() else None,
                                  len(ordered) * columns, job_id))
            conn.execute("DROP TABLE privacy_demands")

    # blocks --------------------------------------------------------------------------------

    def add_blocks(self, blocks: list[BlockSpec], now: float, source: str = "request") -> None:
        """Add ``blocks``, all or none, arriving ``now``; InputError naming the block and field when
        a name is taken or the accounting differs from the blocks there (one accounting a server)."""
        with self.store.transaction() as conn:
            have = dict(self.store.rows("SELECT name, orders FROM privacy_blocks"))
            if len(have) + len(blocks) > MAX_BLOCKS:
                raise InputError(source, f"a server keeps at most {MAX_BLOCKS:,} blocks ({len(have):,} there)",
                                 field="blocks")
            accounting = next(iter(have.values()), None)
            for i, block in enumerate(blocks):
                where = f"blocks[{i}]." if len(blocks) > 1 else ""
                if block.name in have:
                    raise InputError(source, f"block '{block.name}' exists already", field=f"{where}name")
                orders = _orders_text(block.orders)
                if accounting is None:
                    accounting = orders
                if orders != accounting:
                    raise InputError(source, f"block '{block.name}': {_accounting_words(orders)}, but the blocks "
                                     f"here are {_accounting_words(accounting)}: one accounting a server",
                                     field=f"{where}rdp_orders")
                if block.orders is not None and self.policy.name == "rr":
                    raise InputError(source, "privacy policy rr shares ε and δ: it takes blocks under ε-δ "
                                     "accounting, not Rényi", field=f"{where}rdp_orders")
                have[block.name] = orders
                conn.execute("INSERT INTO privacy_blocks (name, epsilon, delta, orders, added) VALUES (?, ?, ?, ?, ?)",
                             (block.name, block.epsilon, block.delta, orders, now))
                self.store.add_event(now, None, "block", f"{block.name}: ε {block.epsilon:g}, δ {block.delta:g}"
                                     + (f", Rényi orders {orders}" if orders else ""))

    def budgets(self, now: float) -> list[BlockBudget]:
        """Every block, in the order added, with its budget as it stands ``now``."""
        found = self._blocks()
        if found is None:
            return []
        ids, blocks, arrived = found
        granted, consumed = self._taken(ids, blocks)
        whole = blocks.budget
        left = whole - granted - consumed - self._lost_and_retired(ids, blocks)[0]
        if blocks.rdp:  # each block at the order with the most of its budget left
            share = np.divide(left, whole, out=np.full(whole.shape, -np.inf), where=whole > 0)
            column = share.argmax(axis=1)
        else:
            column = np.zeros(len(ids), dtype=np.int64)
        at = (np.arange(len(ids)), column)
        unlocked = self.policy.unlocked_fraction(blocks, arrived, now) * whole[at]
        waiting = np.zeros(len(ids), dtype=np.int64)  # undecided claims on each block
        for (blob,) in self.store.rows("SELECT blocks FROM privacy_claims WHERE state IN ('pending', 'waiting')"
                                       " AND state IN ('pending', 'waiting', 'granted')"):
            waiting[np.searchsorted(ids, np.frombuffer(blob or b"", dtype=_BLOCK_ID))] += 1
        orders = None if blocks.orders is None else tuple(blocks.orders.tolist())
        at_order = [None] * len(ids) if blocks.orders is None else blocks.orders[column].tolist()
        columns = zip(blocks.name.tolist(), blocks.epsilon.tolist(), blocks.delta.tolist(), blocks.arrival_s.tolist(),
                      arrived.tolist(), waiting.tolist(), unlocked.tolist(), granted[at].tolist(),
                      consumed[at].tolist(), np.maximum(left[at], 0.0).tolist(), at_order)
        return [BlockBudget(str(name), epsilon, delta, orders, added, claims, undecided, free, given, used, rest, order)
                for name, epsilon, delta, added, claims, undecided, free, given, used, rest, order in columns]

    # claims at submit ------------------------------------------------------------------------

    def check_claim(self, claim: ClaimSpec, source: str, copies: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """(the ids of the blocks ``claim`` names, its demand on each, in their columns); InputError
        naming the block when one is not here, when the claim's accounting is not theirs, or when
        what a block has left (its whole budget less what was granted) can never hold it; naming
        ``privacy`` when ``copies`` of it (a job array's tasks) would be too many rows to keep."""
        found = self._blocks()
        index = {} if found is None else {str(name): i for i, name in enumerate(found[1].name.tolist())}
        unknown = [name for name in claim.blocks if name not in index]
        if unknown:
            known = ", ".join(list(index)[:10]) + (", …" if len(index) > 10 else "") if index else "none yet"
            raise InputError(source, f"no block '{unknown[0]}' on this server (blocks: {known}; an admin adds them "
                             "with apportion blocks add)", field="privacy.blocks")
        ids, blocks, _ = found
        if blocks.rdp:
            if claim.rdp is None:
                raise InputError(source, f"the blocks here are under Rényi accounting at orders "
                                 f"{_orders_text(blocks.orders)}: give the claim's rdp", field="privacy.rdp")
            orders = np.array([order for order, _ in claim.rdp])
            if len(orders) != len(blocks.orders) or not np.allclose(orders, blocks.orders):
                raise InputError(source, f"must give ε at exactly the blocks' orders ({_orders_text(blocks.orders)}),"
                                 f" got {_orders_text(orders)}", field="privacy.rdp")
            demand = np.array([value for _, value in claim.rdp])
        else:
            if claim.rdp is not None:
                raise InputError(source, "the blocks here are under ε-δ accounting: give epsilon (and delta), "
                                 "not rdp", field="privacy.rdp")
            demand = np.array([claim.epsilon, claim.delta])
        chosen = np.array([index[name] for name in claim.blocks], dtype=np.int64)
        if copies * len(chosen) * len(demand) > MAX_DEMAND_ROWS:
            raise InputError(source, f"{copies:,} claims on {len(chosen):,} blocks of {len(demand)} columns each are "
                             f"more than the {MAX_DEMAND_ROWS:,} a submit may add", field="privacy")
        granted, consumed = self._taken(ids, blocks)
        left = blocks.budget - granted - consumed - self._lost_and_retired(ids, blocks)[0]
        one = Claims(np.array([0, len(chosen)]), chosen, np.tile(demand, (len(chosen), 1)), np.ones(1))
        if not fits(left, one, np.zeros(1, dtype=np.int64), blocks.rdp)[0]:
            over = demand[None, :] > left[chosen] + FIT_TOLERANCE
            bad = over.all(axis=1) if blocks.rdp else over.any(axis=1)
            short = int(chosen[int(np.argmax(bad))])
            what = (f"has ε {max(left[short][0], 0.0):g}, δ {max(left[short][1], 0.0):g} left of its budget"
                    if not blocks.rdp else "has not enough left of its budget at any Rényi order")
            raise InputError(source, f"can never be granted: block {blocks.name[short]} {what}", field="privacy")
        return ids[chosen], demand

    def insert_claims(self, job_ids: list[int], claim: ClaimSpec, block_ids: np.ndarray, demand: np.ndarray) -> None:
        """Record the claim of each of ``job_ids`` (each the same, as ``check_claim`` read it), pending:
        one row a job, its blocks and demand in it; inside the transaction that stores the jobs."""
        blocks, amounts = _block_bytes(block_ids), _demand_text(demand)
        cells = len(block_ids) * len(demand)
        with self.store.transaction() as conn:
            conn.executemany("INSERT INTO privacy_claims (job_id, state, weight, blocks, demand, cells)"
                             " VALUES (?, 'pending', ?, ?, ?, ?)",
                             [(job_id, claim.weight, blocks, amounts, cells) for job_id in job_ids])

    def open_cells_of(self, user: str) -> int:
        """How many demand cells (blocks × columns) the open claims of ``user``'s jobs hold: what they cost a round."""
        return int(self.store.rows(f"SELECT COALESCE(SUM(c.cells), 0) FROM privacy_claims c JOIN jobs j ON"
                                   f" j.id = c.job_id WHERE c.state IN {_OPEN_SQL} AND j.user = ?", (user,))[0][0])

    # rounds ----------------------------------------------------------------------------------

    def open_claims(self) -> np.ndarray:
        """The jobs whose claim is pending or waiting (not decided yet; their jobs not started), by id.
        A granted claim has nothing left to ask: its job enters rounds without the stage."""
        rows = self.store.rows("SELECT job_id FROM privacy_claims WHERE state IN ('pending', 'waiting')"
                               " AND state IN ('pending', 'waiting', 'granted') ORDER BY job_id")  # the partial index
        return np.array([job_id for (job_id,) in rows], dtype=np.int64)

    def stage(self, job_ids: np.ndarray) -> tuple[PrivacyStage, _Snapshot]:
        """The admission stage over the undecided claims of ``job_ids`` (claim ``k`` is ``job_ids[k]``'s),
        starting from the ledger as the state file has it: one row read a claim."""
        ids, blocks, arrived = self._blocks()
        columns = blocks.budget.shape[1]
        rows = []
        for first in range(0, len(job_ids), 500):  # SQLite binds a few hundred parameters at most, safely
            chunk = job_ids[first:first + 500].tolist()
            rows += self.store.rows(
                f"SELECT job_id, state, weight, arrived, blocks, demand, held FROM privacy_claims WHERE job_id IN"
                f" ({','.join('?' * len(chunk))})", chunk)
        order = {int(job_id): k for k, job_id in enumerate(job_ids.tolist())}
        n = len(job_ids)
        state = np.zeros(n, dtype=np.int8)
        arrived_s = np.full(n, np.nan)
        weight = np.ones(n)
        block_of: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * n
        demand_of = np.zeros((n, columns))
        held_of: list[np.ndarray | None] = [None] * n
        for job_id, claim_state, w, at, blob, amounts, portions in rows:
            k = order[job_id]
            state[k], weight[k] = _TO_STAGE[claim_state], w
            arrived_s[k] = math.nan if at is None else at
            block_of[k] = np.frombuffer(blob or b"", dtype=_BLOCK_ID)
            demand_of[k] = _demand_of(amounts, columns)
            held_of[k] = None if portions is None else np.frombuffer(portions, dtype=_AMOUNT).reshape(-1, columns)
        lengths = np.fromiter(map(len, block_of), dtype=np.int64, count=n)
        start = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        entry_blocks = np.concatenate(block_of).astype(np.int64) if n else np.zeros(0, dtype=np.int64)
        demand = np.repeat(demand_of, lengths, axis=0)
        held = np.zeros((int(start[-1]), columns))
        for k in (k for k, portion in enumerate(held_of) if portion is not None and len(portion) == lengths[k]):
            held[start[k]:start[k + 1]] = held_of[k]
        claims = Claims(start, np.searchsorted(ids, entry_blocks), demand, weight)  # ids ascend: each block's place
        granted, consumed = self._taken(ids, blocks)
        lost, retired = self._lost_and_retired(ids, blocks)
        rr = self.policy.name == "rr"
        ledger = Ledger(granted + consumed, arrived, state, arrived_s, held if rr else None, lost, retired)
        stage = PrivacyStage(blocks, claims, self.policy, self.timeout_s, ledger=ledger,
                             rejected_portions=self.rejected_portions, retire_blocks=True)  # as the simulator's
        return stage, _Snapshot(job_ids, state, arrived.copy(), ids, held if rr else None, lost.copy(), retired.copy())

    def record(self, stage: PrivacyStage, before: _Snapshot, now: float) -> None:
        """Write what ``stage`` decided since it was built (``before``): claims arrived, granted,
        rejected; blocks' arrived claims, lost portions and retirement; round robin's portions; an event for
        each grant and rejection."""
        changed = np.flatnonzero(stage.state != before.state)
        moved_blocks = np.flatnonzero(stage.arrived_claims != before.arrived_claims)
        ended_blocks = np.flatnonzero(np.any(stage.lost != before.lost, axis=1) | (stage.retired != before.retired))
        held_changed = None
        if before.held is not None and stage.accumulated is not None:
            held_changed = np.flatnonzero(np.any(stage.accumulated != before.held, axis=1))
        if (not len(changed) and not len(moved_blocks) and not len(ended_blocks)
                and (held_changed is None or not len(held_changed))):
            return
        names = stage.blocks.name
        with self.store.transaction() as conn:
            for k in changed.tolist():
                job_id, new = int(before.job_ids[k]), _OF_STAGE[ClaimState(int(stage.state[k]))]
                arrived = None if math.isnan(stage.arrived_s[k]) else float(stage.arrived_s[k])
                decided = now if new in ("granted", "rejected") else None
                reason = stage.rejected_because.get(k, "")
                conn.execute("UPDATE privacy_claims SET state = ?, arrived = ?, decided = ?, reason = ? WHERE job_id = ?",
                             (new, arrived, decided, reason, job_id))
                if new == "rejected":  # settled: its blocks are no longer read
                    conn.execute("UPDATE privacy_claims SET blocks = NULL, held = NULL WHERE job_id = ?", (job_id,))
                if new == "granted":
                    blocks = names[stage.claims.block[stage.claims.start[k]:stage.claims.start[k + 1]]]
                    self.store.add_event(now, job_id, "privacy", f"budget granted on {', '.join(map(str, blocks))}")
                elif new == "rejected":
                    self.store.add_event(now, job_id, "privacy", reason)
            conn.executemany("UPDATE privacy_blocks SET arrived_claims = ? WHERE id = ?",
                             [(int(stage.arrived_claims[b]), int(before.block_ids[b])) for b in moved_blocks.tolist()])
            conn.executemany("UPDATE privacy_blocks SET lost = ?, retired = ? WHERE id = ?",
                             [(_demand_text(stage.lost[b]) if stage.lost[b].any() else "", int(stage.retired[b]),
                               int(before.block_ids[b])) for b in ended_blocks.tolist()])
            for b in np.flatnonzero(stage.retired & ~before.retired).tolist():
                self.store.add_event(now, None, "block", f"{names[b]} retired: its budget is all unlocked and handed out")
            if held_changed is not None and len(held_changed):
                start = stage.claims.start
                conn.executemany("UPDATE privacy_claims SET held = ? WHERE job_id = ? AND state IN ('pending', 'waiting')",
                                 [(np.ascontiguousarray(stage.accumulated[start[k]:start[k + 1]], dtype=_AMOUNT)
                                   .tobytes(), int(before.job_ids[k]))
                                  for k in np.unique(stage.claims.owner[held_changed]).tolist()])

    def settle(self, job_ids: list[int] | None = None) -> None:
        """Consume the granted claims whose jobs have started (at their first start); return those
        granted, and withdraw those pending or waiting, whose jobs ended without ever starting (at
        their end). ``job_ids``: only these jobs' claims (None: every open claim)."""
        if not (job_ids if job_ids is not None else
                self.store.rows(f"SELECT 1 FROM privacy_claims WHERE state IN {_OPEN_SQL} LIMIT 1")):
            return
        only = "" if job_ids is None else f" AND c.job_id IN ({','.join(str(int(i)) for i in job_ids)})"
        # the open states named, so that SQLite reads the few open claims through their partial index
        started = f"c.state IN {_OPEN_SQL} AND c.state = 'granted' AND j.started IS NOT NULL{only}"
        ended = f"c.state IN {_OPEN_SQL} AND j.started IS NULL AND j.status IN {_ENDED_SQL}{only}"
        with self.store.transaction() as conn:
            consuming = conn.execute(f"SELECT c.blocks, c.demand FROM privacy_claims c JOIN jobs j ON j.id = c.job_id"
                                     f" WHERE {started}").fetchall()
            if consuming:
                self._add_consumed(conn, consuming)
            conn.execute(f"INSERT INTO events (time, job_id, event, detail) SELECT j.started, c.job_id, 'privacy',"
                         f" 'budget consumed: its first attempt started' FROM privacy_claims c JOIN jobs j ON"
                         f" j.id = c.job_id WHERE {started}")
            conn.execute(f"INSERT INTO events (time, job_id, event, detail) SELECT COALESCE(j.finished, j.submitted),"
                         f" c.job_id, 'privacy', CASE c.state WHEN 'granted' THEN 'budget returned: it ended before"
                         f" it started' ELSE 'claim withdrawn: it ended before it was granted' END FROM privacy_claims"
                         f" c JOIN jobs j ON j.id = c.job_id WHERE {ended}")
            conn.execute(f"UPDATE privacy_claims AS c SET state = 'consumed', settled = j.started, blocks = NULL,"
                         f" held = NULL FROM jobs j WHERE j.id = c.job_id AND {started}")
            conn.execute(f"UPDATE privacy_claims AS c SET state = CASE c.state WHEN 'granted' THEN 'returned' ELSE"
                         f" 'withdrawn' END, settled = COALESCE(j.finished, j.submitted), blocks = NULL, held = NULL"
                         f" FROM jobs j WHERE j.id = c.job_id AND {ended}")

    def _add_consumed(self, conn, claims: list[tuple[bytes, str]]) -> None:
        """Add what ``claims`` ((blocks, demand) of each, consumed now) take of each block to the blocks' totals."""
        found = self._blocks()
        if found is None:
            return
        ids, blocks, _ = found
        consumed = self._consumed(ids, blocks)
        for blob, amounts in claims:
            place = np.searchsorted(ids, np.frombuffer(blob or b"", dtype=_BLOCK_ID))
            consumed[place] += _demand_of(amounts, consumed.shape[1])
        touched = np.unique(np.concatenate([np.searchsorted(ids, np.frombuffer(blob or b"", dtype=_BLOCK_ID))
                                            for blob, _ in claims]))
        conn.executemany("UPDATE privacy_blocks SET consumed = ? WHERE id = ?",
                         [(_demand_text(consumed[b]), int(ids[b])) for b in touched.tolist()])

    def claim_states(self, job_ids: list[int]) -> dict[int, str]:
        """The state of each of ``job_ids``' claims (jobs that claim nothing are left out)."""
        marks = ",".join("?" * len(job_ids))
        return dict(self.store.rows(f"SELECT job_id, state FROM privacy_claims WHERE job_id IN ({marks})", job_ids))

    # reading the tables ------------------------------------------------------------------------

    def _blocks(self) -> tuple[np.ndarray, Blocks, np.ndarray] | None:
        """(each block's id, the blocks as the stage takes them, claims arrived for each), in the
        order added; None: no block yet."""
        rows = self.store.rows("SELECT id, name, epsilon, delta, orders, added, arrived_claims FROM privacy_blocks"
                               " ORDER BY id")
        if not rows:
            return None
        ids, names, epsilon, delta, orders, added, arrived = zip(*rows)
        rdp = np.array([float(a) for a in orders[0].split()]) if orders[0] else None
        blocks = Blocks(np.array(names, dtype=object), np.array(added, dtype=np.float64),
                        np.array(epsilon, dtype=np.float64), np.array(delta, dtype=np.float64), rdp)
        return np.array(ids, dtype=np.int64), blocks, np.array(arrived, dtype=np.int64)

    def _taken(self, ids: np.ndarray, blocks: Blocks) -> tuple[np.ndarray, np.ndarray]:
        """([B, A] granted to jobs not started yet, [B, A] consumed by jobs that started): the granted
        summed from the granted claims' rows, the consumed as the blocks keep it."""
        columns = blocks.budget.shape[1]
        granted = np.zeros((len(ids), columns))
        for blob, amounts in self.store.rows("SELECT blocks, demand FROM privacy_claims WHERE state = 'granted'"
                                             " AND state IN ('pending', 'waiting', 'granted') ORDER BY job_id"):
            granted[np.searchsorted(ids, np.frombuffer(blob or b"", dtype=_BLOCK_ID))] += _demand_of(amounts, columns)
        return granted, self._consumed(ids, blocks)

    def _lost_and_retired(self, ids: np.ndarray, blocks: Blocks) -> tuple[np.ndarray, np.ndarray]:
        """([B, A] round robin's portions lost with rejected claims, [B] bool its retired blocks)."""
        columns = blocks.budget.shape[1]
        lost = np.zeros((len(ids), columns))
        retired = np.zeros(len(ids), dtype=bool)
        for b, (text, gone) in enumerate(self.store.rows("SELECT lost, retired FROM privacy_blocks ORDER BY id")):
            if text:
                lost[b] = _demand_of(text, columns)
            retired[b] = bool(gone)
        return lost, retired

    def _consumed(self, ids: np.ndarray, blocks: Blocks) -> np.ndarray:
        """[B, A] what the jobs that started consumed of each block."""
        columns = blocks.budget.shape[1]
        consumed = np.zeros((len(ids), columns))
        for b, (text,) in enumerate(self.store.rows("SELECT consumed FROM privacy_blocks ORDER BY id")):
            if text:
                consumed[b] = _demand_of(text, columns)
        return consumed


_BLOCK_ID = np.dtype("<i8")  # a claim's blocks: their privacy_blocks ids, in the claim's order
_AMOUNT = np.dtype("<f8")  # round robin's portions held: [blocks, columns], row after row


def _block_bytes(block_ids: np.ndarray) -> bytes:
    return np.ascontiguousarray(block_ids, dtype=_BLOCK_ID).tobytes()


def _demand_text(demand: np.ndarray) -> str:
    """A demand (or a block's consumed total) in its columns, as text that reads back exactly."""
    return json.dumps([float(x) for x in np.asarray(demand, dtype=np.float64).tolist()])


def _demand_of(text: str | None, columns: int) -> np.ndarray:
    values = np.asarray(json.loads(text) if text else [], dtype=np.float64)
    return values if len(values) == columns else np.zeros(columns)


def _orders_text(orders) -> str:
    return "" if orders is None else " ".join(f"{float(a):g}" for a in orders)


def _accounting_words(orders: str) -> str:
    return f"under Rényi accounting at orders {orders}" if orders else "under ε-δ accounting"
