"""A rented cluster with no cloud, for tests: it records what is asked, grants it after a delay,
and can take an instance away as a spot market does."""

from __future__ import annotations

import numpy as np

from apportion.core.market import Market
from apportion.policies.provisioning import ProvisioningPolicy
from apportion.serve.resources.rental.provisioner import RentedProvisioner


class FakeProvisioner(RentedProvisioner):
    """Instances asked for join ``delay_s`` after they are missing; fewer asked are released at once."""

    def __init__(self, market: Market, policy: ProvisioningPolicy, gpu_types: tuple[str, ...],
                 slots: dict[str, int], round_s: float, *, delay_s: float = 0.0, origin_s: float | None = None) -> None:
        super().__init__(market, policy, gpu_types, slots, round_s, origin_s)
        self.delay_s = delay_s
        self.requests: list[tuple[float, dict[str, int]]] = []  # (when, instances asked of each type), every ask
        self.present = np.zeros(len(market), dtype=np.int64)  # instances that joined, by type
        self.due_at = np.full(len(market), np.inf)  # when the missing instances of each type join

    def _ask(self, wanted: np.ndarray, now: float) -> None:
        self.requests.append((now, {str(self.labels[k]): int(wanted[k]) for k in np.flatnonzero(wanted)}))

    def _present(self, now: float) -> dict[str, int]:
        self.present = np.minimum(self.present, self.asked)
        missing = self.present < self.asked
        self.due_at = np.where(missing, np.minimum(self.due_at, now + self.delay_s), np.inf)
        ready = missing & (self.due_at <= now)
        self.present[ready] = self.asked[ready]
        self.due_at[ready] = np.inf
        gpus: dict[str, int] = {}
        for k in np.flatnonzero(self.present):
            gpu_type = str(self.market.gpu_type[k])
            gpus[gpu_type] = gpus.get(gpu_type, 0) + int(self.present[k] * self.market.gpus[k])
        return gpus

    def take_away(self, label: str, count: int = 1) -> None:
        """The cloud takes back ``count`` joined instances of type ``label`` (``cloud/region/name/market``)."""
        k = list(self.labels).index(label)
        self.present[k] = max(self.present[k] - count, 0)
