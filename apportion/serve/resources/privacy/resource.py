"""Privacy budget as a resource of the server: its settings, its ledger in the state file, its say in
admission (a claim granted whole, or the job waits or fails), the budget a job's first start consumes
or its cancel returns, the blocks' budgets for operators (``/blocks``, the dashboard, /metrics)."""

from __future__ import annotations

import math
from typing import Any

from apportion.serve.resources.base import AdmissionPart, BadSetting, Resource, Setting

MAX_LABELLED = 100  # blocks with series of their own in /metrics: the newest


class Privacy(Resource):
    """The privacy ledger of one server (``ledger.py``), granted by the policy its settings name."""

    name = "privacy"
    settings = (
        Setting("privacy_policy", "fcfs", "text", "how privacy claims are granted (docs/privacy.md)", "str",
                after="notify_hosts"),
        Setting("privacy_n", None, "int", "unlock a block's budget over this many claims for it", "int | None",
                after="privacy_policy"),
        Setting("privacy_t", None, "number", "unlock a block's budget over this many seconds from when it was added",
                "float | None", after="privacy_n"),
        Setting("privacy_timeout_s", None, "number", "reject a claim not granted within this long; None: never",
                "float | None", after="privacy_t"),
        Setting("privacy_rejected_portions", "lost", "text", "rr: what a rejected claim held: lost (PrivateKube's) or "
                "returned to its blocks", "str", after="privacy_timeout_s"),
    )
    config = (
        Setting("privacy_policy", "fcfs", "text", "how claims are granted, unlocking over N claims or T seconds", "str"),
        Setting("privacy_n", None, "int", "", "int | None"),
        Setting("privacy_t_s", None, "number", "", "float | None"),
        Setting("privacy_timeout_s", None, "number", "a claim not granted within this long is rejected; None: never",
                "float | None"),
        Setting("privacy_rejected_portions", "lost", "text", "rr: a rejected claim's portions lost or returned", "str"),
    )

    def __init__(self, host: Any, given: dict[str, Any]) -> None:
        from apportion.mechanism.privacy_policies import make_privacy_policy
        from apportion.serve.resources.privacy.ledger import PrivacyLedger

        super().__init__(host, given)
        config = host.config
        # ValueError for a privacy policy without its N or T
        self.ledger = PrivacyLedger(host.store, make_privacy_policy(config.privacy_policy, config.privacy_n,
                                                                    config.privacy_t_s), config.privacy_timeout_s,
                                    config.privacy_rejected_portions)

    @classmethod
    def check_settings(cls, s: Any) -> None:
        """The privacy policy with its N or T (mechanism/privacy_policies.py's rules), and the timeout."""
        from apportion.mechanism.privacy_budget import REJECTED_PORTIONS
        from apportion.mechanism.privacy_policies import PRIVACY_POLICIES, make_privacy_policy

        if s.privacy_policy not in PRIVACY_POLICIES:
            try:  # a plugin's name, or its file spec (apportion.plugins)
                make_privacy_policy(s.privacy_policy, s.privacy_n, s.privacy_t)
            except ValueError as exc:
                if not str(exc).startswith("unknown privacy policy"):
                    raise BadSetting("privacy_policy", str(exc), joiner=": ") from None
                raise BadSetting("privacy_policy", f"must be one of {', '.join(PRIVACY_POLICIES)} or a plugin's "
                                                   f"name, got {s.privacy_policy!r}") from None
        if s.privacy_t is not None and not (s.privacy_t > 0 and math.isfinite(s.privacy_t)):
            raise BadSetting("privacy_t", f"must be a positive number of seconds, got {s.privacy_t:g}")
        if s.privacy_timeout_s is not None and not (s.privacy_timeout_s > 0 and math.isfinite(s.privacy_timeout_s)):
            raise BadSetting("privacy_timeout_s", f"must be a positive number of seconds, got {s.privacy_timeout_s:g}")
        if s.privacy_rejected_portions not in REJECTED_PORTIONS:
            raise BadSetting("privacy_rejected_portions", f"must be one of {', '.join(REJECTED_PORTIONS)}, got "
                                                          f"{s.privacy_rejected_portions!r}")
        try:
            make_privacy_policy(s.privacy_policy, s.privacy_n, s.privacy_t)
        except ValueError as exc:
            key = "privacy_n" if s.privacy_n is not None and "N must" in str(exc) else "privacy_policy"
            raise BadSetting(key, str(exc), joiner=": ") from None

    # what it adds to the API (api.py) --------------------------------------------------------

    refused_at_submit = "`privacy` naming blocks the server does not have or more budget than they hold"
    on_dashboard = "the privacy blocks"

    @classmethod
    def routes(cls):
        from apportion.serve.resources.privacy.api import ROUTES

        return ROUTES

    @classmethod
    def schemas(cls) -> dict[str, dict]:
        from apportion.serve.resources.privacy.api import BLOCKS

        return {"Blocks": BLOCKS}

    @classmethod
    def job_fields(cls) -> dict[str, dict]:
        from apportion.serve.resources.privacy.api import CLAIM

        return {"privacy": CLAIM}

    def parts(self) -> dict[str, Any]:
        return {"privacy": self.ledger, "add_blocks": self.add_blocks, "blocks": self.blocks}

    # a submit: a job file's ``privacy`` claim (jobs/privacy_spec.py), checked and stored under the lock --

    demand_rows_are = ("privacy demand rows (blocks claimed, summed over jobs)",
                       "Privacy blocks claimed, summed over each user's active jobs")

    def claims(self, spec: Any) -> int:
        return len(spec.privacy.blocks) if spec.privacy is not None else 0  # a demand row a block

    def check_claim(self, spec: Any, source: str, copies: int) -> Any:
        return self.ledger.check_claim(spec.privacy, source, copies=copies)

    def store_claim(self, job_ids: list[int], spec: Any, checked: Any) -> None:
        self.ledger.insert_claims(job_ids, spec.privacy, *checked)

    # the round -----------------------------------------------------------------------------

    def round_starts(self, now: float) -> None:
        self.ledger.settle()  # budget granted to jobs that started is consumed, to jobs that ended returned

    def admitting(self):
        return self.ledger.open_claims()

    def admission(self, job_ids) -> AdmissionPart:
        """The privacy stage over the claims of these jobs, from the ledger; what it decided written back."""
        stage, before = self.ledger.stage(job_ids)
        return AdmissionPart(stage, "claim", lambda now: self.ledger.record(stage, before, now))

    def started(self, job_ids: list[int]) -> None:
        self.ledger.settle(job_ids)  # its first start: the budget granted to it is consumed now

    def cancelled(self, job_ids: list[int]) -> None:
        self.ledger.settle(job_ids)  # a claim whose job never started goes back

    # the blocks, for admins and operators --------------------------------------------------

    def add_blocks(self, blocks: list) -> None:
        """Add privacy blocks (``BlockSpec``), arriving now, all or none (InputError naming the block and field)."""
        host = self.host
        with host.lock:
            self.ledger.add_blocks(blocks, host.clock())
            host.dirty = True  # claims waiting for budget may be granted now
        host.log("privacy blocks added: " + ", ".join(block.name for block in blocks))

    def blocks(self) -> dict:
        """The privacy policy and each block's budget now (``ledger.BlockBudget``)."""
        with self.host.store.snapshot():  # one consistent read that waits for no round
            budgets = self.ledger.budgets(self.host.clock())
        policy = self.ledger.policy
        return {"policy": policy.name, "n": policy.n, "t_s": policy.t_s, "timeout_s": self.ledger.timeout_s,
                "blocks": [budget.to_dict() for budget in budgets]}

    def dashboard(self) -> dict[str, Any]:
        return {"privacy": self.blocks()}  # the blocks' budgets (none: the page shows no table)

    def read_metrics(self, now: float):
        budgets = self.ledger.budgets(now)[-MAX_LABELLED:]
        return lambda: [_budget_family(budgets)]


def _budget_family(budgets):
    """Each privacy block's budget in ε (under Rényi at the order with the most left): unlocked, granted
    to jobs not started yet, consumed by jobs that started, left; the newest MAX_LABELLED blocks."""
    from prometheus_client.core import GaugeMetricFamily

    family = GaugeMetricFamily("apportion_privacy_budget_epsilon", "Privacy budget of each block in epsilon:"
                               " unlocked, granted (jobs not started), consumed (jobs started) and left",
                               labels=["block", "part"])
    for budget in budgets:
        for part in ("unlocked", "granted", "consumed", "left"):
            family.add_metric([budget.name, part], getattr(budget, part))
    return family
