"""Each user's budgets as numbers: the limits everyone gets and the users given others. Light, so
that the settings can name their defaults without loading the state store."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Mapping


@dataclass(frozen=True)
class Limits:
    """One user's budgets: the most they may hold at once, and how fast they may submit. Each name is
    an ``apportion serve`` setting (``--max-active-jobs``, ``max_active_jobs:`` in a config file)."""

    max_active_jobs: int = 50_000  # queued + running jobs, an array's tasks each
    max_stored_mb: float = 1000.0  # MB (10^6 bytes) of job specs as stored, of the active jobs
    max_demand_rows: int = 1_000_000  # privacy blocks claimed, summed over the active jobs
    max_after_edges: int = 100_000  # jobs waited for (after), summed over the active jobs
    submit_rate: float = 20.0  # submits a second, once the burst is spent
    submit_burst: int = 200  # submits at once

    @classmethod
    def from_settings(cls, settings) -> Limits:
        """The limits a ServeSettings (or anything with these attributes) gives every user."""
        return cls(**{f.name: getattr(settings, f.name) for f in fields(cls)})

    def to_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}



@dataclass(frozen=True)
class BudgetRules:
    """Every user's limits: ``default``, except the users ``users`` names (the config file's ``user_budgets``)."""

    default: Limits = field(default_factory=Limits)
    users: Mapping[str, Limits] = field(default_factory=dict)

    def of(self, user: str) -> Limits:
        return self.users.get(user, self.default)

    def where(self, user: str, key: str) -> str:
        """Where limit ``key`` of ``user`` is set, as the message names it."""
        if user in self.users and getattr(self.users[user], key) != getattr(self.default, key):
            return f"user_budgets: {user}: {key} in the config file"
        return "--" + key.replace("_", "-")  # the setting's flag
