"""How privacy budget is unlocked and in which order waiting claims are granted.

Every policy is two choices: how much of each block's budget is unlocked (all of it at once;
1/N more with each claim that arrives for the block, as DPF-N; or over T seconds from the
block's arrival, as DPF-T) and how the unlocked budget goes to the waiting claims (first come
first served; smallest dominant share first, as DPF; equal portions, as round robin; or the
most claims per unit of budget, after DPack). See docs/privacy.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from apportion.core.privacy import Blocks, Claims

PRIVACY_POLICIES = ("fcfs", "rr", "dpf-n", "dpf-t", "pack")
SUMMARIES = {
    "fcfs": "every block's budget unlocked when it arrives; claims granted in arrival order",
    "rr": "budget unlocked as DPF-N (with N) or DPF-T (with T), shared equally among the waiting claims",
    "dpf-n": "1/N of a block's budget unlocked with each claim that arrives for it; smallest dominant share first",
    "dpf-t": "a block's budget unlocked evenly over T seconds from its arrival; smallest dominant share first",
    "pack": "unlocked as DPF-N or DPF-T; the claims that take the least of the scarce budget per unit of weight first",
}


@dataclass(frozen=True)
class PrivacyPolicy:
    """A privacy policy by name, with its unlocking parameter: ``n`` claims or ``t_s`` seconds."""

    name: str
    n: int | None = None
    t_s: float | None = None

    def __post_init__(self) -> None:
        if type(self) is not PrivacyPolicy:  # a plugin's subclass: its own rules (make_privacy_policy)
            return
        if self.name not in PRIVACY_POLICIES:
            raise ValueError(f"unknown privacy policy '{self.name}' (known: {', '.join(PRIVACY_POLICIES)})")
        if self.n is not None and self.n < 1:
            raise ValueError(f"privacy policy {self.name}: N must be at least 1, got {self.n}")
        if self.t_s is not None and not self.t_s > 0:
            raise ValueError(f"privacy policy {self.name}: T must be more than 0 seconds, got {self.t_s}")
        if self.name == "dpf-n" and self.n is None:
            raise ValueError("privacy policy dpf-n needs N (the claims over which a block unlocks)")
        if self.name == "dpf-t" and self.t_s is None:
            raise ValueError("privacy policy dpf-t needs T (the seconds over which a block unlocks)")
        if self.name in ("rr", "pack") and (self.n is None) == (self.t_s is None):
            raise ValueError(f"privacy policy {self.name} needs one of N (unlock by claims) or T (unlock by time)")

    @property
    def unlocks_by(self) -> str:
        """"all" at arrival, by "claims" (N) or by "time" (T)."""
        if self.name == "fcfs" or (self.n is None and self.t_s is None):  # a plugin given neither: as fcfs
            return "all"
        if self.name == "dpf-n" or (self.name != "dpf-t" and self.n is not None):
            return "claims"
        return "time"

    def unlocked_fraction(self, blocks: Blocks, arrived_claims: np.ndarray, now_s: float) -> np.ndarray:
        """[B] the fraction of each block's budget unlocked at ``now_s`` (0 before it arrives)."""
        here = blocks.arrival_s <= now_s
        if self.unlocks_by == "all":
            return here.astype(np.float64)
        if self.unlocks_by == "claims":
            return np.where(here, np.minimum(arrived_claims / self.n, 1.0), 0.0)
        return np.clip((now_s - blocks.arrival_s) / self.t_s, 0.0, 1.0)

    def order(self, waiting: np.ndarray, claims: Claims, shares: np.ndarray, room: np.ndarray,
              arrived_s: np.ndarray, rdp: bool) -> np.ndarray:
        """The claims of ``waiting`` in the order this policy grants them (``shares``: every claim's
        dominant share, ``dominant_share``)."""
        if self.name == "fcfs":
            return waiting[np.lexsort((waiting, arrived_s[waiting]))]
        if self.name == "pack":
            cost = packing_cost(claims, waiting, room, rdp)
            efficiency = claims.weight[waiting] / np.maximum(cost, 1e-300)
            return waiting[np.lexsort((waiting, arrived_s[waiting], -efficiency))]
        return waiting[np.lexsort((waiting, arrived_s[waiting], shares[waiting]))]


def packing_cost(claims: Claims, waiting: np.ndarray, room: np.ndarray, rdp: bool) -> np.ndarray:
    """[k] what each waiting claim takes of the budget left unlocked: the sum over its blocks of
    its demand over the block's room (DPack's area), each block measured in one column. Under
    Rényi that column is the order at which the most of the waiting claims on the block would fit
    smallest first; under ε-δ the larger of the ε and δ shares counts."""
    entries = claims.entries(waiting)
    local = np.repeat(np.arange(len(waiting)), claims.start[waiting + 1] - claims.start[waiting])
    block, demand = claims.block[entries], claims.demand[entries]
    free = np.maximum(room, 0.0)[block]
    share = np.divide(demand, free, out=np.full(demand.shape, np.inf), where=free > 0)
    share[demand <= 0] = 0.0
    if rdp:
        column = _most_claims_column(block, demand, np.maximum(room, 0.0))
        per_entry = share[np.arange(len(entries)), column[block]]
    else:
        per_entry = share.max(axis=1)
    cost = np.zeros(len(waiting))
    np.add.at(cost, local, per_entry)
    return cost


def _most_claims_column(block: np.ndarray, demand: np.ndarray, free: np.ndarray) -> np.ndarray:
    """[B] for each block, the column (order) in which the most of these entries fit smallest first."""
    counts = np.zeros(free.shape, dtype=np.int64)
    for column in range(free.shape[1]):
        order = np.lexsort((demand[:, column], block))
        sorted_block, sorted_demand = block[order], demand[order, column]
        running = np.cumsum(sorted_demand)
        first = np.searchsorted(sorted_block, sorted_block, side="left")
        before = np.where(first > 0, running[np.maximum(first - 1, 0)], 0.0)
        within = running - before
        np.add.at(counts[:, column], sorted_block, within <= free[sorted_block, column] + 1e-12)
    return counts.argmax(axis=1)


def water_fill(need: np.ndarray, group: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """[e] what each entry receives when each group's ``pool`` is shared equally among its entries,
    none receiving more than its ``need`` (max-min fair division, round robin's portions)."""
    given = np.zeros(len(need))
    if not len(need):
        return given
    scale = float(need.max()) * 2.0 + 1.0  # one sort key: the group, then the need within it
    order = np.argsort(group * scale + need, kind="stable")
    g, x = group[order], need[order]
    first = np.searchsorted(g, g, side="left")
    size = np.bincount(g, minlength=len(pool))[g]
    position = np.arange(len(x)) - first
    running = np.cumsum(x)
    before = running - x - np.where(first > 0, running[np.maximum(first - 1, 0)], 0.0)  # sum of smaller needs
    cost = before + (size - position) * x  # everyone raised to this entry's need
    full = cost <= pool[g] + 1e-15
    satisfied = np.bincount(g, weights=full, minlength=len(pool)).astype(np.int64)
    spent = np.bincount(g, weights=np.where(full, x, 0.0), minlength=len(pool))
    left = np.maximum(size - satisfied[g], 1)
    level = (pool[g] - spent[g]) / left
    given[order] = np.where(full, x, np.maximum(level, 0.0))
    return given


def make_privacy_policy(name: str, n: int | None = None, t_s: float | None = None) -> PrivacyPolicy:
    """The privacy policy ``name`` with its N or T: a built-in, or a plugin (an entry point of
    ``apportion.privacy`` or ``path/file.py:Name``) naming a ``PrivacyPolicy`` subclass, built with
    ``(name, n, t_s)``, that overrides ``order`` (and ``unlocked_fraction``, ``unlocks_by`` if it
    unlocks budget otherwise). ValueError naming the known ones when nobody declares ``name``."""
    if name in PRIVACY_POLICIES:
        return PrivacyPolicy(name, n, t_s)
    from apportion.plugins import PluginError, from_entry_point, from_file, is_file_spec

    plugin = from_file("privacy", name) if is_file_spec(name) else from_entry_point("privacy", name)
    if plugin is None:
        raise ValueError(f"unknown privacy policy '{name}' (known: {', '.join(PRIVACY_POLICIES)})")
    where = f"privacy plugin {plugin.name} ({plugin.source})"
    if not (isinstance(plugin.value, type) and issubclass(plugin.value, PrivacyPolicy)):
        raise PluginError(f"{where}: is not a subclass of apportion.mechanism.privacy_policies.PrivacyPolicy")
    try:
        policy = plugin.value(name, n, t_s)
    except Exception as exc:  # noqa: BLE001 - the plugin's own code
        raise PluginError(f"{where}: building it failed: {type(exc).__name__}: {exc}") from None
    order = policy.order

    def checked_order(waiting, *args):
        try:
            chosen = np.asarray(order(waiting, *args), dtype=np.int64)
        except Exception as exc:  # noqa: BLE001 - named, never a traceback from the round
            raise PluginError(f"{where}: order() raised {type(exc).__name__}: {exc}") from None
        if chosen.ndim != 1 or len(np.unique(chosen)) != len(chosen) or not np.isin(chosen, waiting).all():
            raise PluginError(f"{where}: order() returned claims that are not the waiting ones, each once")
        return chosen

    object.__setattr__(policy, "order", checked_order)
    return policy
