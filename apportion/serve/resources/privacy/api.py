"""What privacy budget adds to the server's API: the ``/blocks`` routes (add blocks, read their budgets),
the check of a ``POST /blocks`` body, and what the API document says of them and of a job's ``privacy``.

The routes are rows of the server's one table (``http/routes.py`` lays them out); their handlers answer
from the server as every handler does, reaching the ledger through the scheduler's ``add_blocks`` and
``blocks`` (``resource.py``'s parts)."""

from __future__ import annotations

from typing import Any

from fastapi import Body

from apportion.core.errors import InputError
from apportion.serve.base.bounds import MAX_NAME, json_object
from apportion.serve.base.schema_words import NAMED, WORD, text
from apportion.serve.jobs.privacy_spec import (
    MAX_BLOCKS_ADDED, MAX_BUDGET, MAX_CLAIM_BLOCKS, MAX_ORDERS, BlockSpec, block_from_mapping,
)
from apportion.serve.resources.base import STORES, RouteRow

SOURCE = "request"


def blocks_body(body: object) -> list[BlockSpec]:
    """The ``blocks`` of ``POST /blocks``: 1 to MAX_BLOCKS_ADDED blocks, each ``{name, epsilon, delta[,
    rdp_orders]}``, no name twice."""
    items = json_object(body, SOURCE).get("blocks")
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_BLOCKS_ADDED:
        raise InputError(SOURCE, f"must be a list of 1 to {MAX_BLOCKS_ADDED} blocks", field="blocks")
    checked = [block_from_mapping(item, SOURCE, f"blocks[{i}].") for i, item in enumerate(items)]
    seen: set[str] = set()
    for i, block in enumerate(checked):
        if block.name in seen:
            raise InputError(SOURCE, f"block '{block.name}' is named twice", field=f"blocks[{i}].name")
        seen.add(block.name)
    return checked


def add_blocks(at, body: Any = Body(...)) -> dict:
    """Add privacy blocks (admins): ``{"blocks": [{"name", "epsilon", "delta"[, "rdp_orders"]}, ...]}``."""
    added = blocks_body(body)
    at.scheduler.add_blocks(added)
    return {"added": [block.name for block in added]}


def blocks(at) -> dict:
    """The privacy blocks and their budgets: unlocked, granted (to jobs not started yet), consumed, left."""
    return at.scheduler.blocks()


ROUTES = (
    RouteRow("post", "/blocks", add_blocks, "admin", "adding privacy blocks", dict(
        tag="server", summary="Add privacy blocks",
        description="Admins only: data blocks with a privacy budget (docs/privacy.md), all or none, each arriving "
                    "now; one accounting (ε-δ, or Rényi at the same orders) a server.", errors=STORES, body="Blocks",
        refused="A field that does not fit, named in `field`; besides what the schema says, a block name used "
                "before on this server or twice in the call, `rdp_orders` other than those of the blocks already "
                "held, and a `delta` of 0 with `rdp_orders`.")),
    RouteRow("get", "/blocks", blocks, "user", doc=dict(
        tag="server", summary="The privacy blocks",
        description="The privacy policy and each block's budget in ε: unlocked, granted (to jobs not started yet), "
                    "consumed (by jobs that started) and left; its claims arrived and waiting, as `apportion "
                    "blocks list`.")),
)

BLOCKS = {
    "type": "object",
    "title": "Blocks",
    "description": "Privacy blocks to add, all or none; each arrives (its budget starts to unlock) now.",
    "required": ["blocks"],
    "properties": {"blocks": {"type": "array", "minItems": 1, "maxItems": MAX_BLOCKS_ADDED, "items": {
        "type": "object", "required": ["name", "epsilon", "delta"],
        "dependentSchemas": {"rdp_orders": {"properties": {"delta": {"exclusiveMinimum": 0}}}},
        "properties": {"name": text("The block's name: one word, never used before on this server.", pattern=WORD),
                       "epsilon": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_BUDGET,
                                   "description": "The ε its budget keeps."},
                       "delta": {"type": "number", "minimum": 0, "exclusiveMaximum": 1,
                                 "description": "The δ its budget keeps (more than 0 with rdp_orders)."},
                       "rdp_orders": {"type": "array", "minItems": 1, "maxItems": MAX_ORDERS,
                                      "items": {"type": "number", "exclusiveMinimum": 1, "maximum": MAX_BUDGET},
                                      "description": "Account in Rényi DP at these orders (every block the "
                                                     "same)."}}}}},
}

CLAIM = {"type": "object", "required": ["blocks"],
         "description": "The privacy budget it claims of the server's blocks (docs/privacy.md): blocks, "
                        "then epsilon and delta, or rdp {order: epsilon} at the blocks' orders; weight.",
         "properties": {"blocks": {"type": "array", "items": {"type": "string", "maxLength": MAX_NAME,
                                                              "pattern": NAMED},
                                   "minItems": 1, "maxItems": MAX_CLAIM_BLOCKS, "uniqueItems": True},
                        "epsilon": {"type": "number", "minimum": 0}, "delta": {"type": "number", "minimum": 0},
                        "rdp": {"type": "object", "additionalProperties": {"type": "number", "minimum": 0}},
                        "weight": {"type": "number", "exclusiveMinimum": 0}}}

