"""Replay a JobTable on a cluster in virtual time, round by round, with one policy.

Progress is throughput × time. Between events where nothing can change (no arrival, no
finish, an integral allocation already in place, no policy threshold crossed) the loop
jumps many rounds at once.

With ``SimConfig.wall_clock`` the rounds run as ``apportion serve`` runs them, so that a
replay of a real run can be compared with it (``apportion.fidelity``): a round starts early
when a GPU idles while a job waits (and the next one comes a round after it); an attempt's
lease runs a round from its first step, and a job told to stop trains on until its lease
ends, so its successor starts when it has gone; a regular round is decided ``plan_ahead_s``
before it starts, and jobs it places on idle GPUs start then (the rules: ``mechanism/timing.py``);
an attempt still starting is pinned (it keeps its GPUs and stays out of the round) and the round
is planned as the server plans it, over one node per type (``mechanism/pinned.py``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, NamedTuple

import numpy as np

from apportion.core.cluster import Cluster
from apportion.core.durations import DurationPredictor
from apportion.core.jobs import JobTable
from apportion.core.node_resources import fits_on_nodes, node_demand
from apportion.core.throughputs import ThroughputTable
from apportion.core.views import JobView
from apportion.mechanism.privacy_budget import PrivacyStage
from apportion.mechanism.received import DEFAULT_RECEIVED_SINCE
from apportion.mechanism.round_planner import RoundDecision, RoundPlanner, RoundState
from apportion.mechanism.round_state import job_view, running_types, was_running
from apportion.mechanism.service import held_service, pair_together_s
from apportion.mechanism.timing import early_round_at, fill_event_at, idle_round_at, next_boundary
from apportion.policies.base import Policy, wants_predictions, wants_samples
from apportion.sim.admission import HeldJobs
from apportion.sim.costs import AttemptCosts, JobCosts, MachineSlowness
from apportion.sim.cpu_cores import CoreDivision
from apportion.sim.durations import HistoryFeed
from apportion.sim.holdings import HoldingsRecorder
from apportion.sim.replay import Replay
from apportion.sim.result import JobStatus, PrivacyOutcome, SimResult
from apportion.sim.unschedulable import unschedulable_reasons

ProgressCallback = Callable[[int, int, float], None]  # (jobs ended, jobs in all, virtual time)


class RunPace(NamedTuple):
    """How the running jobs of a span run (arrays over them): what ``Simulator._advance`` advances by."""

    rate: np.ndarray  # steps/s while training (0: no progress)
    gpus: np.ndarray  # GPUs each holds
    partner: np.ndarray  # position in the active jobs of the job sharing its GPUs, -1 alone
    wait_s: np.ndarray  # seconds before its GPUs are free
    delay_s: np.ndarray  # seconds of start-up before it trains
    cpu_speed: np.ndarray | None  # the part of its speed its cores allow, where cores are divided


@dataclass(frozen=True)
class SimConfig:
    round_s: float = 360.0
    restart_cost_s: float = 10.0  # no progress for this long after a job is moved or resumed
    start_cost_s: float = 0.0  # no progress for this long after a job's first start
    costs: AttemptCosts | None = None  # per job kind (measured by a server); they win over the two above
    wall_clock: bool = False  # rounds as the server runs them (the module's docstring)
    plan_ahead_s: float = 0.0  # wall clock: a regular round is decided (and starts idle GPUs) this long ahead
    fill_gap_s: float = 1.0  # wall clock: an early round comes at least this long after the last round
    first_round_s: float | None = None  # wall clock: the server's first round, at its start (None: unknown)
    received_since: str = DEFAULT_RECEIVED_SINCE  # the received share counts from the last re-solve (Gavel's), or from arrival
    learn_models: bool = False  # elastic jobs: policies see models learnt from their steps (sim/learnt_models.py)
    cpu_split: str = "proportional"  # how a node's cores are divided among its jobs, where speeds depend on them
    share_by_user: bool = False  # the cluster divided among users first, then the policy per user (policies/by_user.py)
    user_weights: tuple[tuple[str, float], ...] = ()  # with share_by_user: (user, weight) pairs; a user not named: 1


def planned_policy(policy: Policy, config: SimConfig) -> Policy:
    """The policy the round planner asks: ``policy`` itself, or shared by user first (``share_by_user``)."""
    if not config.share_by_user:
        return policy
    from apportion.policies.by_user import share_by_user

    return share_by_user(policy, dict(config.user_weights))


def job_throughputs(jobs: JobTable, cluster: Cluster, throughputs: ThroughputTable) -> np.ndarray:
    """[n, T] steps/s of every job on every cluster GPU type at its own GPU count; 0 = cannot run."""
    missing = [t for t in cluster.gpu_types if t not in throughputs.gpu_types]
    if missing:
        raise ValueError(
            f"no throughputs for GPU type '{missing[0]}' (known: {', '.join(throughputs.gpu_types)})"
        )
    table = throughputs.at_scales(jobs.num_gpus)
    type_index = np.array([table.gpu_types.index(t) for t in cluster.gpu_types])
    scale_index = np.searchsorted(np.asarray(table.scales), jobs.num_gpus)
    rates = table.steps_per_s[jobs.kind[:, None], type_index[None, :], scale_index[:, None]]
    rates = np.nan_to_num(rates, nan=0.0)
    if jobs.allowed is not None:
        allowed_index = [jobs.allowed_types.index(t) if t in jobs.allowed_types else -1 for t in cluster.gpu_types]
        for col, idx in enumerate(allowed_index):
            rates[:, col] = 0.0 if idx < 0 else np.where(jobs.allowed[:, idx], rates[:, col], 0.0)
    return rates


class Simulator:
    """A virtual clock around the shared round: admit, decide, advance, finish, until done.

    The per-job state lives in :class:`Replay` (arrays over JobTable rows); each phase is a
    method that reads and updates it, and the decision itself is the
    :class:`~apportion.mechanism.round_planner.RoundPlanner`'s, the same the server uses.
    """

    jumps = True  # may run many rounds at once when nothing can change before (the elastic simulator: never)
    slowness: MachineSlowness | None = None  # start-ups as slow as the machine was (SimConfig.costs), if measured
    cores: CoreDivision | None = None  # how nodes' cores are divided, where jobs' speeds depend on them

    def __init__(
        self,
        jobs: JobTable,
        cluster: Cluster,
        throughputs: ThroughputTable,
        policy: Policy,
        config: SimConfig = SimConfig(),
        progress: ProgressCallback | None = None,
        record_holdings: bool = False,
        predictor: DurationPredictor | None = None,
        privacy: PrivacyStage | None = None,
    ) -> None:
        """``record_holdings``: keep who held which GPUs when (``SimResult.holdings``, for a Gantt chart).
        ``predictor``: the duration predictor fed with the replay's finished jobs, for a policy
        that asks for predicted durations (default: a fresh ``DurationPredictor``).
        ``privacy``: the privacy-budget stage, its claims one per JobTable row (None: no job claims any)."""
        self.jobs = jobs
        self.privacy = privacy
        self.cluster = cluster
        self.policy = policy
        self.config = config
        self.progress = progress
        self.rates = job_throughputs(jobs, cluster, throughputs)
        # space sharing: steps/s of kind i sharing a GPU with kind j, [K, K, T]; None when the policy
        # does not share GPUs or no pair is known
        sharing = RoundPlanner.space_sharing(policy) and throughputs.pair_steps_per_s
        self.pair_rates = throughputs.pair_matrix(cluster.gpu_types) if sharing else None
        self.planner = RoundPlanner(planned_policy(policy, config), cluster, pair_rates=self.pair_rates,
                                    received_since=config.received_since)
        if config.wall_clock and node_demand(cluster, jobs.num_gpus, jobs.cpus, jobs.memory_gib) is not None:
            raise ValueError("the server's clock counts no CPU cores or memory of nodes: replay without wall_clock")
        self.cores = CoreDivision.of(jobs, cluster, config.cpu_split)
        if self.cores is not None and (config.wall_clock or self.pair_rates is not None):
            raise ValueError("jobs whose speed depends on their CPU cores cannot be replayed on the server's clock "
                             "or with a policy that shares GPUs (yet)")
        self.costs = JobCosts.of(jobs, config.costs, config.start_cost_s, config.restart_cost_s)
        self.slowness = config.costs.slowness if config.costs is not None else None
        # attempts stop and finish as they do in the server: stopped ones train up to their lease's end
        self.hand_over = config.wall_clock or bool(np.any(self.costs.stop_lead_s) or np.any(self.costs.stop_s))
        self.on_decision: Callable[[float, np.ndarray, RoundDecision], None] | None = None
        self.recorder = HoldingsRecorder(cluster, len(jobs)) if record_holdings else None
        if self.recorder is not None:
            self.on_decision = self.recorder
        self.history: HistoryFeed | None = None  # set by run() for a policy that predicts durations
        self._predictor = predictor

    def run(self) -> SimResult:
        wall_start = time.perf_counter()
        replay = self._start()
        last_report = time.perf_counter()
        while True:
            self._admit(replay)
            if not len(replay.active):
                privacy_at = self._privacy_change_at()
                if replay.next_arrival >= len(self.jobs) and not math.isfinite(privacy_at):
                    break
                arrival = self._next_arrival_s(replay)
                if privacy_at < arrival:  # budget unlocks, a block arrives or a claim times out
                    replay.now = next_boundary(replay.now, privacy_at, self.config.round_s)
                elif self.config.wall_clock:  # a job arriving to an idle cluster starts a round early
                    replay.now, replay.early = self._idle_round_at(replay, arrival)
                else:
                    replay.now = next_boundary(replay.now, arrival, self.config.round_s)
                continue
            decision, view = self._decide(replay)
            if self.on_decision is not None:
                self.on_decision(replay.now, replay.active.copy(), decision)
            if not self._advance(replay, decision, view):
                break  # nothing can run and nothing will arrive: leave the rest unfinished
            if self.progress is not None and time.perf_counter() - last_report > 0.2:
                self.progress(replay.ended, len(self.jobs), replay.now)
                last_report = time.perf_counter()
        if self.progress is not None:
            self.progress(replay.ended, len(self.jobs), replay.now)
        return self._result(replay, time.perf_counter() - wall_start)

    # the phases ------------------------------------------------------------------------

    def _start(self) -> Replay:
        """Mask what cannot run anywhere, and which jobs can never run at all."""
        jobs, cluster = self.jobs, self.cluster
        rates = self.rates
        fits = ((rates > 0) & (jobs.num_gpus[:, None] <= cluster.capacity[None, :])
                & fits_on_nodes(cluster, jobs.num_gpus, jobs.cpus, jobs.memory_gib))
        self.rates = np.where(fits, rates, 0.0)
        # the policy ranks and divides by the speed each job gets under the CPU split, not its best
        self.planned_rates = self.rates if self.cores is None else \
            self.rates * self.cores.speed_at_share(cluster.node_type, len(cluster.gpu_types))
        replay = Replay.empty(len(jobs), cluster)
        if self.cores is not None:
            replay.trained_gpu_s, replay.stalled_gpu_s = np.zeros(len(jobs)), np.zeros(len(jobs))
        if self.config.wall_clock and self.config.first_round_s is not None:
            replay.now = replay.last_round_at = replay.round_end = self.config.first_round_s
        if wants_predictions(self.policy):
            self.history = HistoryFeed(jobs, self.rates, self._predictor, samples=wants_samples(self.policy))
        never_run = self._never_run()
        replay.schedulable = fits.any(axis=1) & ~never_run
        self.unschedulable_reason = unschedulable_reasons(jobs, cluster, rates, never_run)
        return replay

    def _never_run(self) -> np.ndarray:
        jobs, n = self.jobs, len(self.jobs)
        everyone = job_view(
            index=np.arange(n), submit_time_s=jobs.submit_time_s, kind=jobs.kind, num_gpus=jobs.num_gpus,
            priority=jobs.priority, total_steps=jobs.total_steps, queue=jobs.queue, user=jobs.user, now_s=0.0,
            deadline_s=jobs.deadline_s,
        )
        return self.planner.never_runs(everyone, self.rates)

    def _admit(self, replay: Replay) -> None:
        """Jobs submitted by now join the active set (or are marked unschedulable); admission may
        hold some back, and let in those it held (``sim/admission.py``)."""
        arrived = int(np.searchsorted(self.jobs.submit_time_s, replay.now, side="right"))
        arrived_until = max(arrived, replay.next_arrival)
        if arrived_until == replay.next_arrival and self._held is None:
            return
        new = np.arange(replay.next_arrival, arrived_until)
        ok = replay.schedulable[new]
        replay.status[new[~ok]] = JobStatus.UNSCHEDULABLE
        replay.ended += int(np.count_nonzero(~ok))
        replay.status[new[ok]] = JobStatus.QUEUED
        joining = new[ok] if self._held is None else self._held.sift(replay, new[ok], self.unschedulable_reason)
        if len(joining):
            replay.active = np.concatenate([replay.active, joining])
        replay.next_arrival = arrived_until

    @cached_property
    def _held(self) -> HeldJobs | None:
        """The jobs waiting for others to complete before they enter a round; None when none ever does."""
        return HeldJobs.of(self.jobs, self.privacy)

    def _privacy_change_at(self) -> float:
        """When held privacy claims may be granted or rejected without an arrival (inf: never)."""
        return math.inf if self.privacy is None else self._held.next_change_s()

    def _next_arrival_s(self, replay: Replay) -> float:
        n = len(self.jobs)
        return float(self.jobs.submit_time_s[replay.next_arrival]) if replay.next_arrival < n else math.inf

    def _decide(self, replay: Replay) -> tuple[RoundDecision, JobView]:
        """Ask the shared round planner, then book restarts, moves, preemptions and first starts."""
        cluster, active = self.cluster, replay.active
        positions = replay.local_of
        positions[active] = np.arange(len(active))
        holder = np.where(replay.gpu_job >= 0, positions[np.maximum(replay.gpu_job, 0)], -1)
        partner = np.where(replay.gpu_partner >= 0, positions[np.maximum(replay.gpu_partner, 0)], -1)
        view = self._view(replay, holder, partner)
        decision = self.planner.plan(self._state(replay, view, holder, partner), cluster)
        if decision.resolved:
            replay.allocation_integral = decision.allocation.is_integral()
        held_by, shared_by = replay.gpu_job, replay.gpu_partner
        replay.gpu_job = np.where(decision.owner >= 0, active[np.maximum(decision.owner, 0)], -1)
        replay.gpu_partner = np.where(decision.second >= 0, active[np.maximum(decision.second, 0)], -1)

        running = decision.running
        started_before = ~np.isnan(view.first_start_s)
        fresh = running & ~decision.kept  # a new attempt starts: the first, a resumed or a moved one
        replay.moves[active[fresh & started_before & decision.was_running]] += 1
        replay.preemptions[active[decision.preempted]] += 1
        fresh_rows = active[fresh]
        replay.delay_left[fresh_rows] = np.where(started_before[fresh], self.costs.restart_s[fresh_rows],
                                                 self.costs.start_s[fresh_rows])
        if self.hand_over:
            if self.config.wall_clock:  # those that asked for their lease since the last round learnt its end
                held = active[decision.was_running]
                asked = held[replay.known_end[held] - self.costs.stop_lead_s[held] <= replay.now]
                replay.known_end[asked] = replay.lease_end[asked]
            self._hand_over(replay, active[decision.was_running & ~decision.kept], fresh_rows, held_by, shared_by)
        if self.slowness is not None and len(fresh_rows):  # start-ups as slow as the machine was when they begin
            replay.delay_left[fresh_rows] *= self.slowness.at(replay.now + replay.wait_left[fresh_rows], fresh_rows)
        first_rows = active[running & ~started_before]
        replay.first_start[first_rows] = replay.now + replay.wait_left[first_rows]
        if self.config.wall_clock:  # a renewed lease ends with the round; a new one a round after its first step
            replay.last_round_at = replay.now
            round_start = replay.now if replay.early else replay.round_end
            replay.round_end = round_start + self.config.round_s
            kept_rows = active[running & decision.kept]
            replay.lease_end[kept_rows] = np.maximum(replay.lease_end[kept_rows], replay.round_end)
            # one still starting learns its lease's end at its first lease call: the end as it is then
            starting = kept_rows[replay.wait_left[kept_rows] + replay.delay_left[kept_rows] > 0]
            replay.known_end[starting] = replay.lease_end[starting]
            replay.lease_end[fresh_rows] = np.maximum(replay.round_end, replay.now + replay.wait_left[fresh_rows]
                                                      + replay.delay_left[fresh_rows] + self.config.round_s)
            replay.known_end[fresh_rows] = replay.lease_end[fresh_rows]  # told at its first lease call
        replay.status[active[running]] = JobStatus.RUNNING
        replay.status[active[~running]] = JobStatus.QUEUED
        return decision, view

    def _view(self, replay: Replay, holder: np.ndarray, partner: np.ndarray) -> JobView:
        """What the policy sees of the active jobs this round."""
        jobs, active = self.jobs, replay.active
        return job_view(
            index=active,
            submit_time_s=jobs.submit_time_s.take(active),
            kind=jobs.kind.take(active),
            num_gpus=jobs.num_gpus.take(active),
            priority=jobs.priority.take(active),
            total_steps=jobs.total_steps.take(active),
            steps_done=replay.steps_done.take(active),
            attained_service_s=replay.attained_gpu_s.take(active),
            first_start_s=replay.first_start.take(active),
            running_type=running_types(self.cluster, holder, partner, len(active)),
            queue=self._names["queue"].take(active),
            user=self._names["user"].take(active),
            now_s=replay.now,
            deadline_s=None if jobs.deadline_s is None else jobs.deadline_s.take(active),
            cpus=None if jobs.cpus is None else jobs.cpus.take(active),
            memory_gib=None if jobs.memory_gib is None else jobs.memory_gib.take(active),
            **self._predictions(active),
        )

    @cached_property
    def _names(self) -> dict[str, np.ndarray]:
        """The jobs' queues and users as the view gathers them."""
        return {name: _gatherable(getattr(self.jobs, name)) for name in ("queue", "user")}

    def _state(self, replay: Replay, view: JobView, holder: np.ndarray, partner: np.ndarray) -> RoundState:
        """The planner's input: the view, the active jobs' speeds and time on each type, who holds what;
        on the wall clock, the attempts still starting pinned, as the server plans."""
        active = replay.active
        pinned = None
        if self.config.wall_clock:
            held = was_running(holder, partner, len(active))
            pinned = held & (replay.wait_left[active] <= 0) & (replay.delay_left[active] > 0)
        # np.take gathers rows several times faster than fancy indexing
        return RoundState(view, self.planned_rates.take(active, axis=0), replay.time_alone_on_type.take(active, axis=0),
                          holder, partner, together=replay.together, pinned=pinned)

    def _hand_over(self, replay: Replay, stopping: np.ndarray, fresh: np.ndarray, held_by: np.ndarray,
                   shared_by: np.ndarray) -> None:
        """Stop the attempts of ``stopping`` (JobTable rows preempted or moved) as a server does, and
        start those of ``fresh`` when the GPUs they get are free.

        A stopped attempt trains until ``stop_lead_s`` before the end of the lease it was last told
        (on the wall clock a lease may outlast the round; else it ends now, and the seconds before
        are lost), then takes ``stop_s`` to checkpoint and exit; its GPUs are free then. It may
        finish its steps first.
        """
        jobs, costs, now = self.jobs, self.costs, replay.now
        free_of = np.full(len(jobs), -np.inf)
        if len(stopping):
            lease_end = replay.known_end[stopping] if self.config.wall_clock else np.full(len(stopping), now)
            stop_at = lease_end - costs.stop_lead_s[stopping]
            trains_from = now + replay.wait_left[stopping] + replay.delay_left[stopping]
            rate = replay.last_rate[stopping]
            trained_s = np.where(stop_at >= now, np.maximum(stop_at - trains_from, 0.0),
                                 -np.minimum(now - stop_at, replay.last_progress_s[stopping]))
            remaining = jobs.total_steps[stopping] - replay.steps_done[stopping]
            done = (trained_s * rate >= remaining - 1e-9) & ~np.isin(stopping, fresh)  # a moved one runs on
            finish_at = (np.maximum(now, trains_from) + remaining / np.where(rate > 0, rate, np.inf)
                         + costs.finish_s[stopping])
            replay.steps_done[stopping] = np.where(done, jobs.total_steps[stopping],
                                                   replay.steps_done[stopping] + trained_s * rate)
            free_of[stopping] = np.where(done, finish_at, np.maximum(now, stop_at + costs.stop_s[stopping]))
            held_s = free_of[stopping] - now  # the server counts service until the attempt has gone
            gpu_s, alone_s, _ = held_service(held_s, jobs.num_gpus[stopping], replay.last_alone[stopping])
            replay.attained_gpu_s[stopping] += gpu_s
            replay.busy_gpu_s += float(np.sum(gpu_s))
            ran = replay.last_type[stopping] >= 0
            replay.time_on_type[stopping[ran], replay.last_type[stopping[ran]]] += held_s[ran]
            replay.time_alone_on_type[stopping[ran], replay.last_type[stopping[ran]]] += alone_s[ran]
            if done.any():  # it finished its steps before its lease ended: completed, not preempted
                replay.preemptions[stopping[done]] -= 1
                replay.tail_done = (np.concatenate([replay.tail_done[0], stopping[done]]),
                                    np.concatenate([replay.tail_done[1], finish_at[done]]))
            for holders in (held_by, shared_by):
                leaving = holders >= 0
                replay.gpu_free_at[leaving] = np.maximum(replay.gpu_free_at[leaving], free_of[holders[leaving]])
        if len(fresh):
            wait = np.zeros(len(jobs))
            free_in = replay.gpu_free_at - now
            for holders in (replay.gpu_job, replay.gpu_partner):
                taken = holders >= 0
                np.maximum.at(wait, holders[taken], free_in[taken])
            # a moved attempt also waits for itself to leave its old GPUs
            replay.wait_left[fresh] = np.maximum(wait[fresh], free_of[fresh] - now)

    def _predictions(self, active: np.ndarray) -> dict[str, np.ndarray]:
        """The active jobs' predicted GPU time, from the jobs finished so far (none if not asked for)."""
        if self.history is None:
            return {}
        gpu_s, log_sd = self.history.predict(active)
        if self.history.samples is None:
            return {"predicted_gpu_s": gpu_s, "predicted_log_sd": log_sd}
        samples = {"predicted_gpu_s": gpu_s, "predicted_log_sd": log_sd,
                   "sample_group": self.history.sample_group(active), "duration_samples": self.history.samples}
        if self.history.ratios is not None:
            samples.update(estimated_gpu_s=self.history.ranked_estimates(active), estimate_ratios=self.history.ratios)
        return samples

    def _pace(self, replay: Replay, decision: RoundDecision, view: JobView) -> RunPace:
        """How the running jobs run this span: at their (pair's) throughput, slowed by their cores,
        after the waits and start-up delays the replay holds."""
        jobs, active, running = self.jobs, replay.active, decision.running
        run_rows = active[running]
        run_type = decision.chosen_type[running]
        run_rate = self.rates[run_rows, run_type]
        run_partner = decision.partner[running]
        paired = run_partner >= 0
        if paired.any():
            partner_kind = jobs.kind[active[run_partner[paired]]]
            run_rate[paired] = self.pair_rates[jobs.kind[run_rows[paired]], partner_kind, run_type[paired]]
        cpu_speed = None
        if self.cores is not None:  # as fast as the cores its node gave it let it
            cpu_speed = self.cores.speed(replay.gpu_job, run_rows)
            run_rate = run_rate * cpu_speed
        return RunPace(run_rate, jobs.num_gpus[run_rows], run_partner, replay.wait_left[run_rows],
                       replay.delay_left[run_rows], cpu_speed)

    def _advance(self, replay: Replay, decision: RoundDecision, view: JobView) -> bool:
        """Run the decision until the next round (or, where ``jumps``, many when nothing can change),
        at the pace ``_pace`` gives (the elastic simulator's: goodput at each job's size).

        Returns False when nothing runs and nothing will ever arrive."""
        jobs, active, round_s = self.jobs, replay.active, self.config.round_s
        n, now = len(jobs), replay.now
        running = decision.running
        run_rows = active[running]
        run_type = decision.chosen_type[running]
        pace = self._pace(replay, decision, view)
        run_rate, run_partner, cpu_speed = pace.rate, pace.partner, pace.cpu_speed
        paired = run_partner >= 0
        run_wait = pace.wait_s  # not started yet: its GPUs are not free
        run_delay = pace.delay_s  # started, not training yet
        left = jobs.total_steps[run_rows] - replay.steps_done[run_rows]
        with np.errstate(divide="ignore"):  # a job that cannot progress (no goodput) never finishes
            steps_s = run_wait + run_delay + np.where(run_rate > 0, left / np.maximum(run_rate, 1e-300), np.inf)
        time_to_finish = steps_s + self.costs.finish_s[run_rows]

        # the next decision: a round_s after this one, or (wall clock) a round after this round's
        # start, less the plan ahead; many rounds later when nothing can change before
        base = replay.round_end - self.config.plan_ahead_s - round_s if self.config.wall_clock else now
        first = end = base + round_s
        whole_share = decision.allocation.time_fraction() > 1 - 1e-9
        stable = replay.allocation_integral and bool(np.all(running[whole_share]))
        privacy_at = self._privacy_change_at()
        if not running.any() and (replay.next_arrival < n or math.isfinite(privacy_at)):
            end = next_boundary(base, min(self._next_arrival_s(replay), privacy_at), round_s)
        elif stable and self.jumps:
            next_event = min(
                float(time_to_finish.min()) + now if len(run_rows) else math.inf,
                float(jobs.submit_time_s[replay.next_arrival]) if replay.next_arrival < n else math.inf,
                decision.reallocate_at,
                privacy_at,
            )
            if math.isfinite(next_event):
                end = next_boundary(base, next_event, round_s)
        if self.config.wall_clock:
            fill_at = self._fill_at(replay, running, now + time_to_finish)
            replay.early = fill_at < end
            if replay.early:
                end = fill_at
            else:
                replay.round_end += end - first  # the rounds jumped over
        span = end - now
        finishing = steps_s <= span + 1e-9
        held_s = np.maximum(np.where(finishing, time_to_finish, span) - run_wait, 0.0)
        progress_s = np.maximum(held_s - run_delay, 0.0)
        replay.steps_done[run_rows] = np.where(
            finishing, jobs.total_steps[run_rows], replay.steps_done[run_rows] + run_rate * progress_s
        )
        replay.wait_left[run_rows] = np.maximum(run_wait - span, 0.0)
        replay.delay_left[run_rows] = np.maximum(run_delay - np.maximum(span - run_wait, 0.0), 0.0)
        if self.hand_over:  # what stopping a job at the next decision needs to know of this span
            replay.last_type[replay.active] = -1
            replay.last_type[run_rows] = run_type
            replay.last_rate[run_rows] = run_rate
            replay.last_progress_s[run_rows] = progress_s
            replay.last_alone[run_rows] = ~paired
        if self.cores is not None:
            trained_gpu_s = progress_s * jobs.num_gpus[run_rows]
            replay.trained_gpu_s[run_rows] += trained_gpu_s
            replay.stalled_gpu_s[run_rows] += trained_gpu_s * (1.0 - cpu_speed)
        gpu_held_s, alone_s, _ = held_service(held_s, pace.gpus, ~paired)
        replay.attained_gpu_s[run_rows] += gpu_held_s
        replay.time_on_type[run_rows, run_type] += held_s
        replay.time_alone_on_type[run_rows, run_type] += alone_s
        if paired.any():
            # a shared GPU is busy while either of its two jobs holds it: count it once, on the
            # pair's lead (its smaller JobTable row)
            held_by = np.zeros(len(active))
            held_by[running] = held_s
            lead = np.flatnonzero(paired & (run_rows < active[np.maximum(run_partner, 0)]))
            other_held = held_by[run_partner[lead]]
            together = pair_together_s(held_s[lead], other_held)
            gpu_held_s[paired] = 0.0
            gpu_held_s[lead] = np.maximum(held_s[lead], other_held)
            replay.shared_gpu_s += float(together.sum())
            replay.together.add(np.column_stack([run_rows[lead], active[run_partner[lead]]]), run_type[lead], together)
        replay.busy_gpu_s += float(np.sum(gpu_held_s))
        busy_gpus = int(np.count_nonzero(replay.gpu_job >= 0))  # a GPU two jobs share counts once
        replay.timeline.append((now, busy_gpus, len(run_rows), len(active) - len(run_rows)))
        replay.decisions += 1

        done_rows, finish_s = run_rows[finishing], now + time_to_finish[finishing]
        if len(replay.tail_done[0]):  # stopped jobs that finished their steps before their lease ended
            done_rows = np.concatenate([done_rows, replay.tail_done[0]])
            finish_s = np.concatenate([finish_s, replay.tail_done[1]])
            replay.tail_done = (np.zeros(0, dtype=np.int64), np.zeros(0))
        if len(done_rows):
            self._finish(replay, done_rows, finish_s)
        elif not running.any() and replay.next_arrival >= n and not math.isfinite(privacy_at):
            return False
        replay.now = end
        return True

    def _idle_round_at(self, replay: Replay, arrival: float) -> tuple[float, bool]:
        """Wall clock: when the server decides a round for a job arriving to an idle cluster, and
        whether it is an early one (``mechanism.timing.idle_round_at``)."""
        config = self.config
        at, early = idle_round_at(arrival, replay.now, replay.last_round_at, replay.round_end, config.round_s,
                                  config.plan_ahead_s, config.fill_gap_s)
        if not early:
            replay.round_end = at + config.plan_ahead_s
        return at, early

    def _fill_at(self, replay: Replay, running: np.ndarray, finish_at: np.ndarray) -> float:
        """When the server would start a round early: a GPU frees while a job waits, or a job
        arrives while a GPU idles (not sooner than ``fill_gap_s`` after this round)."""
        n = len(self.jobs)
        first_finish = float(finish_at.min()) if len(finish_at) else math.inf
        arrival = float(self.jobs.submit_time_s[replay.next_arrival]) if replay.next_arrival < n else math.inf
        waiting = bool((~running).any()) or (self._held is not None and len(self._held.held) > 0)  # held: as the server
        fill = fill_event_at(first_finish, arrival, waiting=waiting, idle=bool(np.any(replay.gpu_job < 0)))
        return early_round_at(fill, replay.now, self.config.fill_gap_s)

    def _finish(self, replay: Replay, done_rows: np.ndarray, finish_s: np.ndarray) -> None:
        """Jobs that did their last step leave; a pair's survivor keeps its GPU alone. (With a finish
        cost a job may exit after the next round is decided: its GPUs are free only then.)"""
        replay.finish[done_rows] = finish_s
        replay.status[done_rows] = JobStatus.COMPLETED
        if self.history is not None:
            self.history.finished(done_rows, finish_s)
        replay.ended += len(done_rows)
        replay.active = replay.active[replay.status[replay.active] != JobStatus.COMPLETED]
        if self.hand_over:
            exit_of = np.full(len(self.jobs), -np.inf)
            exit_of[done_rows] = finish_s
            for holders in (replay.gpu_job, replay.gpu_partner):
                held = holders >= 0
                replay.gpu_free_at[held] = np.maximum(replay.gpu_free_at[held], exit_of[holders[held]])
        for holders in (replay.gpu_job, replay.gpu_partner):  # done_rows are the only completed jobs holding GPUs
            held = np.flatnonzero(holders >= 0)
            holders[held[replay.status[holders[held]] == JobStatus.COMPLETED]] = -1
        lone = (replay.gpu_job < 0) & (replay.gpu_partner >= 0)  # the first of a pair finished: its partner stays
        replay.gpu_job[lone], replay.gpu_partner[lone] = replay.gpu_partner[lone], -1

    def _result(self, replay: Replay, wall_s: float) -> SimResult:
        result = SimResult.build(
            policy=self.policy.name,
            jobs=self.jobs,
            cluster=self.cluster,
            config=self.config,
            status=replay.status,
            first_start_s=replay.first_start,
            finish_s=replay.finish,
            preemptions=replay.preemptions,
            moves=replay.moves,
            steps_done=replay.steps_done,
            time_on_type=replay.time_on_type,
            busy_gpu_s=replay.busy_gpu_s,
            timeline=np.asarray(replay.timeline, dtype=np.float64).reshape(-1, 4),
            decisions=replay.decisions,
            sim_wall_s=wall_s,
            unschedulable_reason=self.unschedulable_reason,
            holdings=None if self.recorder is None else self.recorder.holdings(replay.finish, replay.now),
            privacy=None if self.privacy is None else PrivacyOutcome.of(self.privacy),
            data_stall=None if self.cores is None else _fraction(replay.stalled_gpu_s, replay.trained_gpu_s),
        )
        if RoundPlanner.space_sharing(self.policy):
            result.summary["shared_gpu_hours"] = replay.shared_gpu_s / 3600.0
        if self.cores is not None:
            result.summary["cpu_split"] = self.config.cpu_split
            trained_gpu_s = float(replay.trained_gpu_s.sum())
            result.summary["data_stall"] = float(replay.stalled_gpu_s.sum()) / trained_gpu_s if trained_gpu_s else None
        return result


def _fraction(part, whole):
    """part / whole, NaN where whole is 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(whole > 0, part / np.where(whole > 0, whole, 1.0), np.nan)


_FIXED_WIDTH_MAX = 32  # characters; longer names keep their object array (memory: 4 bytes a character a job)


def _gatherable(names: np.ndarray) -> np.ndarray:
    """The same strings as a fixed-width array where they are short: the view gathers them every
    round, and a gather of Python strings (an object array) costs ten times one of numbers."""
    if names.dtype != object or not len(names):
        return names
    try:
        longest = max(map(len, names))
    except TypeError:  # not all strings: leave them as they are
        return names
    return names.astype(str) if longest <= _FIXED_WIDTH_MAX else names
