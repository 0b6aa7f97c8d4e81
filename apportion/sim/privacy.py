"""A replay's privacy-budget setup: the blocks, the jobs' claims (one per JobTable row) and the
policy that grants them, from which each replay builds its own, fresh admission stage."""

from __future__ import annotations

from dataclasses import dataclass

from apportion.core.privacy import Blocks, Claims
from apportion.mechanism.privacy_budget import PrivacyStage
from apportion.mechanism.privacy_policies import make_privacy_policy


@dataclass(frozen=True)
class PrivacySetup:
    blocks: Blocks
    claims: Claims
    policy: str = "dpf-n"  # mechanism/privacy_policies.py's PRIVACY_POLICIES
    n: int | None = None  # unlock a block over this many claims
    t_s: float | None = None  # unlock a block over this many seconds
    timeout_s: float | None = None  # reject a claim not granted within this long

    def stage(self) -> PrivacyStage:
        """A fresh stage (its ledger empty); ValueError when the policy cannot take these blocks."""
        return PrivacyStage(self.blocks, self.claims, make_privacy_policy(self.policy, self.n, self.t_s), self.timeout_s)
