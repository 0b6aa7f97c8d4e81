"""The instances a server rents, decided each round: none on an owned cluster, market instances on a rented one.

A ``Provisioner`` sits beside the executor. Each round it is given the jobs waiting and running
(``Demand``: GPUs, speed on each of the server's GPU types, steps left) and decides what to hold;
``capacity()`` is the GPUs of each type that have joined, which the round takes as the slots
online (the server's slots are the most it may hold; the rest are offline that round).

``RentedProvisioner`` asks the same provisioning policies as ``simulate --provisioning``
(``policies/provisioning``) over a ``RentalView`` of the jobs against the market's prices now:
each job rents the instances of its chosen type for itself, as in the rented replay, up to the
server's slots of that GPU type. It charges each instance type its price × the time it was held,
and notices a held instance that went away (a spot loss): the jobs on that type choose again,
with that type's loss in the view. Subclasses say how instances are asked for (``_ask``) and
which have joined (``_present``): Ray's autoscaler (``serve/app/on_ray.py``) or a fake
(``serve/resources/rental/fake.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from apportion.core.market import Market
from apportion.policies.provisioning import ProvisioningPolicy, RentalView, checked_choice


@dataclass(frozen=True)
class Demand:
    """The jobs waiting and running, as arrays over them: what a provisioner rents for."""

    job_id: np.ndarray  # [a] int
    gpus: np.ndarray  # [a] int
    speed: np.ndarray  # [a, T] steps/s on each of the server's GPU types at the job's size (0: cannot run there)
    remaining_steps: np.ndarray  # [a]


class Provisioner(Protocol):
    """What the server asks of whatever decides the instances it holds."""

    name: str

    def provision(self, demand: Demand, now: float) -> None:
        """Decide what to hold for ``demand`` at ``now`` (a round's start) and ask the cluster for it."""
        ...

    def poll(self, now: float) -> bool:
        """Notice instances that joined or went away since the last call (and charge the time held);
        True when the GPUs online changed."""
        ...

    def capacity(self) -> dict[str, int] | None:
        """GPUs of each GPU type held and joined now; None: all of the server's slots (an owned cluster)."""
        ...

    def held(self) -> dict[str, int]:
        """Instances held now, by instance type (``cloud/region/name/market``)."""
        ...

    def ledger(self) -> dict[str, dict[str, float]]:
        """Per instance type ever held: ``{"usd": dollars spent, "instance_s": instance-seconds held}``."""
        ...


class NoProvisioner:
    """An owned cluster: every slot is there, always, and costs nothing here (today's behaviour)."""

    name = "none"

    def provision(self, demand: Demand, now: float) -> None:
        """Nothing to rent."""

    def poll(self, now: float) -> bool:
        return False

    def capacity(self) -> dict[str, int] | None:
        return None

    def held(self) -> dict[str, int]:
        return {}

    def ledger(self) -> dict[str, dict[str, float]]:
        return {}


class RentedProvisioner:
    """Rents market instances for the jobs as a provisioning policy chooses them (module docstring)."""

    def __init__(self, market: Market, policy: ProvisioningPolicy, gpu_types: tuple[str, ...],
                 slots: dict[str, int], round_s: float, origin_s: float | None = None) -> None:
        """``gpu_types``/``slots``: the server's types and slots of each (the most held of each type);
        ``origin_s``: the wall-clock time of the market's time 0 (default: the first call)."""
        self.market, self.policy, self.round_s = market, policy, round_s
        self.name = policy.name
        self.gpu_types = tuple(gpu_types)
        self.slots = np.array([slots.get(t, 0) for t in self.gpu_types], dtype=np.int64)
        index = {t: i for i, t in enumerate(self.gpu_types)}
        self.type_gpu = np.array([index.get(t, -1) for t in market.gpu_type], dtype=np.int64)  # [K], -1: not ours
        self.labels = market.labels
        self.origin_s = origin_s
        k = len(market)
        self.asked = np.zeros(k, dtype=np.int64)  # instances asked of each type
        self.joined = np.zeros(k, dtype=np.int64)  # of them, joined (the GPUs present, given to types in order)
        self.usd = np.zeros(k)
        self.instance_s = np.zeros(k)
        self.losses = np.zeros(k, dtype=np.int64)
        self.last_lost_s = np.full(k, -np.inf)  # market time of each type's last loss
        self.holders = np.zeros(0, dtype=np.int64)  # ids of the jobs holding a type, ascending
        self.holder_type = np.zeros(0, dtype=np.int64)  # the type each holds
        self.holder_since = np.zeros(0)  # the market time it was chosen
        self.settled_s: float | None = None  # market time charged up to

    def restore(self, ledger: dict[str, dict[str, float]]) -> None:
        """Carry on the dollars and time of an earlier run (as ``ledger()`` gave them)."""
        at = {label: k for k, label in enumerate(self.labels)}
        for label, spent in ledger.items():
            if label in at:
                self.usd[at[label]] += float(spent.get("usd", 0.0))
                self.instance_s[at[label]] += float(spent.get("instance_s", 0.0))

    # what subclasses say ----------------------------------------------------------------------

    def _ask(self, wanted: np.ndarray, now: float) -> None:
        """Ask the cluster for ``wanted[k]`` instances of each type (the whole request, replacing the last)."""
        raise NotImplementedError

    def _present(self, now: float) -> dict[str, int]:
        """GPUs of each GPU type that have joined the cluster now."""
        raise NotImplementedError

    # the round ---------------------------------------------------------------------------------

    def poll(self, now: float) -> bool:
        before = self.joined.copy()
        self._settle(now)
        return not np.array_equal(before, self.joined)

    def provision(self, demand: Demand, now: float) -> None:
        self._settle(now)
        t = self._market_time(now)
        ids = np.asarray(demand.job_id, dtype=np.int64)
        view = self._view(demand, t)
        choice = checked_choice(self.policy, view)
        choice = self._within_slots(choice, view.instances)
        on = choice >= 0
        order = np.argsort(ids[on], kind="stable")
        self.holders, self.holder_type = ids[on][order], choice[on][order]
        self.holder_since = np.where(choice == view.held, view.chosen_at_s, t)[on][order]
        wanted = np.bincount(choice[on], weights=view.instances[np.flatnonzero(on), choice[on]],
                             minlength=len(self.market)).astype(np.int64)
        if not np.array_equal(wanted, self.asked):
            self.asked = wanted
            self._ask(wanted, now)
            self._attribute(self._present(now))

    def capacity(self) -> dict[str, int] | None:
        gpus = np.zeros(len(self.gpu_types), dtype=np.int64)
        ours = self.type_gpu >= 0
        np.add.at(gpus, self.type_gpu[ours], (self.joined * self.market.gpus)[ours])
        return {t: int(n) for t, n in zip(self.gpu_types, np.minimum(gpus, self.slots))}

    def held(self) -> dict[str, int]:
        return {str(self.labels[k]): int(self.joined[k]) for k in np.flatnonzero(self.joined)}

    def ledger(self) -> dict[str, dict[str, float]]:
        return {str(self.labels[k]): {"usd": float(self.usd[k]), "instance_s": float(self.instance_s[k])}
                for k in np.flatnonzero(self.instance_s > 0)}

    def spot_losses(self) -> dict[str, int]:
        """Instances taken away while held, by instance type (this run)."""
        return {str(self.labels[k]): int(self.losses[k]) for k in np.flatnonzero(self.losses)}

    # inside ------------------------------------------------------------------------------------

    def _market_time(self, now: float) -> float:
        if self.origin_s is None:
            self.origin_s = now
        return max(now - self.origin_s, 0.0)

    def _settle(self, now: float) -> None:
        """Charge the instances held since the last call, then see which are there now; a held one gone is a loss."""
        t = self._market_time(now)
        if self.settled_s is not None and t > self.settled_s:
            held = np.flatnonzero(self.joined)
            if len(held):
                spent = self.market.cost(held, np.full(len(held), self.settled_s), np.full(len(held), t))
                self.usd[held] += self.joined[held] * spent
                self.instance_s[held] += self.joined[held] * (t - self.settled_s)
        self.settled_s = t if self.settled_s is None else max(self.settled_s, t)
        before = self.joined.copy()
        self._attribute(self._present(now))
        lost = np.flatnonzero(self.joined < np.minimum(before, self.asked))
        if len(lost):
            self.losses[lost] += (np.minimum(before, self.asked) - self.joined)[lost]
            self.last_lost_s[lost] = t
            kept = ~np.isin(self.holder_type, lost)  # the jobs on a type that lost instances choose again
            self.holders, self.holder_type, self.holder_since = \
                self.holders[kept], self.holder_type[kept], self.holder_since[kept]

    def _attribute(self, present: dict[str, int]) -> None:
        """The GPUs present of each GPU type, given to the instance types asked of it, in type order."""
        left = np.array([present.get(t, 0) for t in self.gpu_types], dtype=np.int64)
        joined = np.zeros(len(self.market), dtype=np.int64)
        for k in np.flatnonzero((self.asked > 0) & (self.type_gpu >= 0)):
            g = self.type_gpu[k]
            joined[k] = min(self.asked[k], left[g] // self.market.gpus[k])
            left[g] -= joined[k] * self.market.gpus[k]
        self.joined = joined

    def _view(self, demand: Demand, t: float) -> RentalView:
        market, n = self.market, len(demand.job_id)
        ours = self.type_gpu >= 0
        speed = np.where(ours[None, :], np.asarray(demand.speed)[:, np.maximum(self.type_gpu, 0)], 0.0)
        ids = np.asarray(demand.job_id, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.holders, ids), max(len(self.holders) - 1, 0))
        holding = (self.holders[at] == ids) if len(self.holders) else np.zeros(n, dtype=bool)
        held = np.where(holding, self.holder_type[at] if len(self.holders) else -1, -1)
        chosen_at = np.where(holding, self.holder_since[at] if len(self.holders) else -np.inf, -np.inf)
        return RentalView(
            now_s=t, round_s=self.round_s, rows=np.arange(n), held=held, chosen_at_s=chosen_at, speed=speed,
            instances=-(-np.asarray(demand.gpus, dtype=np.int64)[:, None] // market.gpus[None, :]),
            price_per_hour=market.prices_at(t), is_spot=market.is_spot,
            remaining_steps=np.asarray(demand.remaining_steps, dtype=np.float64),
            overhead_s=np.zeros((n, len(market))), move_usd=np.zeros((n, len(market))),
            deadline_s=np.full(n, np.nan), worst_restart_s=0.0, last_preempted_s=self.last_lost_s,
        )

    def _within_slots(self, choice: np.ndarray, instances: np.ndarray) -> np.ndarray:
        """``choice`` with the jobs whose instances would take their GPU type past the server's slots
        waiting (-1), the earlier jobs first."""
        on = np.flatnonzero(choice >= 0)
        gpus = np.zeros(len(choice), dtype=np.int64)
        gpus[on] = instances[on, choice[on]] * self.market.gpus[choice[on]]
        out = choice.copy()
        kind = np.where(choice >= 0, self.type_gpu[np.maximum(choice, 0)], -1)
        for g in range(len(self.gpu_types)):
            mine = np.flatnonzero(kind == g)
            out[mine[np.cumsum(gpus[mine]) > self.slots[g]]] = -1
        return out


def demand_of(table: dict, active: tuple[str, ...], gpu_types: tuple[str, ...], rate) -> Demand:
    """The ``Demand`` of the round table's jobs whose status is in ``active``; ``rate(kind, gpu_type,
    gpus, allowed)`` their steps/s (the round's estimates), asked once per job shape."""
    status = np.asarray(table["status"], dtype=object)
    rows = np.flatnonzero(np.isin(status, active)) if len(status) else np.zeros(0, dtype=np.int64)
    if not len(rows):
        empty = np.zeros(0, dtype=np.int64)
        return Demand(empty, empty, np.zeros((0, len(gpu_types))), np.zeros(0))

    def column(name: str, dtype) -> np.ndarray:
        return np.asarray(table[name], dtype=dtype)[rows]

    gpus = column("gpus", np.int64)
    kinds, kind_code = np.unique(column("kind", str), return_inverse=True)
    alloweds, allowed_code = np.unique(column("gpu_types", object).astype(str), return_inverse=True)
    sizes, size_code = np.unique(gpus, return_inverse=True)
    shape = (kind_code * len(alloweds) + allowed_code) * len(sizes) + size_code
    shapes, inverse = np.unique(shape, return_inverse=True)
    per_shape = np.zeros((len(shapes), len(gpu_types)))
    for k, code in enumerate(shapes.tolist()):
        rest, size = divmod(code, len(sizes))
        kind, allowed = divmod(rest, len(alloweds))
        allowed_types = tuple(alloweds[allowed].split(",")) if alloweds[allowed] else None
        per_shape[k] = [rate(str(kinds[kind]), t, int(sizes[size]), allowed_types) for t in gpu_types]
    steps_left = column("total_steps", np.float64) - column("steps_done", np.float64)
    return Demand(job_id=column("id", np.int64), gpus=gpus, speed=per_shape[inverse.ravel()],
                  remaining_steps=np.maximum(steps_left, 0.0))
