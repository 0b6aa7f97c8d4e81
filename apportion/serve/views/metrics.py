"""GET /metrics: the server in Prometheus's text format (docs/serve.md, "Metrics").

What the state file holds (slots, jobs, attempts, preemptions, users' GPU time, what each optional
resource keeps there) is read at
scrape time by one collector, a few grouped queries in one read snapshot (no wait for a round), so nothing is kept
twice and counters survive restarts; what only this run knows (round times, lease answers)
comes from the scheduler's own counts. Jobs' data stalls are gauges labelled by job id for the
running jobs only, so their series come and go with the jobs the slots hold. Request latencies are observed by a small ASGI
middleware, labelled by the route's template (``/jobs/{job_id}``), never by the raw path, so
no caller can create series at will. Each app has its own registry.
"""

from __future__ import annotations

import time
from typing import Callable

from fastapi import FastAPI
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from apportion.serve.round.rounds import ROUND_BOUNDS_MS
from apportion.serve.scheduler.scheduler import Scheduler
from apportion.serve.store.state import STATUSES

MAX_LABELLED = 100  # queues, and users, with series of their own; the later ones are summed under OTHER
OTHER = "(other)"
METHODS = ("GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH")
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"  # what generate_latest writes, and every Prometheus reads
UNROUTED = "(none)"  # a request answered before routing (413, 429) or matching no route (404)


def add_metrics(app: FastAPI, scheduler: Scheduler) -> Callable[[], Response]:
    """The middleware timing every request on ``app``; returns what GET /metrics answers (its route:
    ``http/routes.py``)."""
    disable_created_metrics()  # no *_created series beside each histogram: Prometheus does not need them
    registry = CollectorRegistry()
    registry.register(StateCollector(scheduler))
    requests = Histogram("apportion_request_seconds", "Time to answer an API request, by method, route template"
                         " and status code", ["method", "route", "code"], registry=registry)
    submits = Histogram("apportion_submit_seconds", "Time to check and store a submitted job (POST /jobs), by"
                        " outcome: accepted or refused", ["outcome"], registry=registry)
    app.add_middleware(RequestTimer, requests=requests, submits=submits)

    def scrape() -> Response:
        return Response(generate_latest(registry), media_type=TEXT_FORMAT)

    return scrape


class StateCollector:
    """The metrics read at scrape time: from the state file, and from this run's round and lease counts."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def collect(self):
        scheduler = self.scheduler
        views = scheduler.views
        with views.snapshot():  # one consistent read that waits for no round
            totals = views.job_totals(scheduler.clock())
            attempts = views.attempt_counts()
            stalls = views.job_columns(("id", "data_stall", "fetch_stall", "preprocess_stall"),
                                       "status = 'running' AND data_stall IS NOT NULL")
            resources = views.resource_metrics(scheduler.clock())
        users_budgets = views.budgets  # its own queries: each user's totals, kept by the state file
        held, everyone = users_budgets.uses(MAX_LABELLED), users_budgets.total()
        yield from self._slots({slot for *_, held in totals if held for slot in held.split(",")})
        queues = _labelled({(queue, first) for _, queue, _, first, *_ in totals})
        users = _labelled({(user, first) for _, _, user, first, *_ in totals})
        jobs: dict[tuple[str, str], int] = {}
        gpu_s: dict[str, float] = {}
        preemptions = 0
        for status, queue, user, _, count, preempted, seconds, _ in totals:
            key = (queue if queue in queues else OTHER, status)
            jobs[key] = jobs.get(key, 0) + count
            label = user if user in users else OTHER
            gpu_s[label] = gpu_s.get(label, 0.0) + seconds
            preemptions += preempted
        family = GaugeMetricFamily("apportion_jobs", "Jobs by status and queue", labels=["status", "queue"])
        for queue in sorted({q for q, _ in jobs}):
            for status in STATUSES:
                family.add_metric([status, queue], jobs.get((queue, status), 0))
        yield family
        family = CounterMetricFamily("apportion_user_gpu_seconds", "GPU-seconds held by each user's jobs (slots ×"
                                     " seconds, live attempts up to now)", labels=["user"])
        for user in sorted(gpu_s):
            family.add_metric([user], gpu_s[user])
        yield family
        yield CounterMetricFamily("apportion_preemptions", "Preemptions of jobs (attempts stopped for a round, not"
                                  " counting moves)", value=preemptions)
        yield CounterMetricFamily("apportion_attempts_started", "Attempts started", value=sum(attempts.values()))
        family = CounterMetricFamily("apportion_attempts_ended", "Attempts ended, by how: completed, preempted,"
                                     " moved, crashed, failed, cancelled or unplaced (never placed by Ray)", labels=["how"])
        for how in sorted(h for h in attempts if h):
            family.add_metric([how], attempts[how])
        yield family
        answers = views.lease_answers()
        yield CounterMetricFamily("apportion_lease_renewals", "Lease calls answered renew: true (this run)",
                                  value=answers["renew"])
        yield CounterMetricFamily("apportion_lease_stops", "Lease calls answered renew: false: checkpoint and exit"
                                  " (this run)", value=answers["stop"])
        yield self._round_times()
        yield from _data_stalls(stalls)
        for lines in resources:  # each optional resource's own lines
            yield from lines()
        yield from _user_budgets(held, everyone, users_budgets.rules, users_budgets.rows_are[1])

    def _slots(self, held: set[str]):
        busy = GaugeMetricFamily("apportion_slots_busy", "Slots held by a live attempt, by GPU type",
                                 labels=["gpu_type"])
        offered = GaugeMetricFamily("apportion_slots", "Slots this server offers, by GPU type", labels=["gpu_type"])
        gpu_type_of = self.scheduler.views.gpu_type_of
        types = [t for t in map(gpu_type_of, held) if t is not None]
        for gpu_type in self.scheduler.gpu_types:
            offered.add_metric([gpu_type], self.scheduler.capacity[gpu_type])
            busy.add_metric([gpu_type], types.count(gpu_type))
        return busy, offered

    def _round_times(self) -> HistogramMetricFamily:
        stats = self.scheduler.stats
        buckets = [(f"{bound / 1000:g}", count) for bound, count in zip(ROUND_BOUNDS_MS, stats.at_most)]
        return HistogramMetricFamily("apportion_round_seconds", "Time to decide and apply a round (this run)",
                                     buckets=[*buckets, ("+Inf", stats.rounds)], sum_value=stats.total_ms / 1000)


def _data_stalls(rows: list[tuple]):
    """Each running job's latest data stall, and its fetch and pre-processing parts where known."""
    names = (("apportion_job_data_stall_ratio", "Share of a running job's step time spent waiting for data"
              " (its latest progress report)"),
             ("apportion_job_fetch_stall_ratio", "Of it, the share fetching data (I/O), where the job marks it"),
             ("apportion_job_preprocess_stall_ratio", "Of it, the share pre-processing data (CPU), where the job"
              " marks its fetching"))
    families = [GaugeMetricFamily(name, text, labels=["job"]) for name, text in names]
    for job_id, *values in rows:
        for family, value in zip(families, values):
            if value is not None:
                family.add_metric([str(job_id)], value)
    yield from families


def _user_budgets(held: dict, everyone, rules, rows_are: str):
    """Each user's use of their budgets (the MAX_LABELLED with the most active jobs; the others' sum under
    OTHER) and their limits (budgets.py; ``rows_are``: what the demand rows are, as the resources say)."""
    names = (("apportion_user_active_jobs", "active_jobs", "Active jobs (queued, running, preempted) of each user"),
             ("apportion_user_stored_bytes", "bytes", "Bytes of job specs stored by each user's active jobs"),
             ("apportion_user_demand_rows", "demand_rows", rows_are),
             ("apportion_user_after_edges", "after_edges", "Jobs waited for (after), summed over each user's active"
              " jobs"))
    rest = {field: getattr(everyone, field) - sum(getattr(use, field) for use in held.values()) for _, field, _ in names}
    for name, field, text in names:
        family = GaugeMetricFamily(name, text, labels=["user"])
        for user in sorted(held):
            family.add_metric([user], getattr(held[user], field))
        if any(rest.values()):
            family.add_metric([OTHER], rest[field])
        yield family
    family = GaugeMetricFamily("apportion_user_budget_limit", "Each user's limits: max_active_jobs, max_stored_mb,"
                               " max_demand_rows, max_after_edges, submit_rate, submit_burst (apportion serve's"
                               " settings); user (default) for everyone the config file's user_budgets does not name",
                               labels=["user", "budget"])
    for user, limits in [("(default)", rules.default), *sorted(rules.users.items())]:
        for budget, value in limits.to_dict().items():
            family.add_metric([user, budget], value)
    yield family


def _labelled(seen: set[tuple[str, int]]) -> set[str]:
    """The names with series of their own: the MAX_LABELLED with the earliest first job (a set that
    does not change as later names arrive, so that a counter summed under OTHER never goes down)."""
    first: dict[str, int] = {}
    for name, job_id in seen:
        first[name] = min(job_id, first.get(name, job_id))
    return set(sorted(first, key=lambda name: first[name])[:MAX_LABELLED])


class RequestTimer:
    """ASGI middleware: each HTTP request's time into ``requests`` (and POST /jobs's into ``submits``),
    labelled by the route template the router matched."""

    def __init__(self, app, requests: Histogram, submits: Histogram) -> None:
        self.app = app
        self.requests = requests
        self.submits = submits

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status = 500  # what the server answers if the app raises before a response starts

        async def noted_send(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, noted_send)
        finally:
            elapsed = time.perf_counter() - started
            route = getattr(scope.get("route"), "path", None) or UNROUTED
            method = scope.get("method") if scope.get("method") in METHODS else "other"
            self.requests.labels(method, route, str(status)).observe(elapsed)
            if method == "POST" and route == "/jobs":
                self.submits.labels("accepted" if status < 300 else "refused").observe(elapsed)
