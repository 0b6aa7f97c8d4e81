"""The optional resources a server has, in one list: adding one is its package, and here its import
and its name in RESOURCES.

The order is the order their hooks are called in (and their parts of ``apportion status`` and
/metrics appear in). ``with_settings`` gives a settings class the fields each resource adds."""

from __future__ import annotations

import math
from dataclasses import field, make_dataclass
from typing import Any

from apportion.serve.resources.base import Resource, RouteRow
from apportion.serve.resources.cores.resource import Cores
from apportion.serve.resources.privacy.resource import Privacy
from apportion.serve.resources.rental.resource import Rental

RESOURCES: tuple[type[Resource], ...] = (Rental, Privacy, Cores)


def with_settings(cls: type, which: str) -> type:
    """Frozen dataclass ``cls`` with the settings every resource adds to it (``which``: "settings", what
    `apportion serve` takes; "config", what the server carries) as fields after its own, with their defaults."""
    extra = [(s.name, s.annotation, field(default=s.default)) for r in RESOURCES for s in getattr(r, which)]
    made = make_dataclass(cls.__name__, extra, bases=(cls,), frozen=True)
    made.__module__, made.__qualname__, made.__doc__ = cls.__module__, cls.__qualname__, cls.__doc__
    return made


def setting_names(which: str, kind: str | None = None) -> frozenset[str]:
    """The names of the resources' ``which`` settings (of one ``kind``: "int", "number", "text")."""
    return frozenset(s.name for r in RESOURCES for s in getattr(r, which) if kind is None or s.kind == kind)


def listed(names: tuple[str, ...], which: str) -> tuple[str, ...]:
    """``names`` (a settings class's fields) in the order they are listed: each resource's own after the
    setting its ``after`` names (else last)."""
    added = {s.name: s.after for r in RESOURCES for s in getattr(r, which)}
    order = [name for name in names if name not in added]
    for name, after in added.items():
        order.insert(order.index(after) + 1 if after in order else len(order), name)
    return tuple(order)


def check_settings(settings: Any) -> None:
    """Each resource's check of its settings (BadSetting naming the first one out of range)."""
    for resource in RESOURCES:
        resource.check_settings(settings)


def config_from(options: Any) -> dict[str, Any]:
    """The resources' ServeConfig fields from the server's options."""
    return {name: value for resource in RESOURCES for name, value in resource.config_from(options).items()}


def routes() -> tuple[RouteRow, ...]:
    """Every resource's routes, in RESOURCES's order."""
    return tuple(row for resource in RESOURCES for row in resource.routes())


def schemas() -> dict[str, dict]:
    """Every resource's schemas of its routes' bodies and answers, by name."""
    return {name: schema for resource in RESOURCES for name, schema in resource.schemas().items()}


def job_fields() -> dict[str, dict]:
    """The schemas of the job file's fields the resources read, by field."""
    return {name: schema for resource in RESOURCES for name, schema in resource.job_fields().items()}


def said(which: str) -> list[str]:
    """What each resource says of itself as ``which`` ("refused_at_submit", "on_dashboard"), where it says it."""
    return [getattr(resource, which) for resource in RESOURCES if getattr(resource, which)]


class Resources(tuple):
    """One server's resources, one instance each, in RESOURCES's order; ``part(name)`` finds what one
    shows under ``name`` (the privacy ledger as ``privacy``)."""

    @classmethod
    def open(cls, host: Any, given: dict[str, Any]) -> "Resources":
        known = {name for r in RESOURCES for name in r.given}
        unknown = set(given) - known
        if unknown:
            raise TypeError(f"no resource takes {', '.join(sorted(unknown))} (known: {', '.join(sorted(known))})")
        return cls(r(host, {k: v for k, v in given.items() if k in r.given}) for r in RESOURCES)

    def part(self, name: str) -> Any:
        for resource in self:
            found = resource.parts()
            if name in found:
                return found[name]
        raise AttributeError(name)

    def capacities(self) -> list[dict[str, int]]:
        return [c for c in (r.capacity() for r in self) if c is not None]

    def status(self) -> dict[str, Any]:
        return {key: value for r in self for key, value in r.status().items()}

    def dashboard(self) -> dict[str, Any]:
        return {key: value for r in self for key, value in r.dashboard().items()}

    def least_cores_per_gpu(self) -> float:
        return max((r.least_cores_per_gpu() for r in self), default=0.0)

    def report_factor(self, job_id: int) -> float:
        """The product of what the resources multiply a job's reported steps/s by (1: none does)."""
        return math.prod(r.report_factor(job_id) for r in self)

    def speed_at_share(self, job_ids, gpus, cpus):
        """[n] the fraction of their best speed the jobs train at with what the resources give them
        (the product over the resources that say; None: none does)."""
        found = [f for f in (r.speed_at_share(job_ids, gpus, cpus) for r in self) if f is not None]
        return math.prod(found) if found else None
