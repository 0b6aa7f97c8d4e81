"""The privacy budget's tables (their SQL is resources/privacy/ledger.py's): data blocks with a
privacy budget, and each job's claim on them. Kept here until that package holds its own schema:
then this family leaves ``state.SCHEMA_FAMILIES`` and the package adds its own in one line."""

from __future__ import annotations

from apportion.serve.store.schema import TableFamily, add_columns

SCHEMA = """
CREATE TABLE IF NOT EXISTS privacy_blocks (  -- data blocks with a privacy budget (privacy_ledger.py)
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- in the order added: a block's place in the ledger
    name TEXT NOT NULL UNIQUE,
    epsilon REAL NOT NULL,              -- the guarantee (ε, δ) training on it must keep
    delta REAL NOT NULL,
    orders TEXT NOT NULL DEFAULT '',    -- Rényi orders, space-separated; '' for ε-δ accounting
    added REAL NOT NULL,                -- its arrival: budget unlocks from here
    arrived_claims INTEGER NOT NULL DEFAULT 0, -- claims that arrived for it (by N unlocks 1/N with each)
    consumed TEXT NOT NULL DEFAULT ''   -- what jobs that started consumed of it, a JSON list over its columns; '' none
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
_ADDED_COLUMNS = {  # table -> its columns added since (the ledger moves what older files kept into them)
    "privacy_blocks": {"consumed": "TEXT NOT NULL DEFAULT ''"},
    "privacy_claims": {"blocks": "BLOB", "demand": "TEXT NOT NULL DEFAULT ''", "held": "BLOB",
                       "cells": "INTEGER NOT NULL DEFAULT 0"},
}


def _migrate(store) -> None:
    with store.transaction() as conn:
        for table, columns in _ADDED_COLUMNS.items():
            add_columns(conn, table, columns)


PRIVACY = TableFamily("privacy", SCHEMA, _migrate)
