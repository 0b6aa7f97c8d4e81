"""The seam every optional resource fills: what a resource beside GPUs adds to the server, and the
hooks the round and the server call on it.

A resource is one package under ``serve/resources/`` with a ``Resource`` subclass, listed once in
``registry.py``. Its class says what it adds before a server exists (its settings, checked the way
the command line and a config file are); one instance per server, built with the scheduler's shared
state, does the rest. Every hook has a default that does nothing, so a resource fills only those it
needs. This module imports nothing heavy: ``apportion serve --help`` and the settings' checks read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class Setting:
    """One setting a resource adds: ``name`` its key (flag ``--name-with-dashes``, config file key,
    field of the settings it belongs to), ``default``, ``kind`` how a config file reads it ("int",
    "number", "text" or "any"), ``note`` what it is, in a line, ``annotation`` its type as text."""

    name: str
    default: Any = None
    kind: str = "any"
    note: str = ""
    annotation: str = "Any"
    after: str | None = None  # the setting it is listed after (a config file written by --print-config); None: last


class BadSetting(ValueError):
    """A resource's setting refused: ``key`` names it, ``message`` says what is wrong (the app's
    ``SettingError`` says it as a flag or a file's key); ``joiner`` goes between the two."""

    def __init__(self, key: str, message: str, joiner: str = " ") -> None:
        self.key, self.message, self.joiner = key, message, joiner
        super().__init__(f"{key}{joiner}{message}")


@dataclass
class AdmissionPart:
    """A resource's say in a round's admission: ``stage`` (a ``mechanism/admission.py`` stage) over the
    jobs it was asked about, the ``Applicants`` field that tells the stage which of them is whose
    (``field``: each asking job's place among them, -1 none; None: the stage reads the jobs' keys, their
    ids), and ``record(now)``: what it decided, written back after the round's verdict."""

    stage: Any
    field: str | None = None
    record: Callable[[float], None] = lambda now: None


@dataclass(frozen=True)
class RouteRow:
    """A route a resource adds to the server's one table (``http/routes.py`` lays it out with the rest,
    after the API's own): ``handler(at, ...)`` answers from the server (``http/callers.Served``) as every
    handler does; ``who`` names the rule of who may call it ("anyone", "reader", "user", "attempt" or
    "admin", whose 403 says ``admin_for`` is for admins); ``doc`` is what the API document says of it
    (``http/api_docs.RouteDoc``'s fields: tag, summary, description, errors, body, refused, ...)."""

    method: str
    path: str
    handler: Callable
    who: str = "user"
    admin_for: str | None = None
    doc: dict = field(default_factory=dict)


STORES = (409, 507)  # what a route that stores answers besides: a conflict or a quota, the state directory full


class Resource:
    """One optional resource on one server. ``host`` is the scheduler's shared state
    (``resources/host.py`` says what of it a resource may use); ``given`` the objects the server was
    started with for resources, each resource taking its own (those its ``given`` names)."""

    name = ""  # its package under serve/resources/
    settings: tuple[Setting, ...] = ()  # what `apportion serve` takes for it (flags, config file keys)
    config: tuple[Setting, ...] = ()  # what the server's ServeConfig (and ServeOptions) carry for it
    given: tuple[str, ...] = ()  # the keyword arguments of Scheduler (and serve) it takes

    def __init__(self, host: Any, given: dict[str, Any]) -> None:
        self.host = host

    # before a server exists ----------------------------------------------------------------

    @classmethod
    def check_settings(cls, settings: Any) -> None:
        """Refuse a setting of this resource out of range: BadSetting naming it."""

    @classmethod
    def config_from(cls, options: Any) -> dict[str, Any]:
        """Its ServeConfig fields from the server's options (by default: the same names)."""
        return {s.name: getattr(options, s.name) for s in cls.config}

    # what it adds to the API (read before a server exists: the table of routes, the API document) --

    @classmethod
    def routes(cls) -> tuple[RouteRow, ...]:
        """The routes it serves (its handlers reach it as ``at.scheduler.NAME``: :meth:`parts`)."""
        return ()

    @classmethod
    def schemas(cls) -> dict[str, dict]:
        """JSON Schemas of its routes' bodies and answers, by the names its rows' ``doc`` gives them."""
        return {}

    @classmethod
    def job_fields(cls) -> dict[str, dict]:
        """JSON Schemas of the job file's fields it reads (``jobs/jobspec.py`` reads them), for the document."""
        return {}

    refused_at_submit = ""  # what a submit's 400 says the server refuses of its job fields (the document)
    on_dashboard = ""  # what the dashboard shows of it (the document's words for /dashboard/state)

    # a server's life -----------------------------------------------------------------------

    def start(self, throughputs: Any) -> None:
        """The scheduler's parts exist: build what needs the speeds (``ThroughputEstimates``)."""

    def parts(self) -> dict[str, Any]:
        """Its objects (and calls) by the names the scheduler and its state show them as: ``scheduler.NAME``."""
        return {}

    def capacity(self) -> dict[str, int] | None:
        """Slots of each type it lets attempts run on now (instances held); None: it does not limit them."""
        return None

    def poll(self, now: float) -> None:
        """Each tick, before a round may be decided (set ``host.dirty`` when one may fill slots)."""

    def after_tick(self, now: float) -> None:
        """Each tick, after the attempts a round placed were started."""

    def before_plan(self, now: float) -> None:
        """A round is about to be decided (before the round's own time is counted)."""

    def round_starts(self, now: float) -> None:
        """First thing in a round, under the state lock, before the jobs are read."""

    # admission and placement ---------------------------------------------------------------

    def admitting(self) -> Any:
        """Ids of the jobs it may hold or fail before they start (an int64 array; empty: none)."""
        return ()

    def admission(self, job_ids: Any) -> AdmissionPart:
        """Its admission stage over ``job_ids`` (those of :meth:`admitting` asking this round, none started)."""
        raise NotImplementedError

    def least_cores_per_gpu(self) -> float:
        """Cores per GPU a job that asked none counts for in placement (0: none)."""
        return 0.0

    def speed_at_share(self, job_ids: Any, gpus: Any, cpus: Any) -> Any:
        """[n] the fraction of its best speed each job trains at with what this resource gives it (the
        jobs' ids, slots and asked ``cpus`` [n], NaN none): what the round ranks it by; None: its best."""
        return None

    def report_factor(self, job_id: int) -> float:
        """What a steps/s job ``job_id`` reports now is multiplied by before the speeds of its kind keep it:
        its speed where :meth:`speed_at_share` reads 1 over its speed with what it holds now (1: the same)."""
        return 1.0

    # a submit ---------------------------------------------------------------------------------

    def claims(self, spec: Any) -> int:
        """Rows each job of this checked job file (``JobSpec``) claims of it (0: none): what the user's
        demand rows are charged, and whether a submit takes the state lock (a round grants from them)."""
        return 0

    # a resource that claims rows says what they are: the demand-rows quota's 409 and its /metrics help
    # say it where it is the one that does (else accounts/budgets.py's DEMAND_ROWS)
    demand_rows_are: tuple[str, str] = ()

    def check_claim(self, spec: Any, source: str, copies: int) -> Any:
        """Under the state lock, in the submit's write transaction: whether ``copies`` jobs of ``spec`` may
        claim what they ask (InputError naming the field); what :meth:`store_claim` stores."""
        return None

    def store_claim(self, job_ids: list[int], spec: Any, checked: Any) -> None:
        """Store the claims of the jobs just inserted (``checked``: what :meth:`check_claim` answered)."""

    # accounting ----------------------------------------------------------------------------

    def progress(self, job_id: int, attempt: int, steps_done: int, now: float) -> None:
        """A progress report of ``job_id``'s current attempt was taken."""

    def started(self, job_ids: list[int]) -> None:
        """These jobs' first attempts started (inside the transaction that records it)."""

    def cancelled(self, job_ids: list[int]) -> None:
        """These jobs were cancelled before they ended (inside the transaction that records it)."""

    # what operators read -------------------------------------------------------------------

    def dashboard(self) -> dict[str, Any]:
        """Its part of the dashboard's view (keys merged into ``/dashboard/state``)."""
        return {}

    def status(self) -> dict[str, Any]:
        """Its part of ``apportion status`` (keys merged into the status)."""
        return {}

    def read_metrics(self, now: float) -> Callable[[], list]:
        """Read, inside the metrics' one snapshot of the state file, what its /metrics lines need;
        the function returned builds them (prometheus_client metric families) after the read."""
        return list
