"""The server's side of its provisioner: the demand it is given each round, the dollars it spent
kept in the state file (``meta`` key ``rented``), and what ``apportion status`` shows of it."""

from __future__ import annotations

import json

from apportion.serve.resources.host import Host
from apportion.serve.estimates.throughput import ThroughputEstimates
from apportion.serve.resources.rental.provisioner import NoProvisioner, Provisioner, demand_of
from apportion.serve.store.state import ACTIVE

LEDGER_KEY = "rented"  # meta: {instance type: {"usd": dollars, "instance_s": seconds held}}, over every run


class Rental:
    """Asks the state's provisioner each round, and keeps its dollars; costs nothing on an owned cluster."""

    def __init__(self, state: Host, throughputs: ThroughputEstimates, provisioner: Provisioner) -> None:
        self.state, self.throughputs = state, throughputs
        self.provisioner = provisioner
        self.owned = isinstance(self.provisioner, NoProvisioner)
        if not self.owned and hasattr(self.provisioner, "restore"):
            self.provisioner.restore(json.loads(state.store.meta(LEDGER_KEY, "{}") or "{}"))
            if self.provisioner.origin_s is None:  # the market's clock starts at the run's first round
                self.provisioner.origin_s = state.store.first_round()

    def poll(self, now: float) -> None:
        """Instances joined or gone since the last tick: a round may have slots to fill."""
        if not self.owned and self.provisioner.poll(now):
            self.state.dirty = True

    def provision(self, now: float) -> None:
        """The round's demand to the provisioner, and its dollars so far into the state file."""
        if self.owned:
            return
        demand = demand_of(self.state.store.round_table(), ACTIVE, self.state.gpu_types, self.throughputs.rate)
        self.provisioner.provision(demand, now)
        self.state.store.set_meta(LEDGER_KEY, json.dumps(self.provisioner.ledger(), sort_keys=True))

    def status(self) -> dict:
        """``{"rented": ...}`` for `apportion status`: the provisioning policy, the instances held, the
        dollars per instance type and in all; nothing on an owned cluster."""
        if self.owned:
            return {}
        ledger = self.provisioner.ledger()
        return {"rented": {
            "provisioning": self.provisioner.name,
            "held": self.provisioner.held(),
            "online": self.provisioner.capacity(),
            "usd": {label: round(spent["usd"], 6) for label, spent in ledger.items()},
            "usd_total": round(sum(spent["usd"] for spent in ledger.values()), 6),
        }}
