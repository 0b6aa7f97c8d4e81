"""A job file's ``privacy:`` (the budget a job claims of the server's data blocks) and a block as
``apportion blocks add`` gives it, each checked field by field (docs/privacy.md).

```yaml
privacy:
  blocks: [mon, tue]      # the blocks it trains on (names given with `apportion blocks add`)
  epsilon: 0.5            # what it takes of each, under ε-δ accounting
  delta: 1e-7             # default 0
  # rdp: {2: 0.1, 4: 0.2} # instead: its Rényi curve, at exactly the blocks' orders
  weight: 1               # what granting it is worth to the pack policy; default 1
```

Whether the blocks exist, and whether the claim could ever fit in what they have left, is the
server's to say at submit (``privacy_ledger.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from apportion.core.errors import InputError
from apportion.serve.base.bounds import check_count, check_fields, check_line
from apportion.serve.base.bounds import check_number as _check_number

MAX_CLAIM_BLOCKS = 1000  # blocks one claim may name
MAX_BLOCKS_ADDED = 1000  # blocks one call of POST /blocks adds
MAX_ORDERS = 64  # Rényi orders of a block
MAX_BUDGET = 1e6  # the largest ε (or curve value) a block or a claim may give
FIELDS = ("blocks", "epsilon", "delta", "rdp", "weight")


@dataclass(frozen=True)
class ClaimSpec:
    """What a job claims: the same demand on each of its blocks, as (ε, δ) or as a Rényi curve."""

    blocks: tuple[str, ...]
    epsilon: float | None = None
    delta: float = 0.0
    rdp: tuple[tuple[float, float], ...] | None = None  # (order, ε) pairs, by order; None: ε-δ
    weight: float = 1.0

    def to_dict(self) -> dict:
        data: dict = {"blocks": list(self.blocks), "weight": self.weight}
        if self.rdp is None:
            data.update(epsilon=self.epsilon, delta=self.delta)
        else:
            data["rdp"] = {f"{order:g}": value for order, value in self.rdp}
        return data


@dataclass(frozen=True)
class BlockSpec:
    """A block to add: its name and its guarantee (ε, δ), accounted in Rényi DP at ``orders`` if given."""

    name: str
    epsilon: float
    delta: float
    orders: tuple[float, ...] | None = None

    def to_dict(self) -> dict:
        data = {"name": self.name, "epsilon": self.epsilon, "delta": self.delta}
        return data if self.orders is None else {**data, "rdp_orders": list(self.orders)}


def claim_from_mapping(value: object, source: str) -> ClaimSpec | None:
    """A job's ``privacy`` field checked (None: it claims nothing); InputError naming ``privacy.FIELD``."""
    if value is None:
        return None
    check_fields(value, FIELDS, source, field="privacy", shape="must be a mapping: {blocks: [mon, tue], epsilon: 0.5, "
                 "delta: 1e-7} or {blocks: [...], rdp: {2: 0.1, 4: 0.2}}")
    blocks = _block_names(value.get("blocks"), source)
    weight = check_number(value.get("weight", 1.0), "privacy.weight", source, least=0.0, most=MAX_BUDGET)
    if not weight > 0:
        raise InputError(source, "must be more than 0", field="privacy.weight")
    if value.get("rdp") is not None:
        if value.get("epsilon") is not None or value.get("delta") is not None:
            raise InputError(source, "a claim gives either rdp or epsilon and delta, not both", field="privacy.rdp")
        return ClaimSpec(blocks, rdp=_curve(value["rdp"], source), weight=weight)
    if value.get("epsilon") is None:
        raise InputError(source, "is required (or rdp: its Rényi curve): what the job takes of each block",
                         field="privacy.epsilon")
    epsilon = check_number(value["epsilon"], "privacy.epsilon", source, least=0.0, most=MAX_BUDGET)
    delta = check_number(value.get("delta", 0.0), "privacy.delta", source, least=0.0, most=1.0)
    if not delta < 1:
        raise InputError(source, "must be less than 1", field="privacy.delta")
    return ClaimSpec(blocks, epsilon=epsilon, delta=delta, weight=weight)


def block_from_mapping(value: object, source: str, where: str = "") -> BlockSpec:
    """One block of ``POST /blocks``: ``name``, ``epsilon``, ``delta`` and optionally ``rdp_orders``;
    InputError naming the field (``where`` before it: ``blocks[2].``)."""
    if not isinstance(value, dict):
        raise InputError(source, "a block is a mapping: {name, epsilon, delta[, rdp_orders]}", field=where.rstrip("."))
    name = value.get("name")
    if not isinstance(name, str) or not name.strip() or any(c.isspace() for c in name.strip()):
        raise InputError(source, "a block name is one word", field=f"{where}name")
    name = check_line(name.strip(), f"{where}name", source)
    epsilon = check_number(value.get("epsilon"), f"{where}epsilon", source, least=0.0, most=MAX_BUDGET)
    if not epsilon > 0:
        raise InputError(source, "a block's budget must be more than 0", field=f"{where}epsilon")
    orders = value.get("rdp_orders")
    delta = check_number(value.get("delta"), f"{where}delta", source, least=0.0, most=1.0)
    if not (0 < delta < 1 if orders is not None else delta < 1):
        raise InputError(source, f"must be {'more than 0' if orders is not None else 'from 0'} and less than 1",
                         field=f"{where}delta")
    return BlockSpec(name, epsilon, delta, None if orders is None else _orders(orders, source, f"{where}rdp_orders"))


def check_number(value: object, field: str, source: str, *, least: float, most: float) -> float:
    """bounds.check_number, taking a number written as text too (YAML reads ``1e-7`` as text)."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    return _check_number(value, field, source, least=least, most=most)


def _block_names(value: object, source: str) -> tuple[str, ...]:
    items = value.split() if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise InputError(source, "must name the blocks the job trains on: [mon, tue]", field="privacy.blocks")
    check_count(items, "privacy.blocks", source, most=MAX_CLAIM_BLOCKS, what="blocks", verb="name")
    names: list[str] = []
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item.strip():
            raise InputError(source, "a block is named by a word", field=f"privacy.blocks[{i}]")
        name = check_line(item.strip(), f"privacy.blocks[{i}]", source)
        if name in names:
            raise InputError(source, f"block '{name}' is named twice", field=f"privacy.blocks[{i}]")
        names.append(name)
    return tuple(names)


def _curve(value: object, source: str) -> tuple[tuple[float, float], ...]:
    """``{order: ε}`` as (order, ε) pairs by order."""
    if not isinstance(value, dict) or not value:
        raise InputError(source, "must map each Rényi order to the ε the job takes at it: {2: 0.1, 4: 0.2}",
                         field="privacy.rdp")
    check_count(value, "privacy.rdp", source, most=MAX_ORDERS, what="orders", verb="give")
    pairs = {}
    for key, amount in value.items():
        order = _order(key, source, "privacy.rdp")
        pairs[order] = check_number(amount, f"privacy.rdp.{order:g}", source, least=0.0, most=MAX_BUDGET)
    return tuple(sorted(pairs.items()))


def _orders(value: object, source: str, field: str) -> tuple[float, ...]:
    items = value.split() if isinstance(value, str) else value
    if not isinstance(items, list) or not items or len(items) > MAX_ORDERS:
        raise InputError(source, f"must be 1 to {MAX_ORDERS} Rényi orders, each more than 1", field=field)
    orders = sorted({_order(item, source, field) for item in items})
    return tuple(orders)


def _order(value: object, source: str, field: str) -> float:
    try:
        order = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError, OverflowError):
        order = math.nan
    if not 1 < order <= MAX_BUDGET:
        raise InputError(source, f"a Rényi order is a number more than 1, got {str(value)[:40]!r}", field=field)
    return order
