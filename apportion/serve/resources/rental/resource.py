"""Rented instances as a resource of the server: the provisioner it was started with (none: an owned
cluster), the slots it holds online, the demand each round gives it, its dollars in the state file,
in ``apportion status`` and in /metrics."""

from __future__ import annotations

from typing import Any

from apportion.serve.resources.base import Resource


class Rental(Resource):
    """The instances one server rents; on an owned cluster (no provisioner given) it does nothing."""

    name = "rental"
    given = ("provisioner",)

    def __init__(self, host: Any, given: dict[str, Any]) -> None:
        from apportion.serve.resources.rental.provisioner import NoProvisioner

        super().__init__(host, given)
        self.provisioner = given.get("provisioner") or NoProvisioner()  # the instances held (none: owned)
        self.rental = None

    def start(self, throughputs: Any) -> None:
        from apportion.serve.resources.rental.demand import Rental as Demanded

        self.rental = Demanded(self.host, throughputs, self.provisioner)

    def parts(self) -> dict[str, Any]:
        return {"provisioner": self.provisioner, **({"rental": self.rental} if self.rental is not None else {})}

    def capacity(self) -> dict[str, int] | None:
        return self.provisioner.capacity()

    def poll(self, now: float) -> None:
        if self.rental is not None:
            self.rental.poll(now)

    def before_plan(self, now: float) -> None:
        if self.rental is not None:
            self.rental.provision(now)  # the instances the round may use asked for first

    def status(self) -> dict[str, Any]:
        return self.rental.status() if self.rental is not None else {}

    def read_metrics(self, now: float):
        rented = self.provisioner.ledger()
        return lambda: [_usd_family(rented)] if rented else []


def _usd_family(rented: dict):
    from prometheus_client.core import CounterMetricFamily

    family = CounterMetricFamily("apportion_rented_usd", "Dollars spent on rented instances, by instance type"
                                 " (cloud/region/name/market), over every run", labels=["instance_type"])
    for label in sorted(rented):
        family.add_metric([label], rented[label]["usd"])
    return family
