"""Privacy budget as a resource: data blocks with a budget, and the claims jobs make on them.

A block's budget is a guarantee (ε, δ) that training on it must keep. Under ε-δ accounting
(basic composition) the ε and δ of every claim granted on a block add up, and a claim fits
when both sums stay within what is unlocked. Under Rényi accounting the budget is a curve over
orders α, ``ε_α = ε − ln(1/δ) / (α − 1)`` (a curve that stays under it at some α gives
(ε, δ)), the claims' curves add up order by order, and a claim fits when for some α every
block it touches has room at that α. Both are arrays with one column per accounted quantity:
``(ε, δ)`` or one ε per order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FIT_TOLERANCE = 1e-9  # budget arithmetic in floats: a claim that fits exactly must fit


@dataclass(frozen=True)
class Blocks:
    """The data blocks, as arrays over them."""

    name: np.ndarray  # [B] str
    arrival_s: np.ndarray  # [B] when each block's data arrives (seconds since the start)
    epsilon: np.ndarray  # [B] the guarantee each block must keep
    delta: np.ndarray  # [B]
    orders: np.ndarray | None = None  # [A] Rényi orders; None: ε-δ accounting

    def __len__(self) -> int:
        return len(self.name)

    @property
    def rdp(self) -> bool:
        return self.orders is not None

    @property
    def budget(self) -> np.ndarray:
        """[B, A] each block's whole budget: columns (ε, δ), or ε at each Rényi order."""
        if self.orders is None:
            return np.column_stack([self.epsilon, self.delta])
        return rdp_budget(self.epsilon, self.delta, self.orders)

    def index_of(self) -> dict[str, int]:
        """Block name -> its index."""
        return {str(name): i for i, name in enumerate(self.name.tolist())}


def rdp_budget(epsilon: np.ndarray, delta: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """[B, A] the Rényi budget at each order that keeps (ε, δ), none (0) where it is negative."""
    curve = epsilon[:, None] - np.log(1.0 / delta[:, None]) / (orders[None, :] - 1.0)
    return np.maximum(curve, 0.0)


@dataclass(frozen=True)
class Claims:
    """What each claim asks of each block, one compressed row per claim (CSR).

    Claim ``i`` asks ``demand[start[i]:start[i + 1]]`` of the blocks ``block[start[i]:start[i + 1]]``;
    a claim with no entries asks nothing (its job needs no privacy budget).
    """

    start: np.ndarray  # [n + 1] int64
    block: np.ndarray  # [m] int64 index into Blocks
    demand: np.ndarray  # [m, A] what each entry takes, in the blocks' columns
    weight: np.ndarray  # [n] what granting each claim is worth (1 each by default)

    def __len__(self) -> int:
        return len(self.start) - 1

    @property
    def owner(self) -> np.ndarray:
        """[m] the claim each entry belongs to."""
        return np.repeat(np.arange(len(self), dtype=np.int64), np.diff(self.start))

    @property
    def asks(self) -> np.ndarray:
        """[n] bool: the claim names at least one block."""
        return np.diff(self.start) > 0

    def entries(self, claims: np.ndarray) -> np.ndarray:
        """The entries of ``claims`` (claim after claim), as indices into ``block``/``demand``."""
        lengths = self.start[claims + 1] - self.start[claims]
        offsets = np.repeat(self.start[claims] - np.cumsum(lengths) + lengths, lengths)
        return offsets + np.arange(int(lengths.sum()))


def fits(room: np.ndarray, claims: Claims, which: np.ndarray, rdp: bool) -> np.ndarray:
    """[k] whether each claim in ``which`` fits ``room`` ([B, A]) on every block it touches: in
    every column (ε-δ), or in some one column on all of its blocks at once (Rényi)."""
    lengths = claims.start[which + 1] - claims.start[which]
    if not len(which):
        return np.zeros(0, dtype=bool)
    entries = claims.entries(which)
    short = claims.demand[entries] > room[claims.block[entries]] + FIT_TOLERANCE  # [e, A]
    first = np.cumsum(lengths) - lengths
    asking = lengths > 0
    short_in = np.zeros((len(which), room.shape[1]), dtype=bool)
    if asking.any():  # reduceat over each claim's run of entries (a claim without entries fits)
        short_in[asking] = np.logical_or.reduceat(short, first[asking], axis=0)
    return ~short_in.any(axis=1) if not rdp else ~short_in.all(axis=1)


def dominant_share(claims: Claims, budget: np.ndarray, rdp: bool) -> np.ndarray:
    """[n] each claim's largest share of a block's whole budget (DPF's order). Under Rényi a
    block's share is taken at the order where it is smallest (the claim's cheapest order there)."""
    share_in = np.divide(claims.demand, budget[claims.block], out=np.full(claims.demand.shape, np.inf),
                         where=budget[claims.block] > 0)
    share_in[(claims.demand <= 0) & ~np.isfinite(share_in)] = 0.0
    per_entry = share_in.min(axis=1) if rdp else share_in.max(axis=1)
    shares = np.zeros(len(claims))
    np.maximum.at(shares, claims.owner, per_entry)
    return shares
