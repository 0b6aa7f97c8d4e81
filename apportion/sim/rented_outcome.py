"""What renting cost a replay on a rented cluster: dollars by job, market and type, spot preemptions."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from apportion.core.market import MARKETS, Market


@dataclass(frozen=True)
class RentedOutcome:
    provisioning: str  # the provisioning policy's name
    market: Market
    spent_usd: np.ndarray  # [n] each job's dollars, egress included
    usd_by_type: np.ndarray  # [K] dollars paid for instances of each type
    egress_usd: float  # dollars paid moving checkpoints between regions and clouds
    spot_preemptions: np.ndarray  # [K] jobs preempted on each type by the market
    checkpoint_transfers: int  # moves whose checkpoint crossed regions
    out_of_budget: np.ndarray  # [n] bool: stopped when its spending reached its budget
    held_gpu_s: float  # GPU-seconds rented

    def by_market(self) -> dict[str, float]:
        """Dollars on instances per market (on-demand, spot)."""
        return {word: float(self.usd_by_type[self.market.market == m].sum()) for m, word in enumerate(MARKETS)}

    def by_type(self) -> dict[str, float]:
        """Dollars per instance type paid for (label → dollars), the dearest first."""
        paid = np.flatnonzero(self.usd_by_type > 0)
        paid = paid[np.argsort(-self.usd_by_type[paid], kind="stable")]
        return {str(self.market.labels[k]): float(self.usd_by_type[k]) for k in paid}

    def preemptions_by_type(self) -> dict[str, int]:
        hit = np.flatnonzero(self.spot_preemptions > 0)
        return {str(self.market.labels[k]): int(self.spot_preemptions[k]) for k in hit}

    def summary(self) -> dict:
        markets = self.by_market()
        return {
            "provisioning": self.provisioning,
            "market": self.market.source,
            "dollars": float(self.spent_usd.sum()),
            "dollars_on_demand": markets["on-demand"],
            "dollars_spot": markets["spot"],
            "dollars_egress": self.egress_usd,
            "dollars_by_type": self.by_type(),
            "spot_preemptions": int(self.spot_preemptions.sum()),
            "spot_preemptions_by_type": self.preemptions_by_type(),
            "spot_preemptions_from": self.market.preemptions_from,
            "checkpoint_transfers": self.checkpoint_transfers,
            "out_of_budget": int(self.out_of_budget.sum()),
            "rented_gpu_hours": self.held_gpu_s / 3600.0,
        }
