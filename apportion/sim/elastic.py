"""The virtual clock for elastic jobs: GPU counts and batch sizes that change between rounds.

The same round as fixed-size jobs (admit, the shared round planner, advance, finish); what
differs is how fast a job goes. A job's speed is its goodput (``apportion.core.goodput``) on
the GPUs the round gave it: how many, of which type, over how many nodes (read from the
placement), at the batch the policy chose (a policy that does not choose leaves each job at
its user's batch), with the gradient noise scale its kind has at its progress. Progress is
counted in efficiency-weighted examples and a job finishes at its target
(``JobTable.total_steps``). A job that restarts (resumed, moved or given another number of
GPUs) makes no progress for ``restart_cost_s``; a new batch size on the same GPUs costs nothing.

Speeds change as training goes on, so rounds are never skipped while a job runs; with nothing
running, the clock jumps to the next arrival.

A policy is given each job's true model, or with ``SimConfig.learn_models`` the one learnt
from the steps the job has made so far, its GPUs capped at four times the most it has run on
(``apportion.sim.learnt_models``, as Pollux learns them; Pollux's cap is twice), and the job sets
its batch by what its first steps teach it (``_learn_batch``); it always runs at its true model.
The policy is also told how many nodes each running job's GPUs lie on (``ElasticView.nodes_now``):
a job that grew where only scattered GPUs were free may span more nodes than it needs.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from apportion.core.cluster import Cluster
from apportion.core.elastic import ElasticView, goodput_table
from apportion.core.goodput import best_batch, compute_time_s, goodput_at, split_batch, step_time_s
from apportion.core.jobs import JobTable
from apportion.core.views import JobView
from apportion.mechanism.round_planner import RoundDecision, RoundPlanner, RoundState
from apportion.policies.base import Policy
from apportion.sim.costs import JobCosts
from apportion.sim.learnt_models import LearntModels
from apportion.sim.result import SimResult
from apportion.sim.unschedulable import unschedulable_reasons
from apportion.sim.replay import Replay
from apportion.sim.simulator import ProgressCallback, RunPace, SimConfig, Simulator, planned_policy

AGENT_PASSES = 3  # with learnt models: how often a job may reset its batch in one round as it learns


class ElasticSimulator(Simulator):
    """A replay of elastic jobs (``jobs.elastic`` set) under any policy.

    Policies that size jobs (``sizes_jobs``; their ``Allocation.num_gpus``) are obeyed, and a job
    is schedulable if it fits at its min_gpus; the rest run each job at its user's GPU count
    and batch. A fixed-size policy is given each job's goodput on each type at its user's
    size and batch, now; a policy that sizes jobs reads their models from the elastic view.
    """

    jumps = False  # goodput changes as a job's noise scale grows: every round is run

    def __init__(self, jobs: JobTable, cluster: Cluster, policy: Policy, config: SimConfig = SimConfig(),
                 progress: ProgressCallback | None = None) -> None:
        if jobs.elastic is None:
            raise ValueError("ElasticSimulator needs elastic jobs (JobTable.elastic)")
        if config.wall_clock or config.costs is not None:
            raise ValueError("elastic jobs replay on the simulator's own rounds: no wall clock or measured costs")
        try:
            self.kinds = jobs.elastic.kinds.for_types(cluster.gpu_types)
        except KeyError as missing:
            known = ", ".join(jobs.elastic.kinds.gpu_types)
            raise ValueError(f"no elastic job model for GPU type {missing} (known: {known})") from None
        self.jobs = jobs
        self.cluster = cluster
        self.policy = policy
        self.config = config
        self.progress = progress
        self.gpus_per_node = np.array([int(cluster.node_gpus[cluster.node_type == t].max())
                                       for t in range(len(cluster.gpu_types))])
        self.pair_rates = None
        self.planner = RoundPlanner(planned_policy(policy, config), cluster, received_since=config.received_since)
        self.sizes_jobs = bool(getattr(policy, "sizes_jobs", False))
        self.on_decision = None
        self.server_clusters = None
        self.costs = JobCosts.of(jobs, None, 0.0, 0.0)  # a rescale's restart is charged in _advance
        self.hand_over = False
        self.history, self._predictor = None, None  # elastic policies predict no durations
        self.privacy = None  # elastic jobs claim no privacy budget (docs/privacy.md)
        self.recorder = None  # no holdings for elastic jobs: their GPU count changes from round to round
        every = np.arange(len(jobs))
        self.rates = self._own_size_rates(every, self._noise(every, np.zeros(len(jobs))))
        self.gpus_now = np.zeros(len(jobs), dtype=np.int64)
        self.nodes_now = np.zeros(len(jobs), dtype=np.int64)  # nodes each running job's GPUs lie on
        self.restarts = np.zeros(len(jobs), dtype=np.int64)
        self._noise_now = np.zeros(0)
        # a fixed-size policy reads no model: only one that sizes jobs is given learnt ones
        self.learnt = LearntModels(self.kinds, jobs.kind) if config.learn_models and self.sizes_jobs else None

    def _start(self) -> Replay:
        """As for fixed sizes; under a policy that sizes jobs, a job need only fit at its min_gpus."""
        if not self.sizes_jobs:
            return super()._start()
        jobs, cluster = self.jobs, self.cluster
        smallest = replace(jobs, num_gpus=jobs.elastic.min_gpus)
        every = np.arange(len(jobs))
        rates, _ = goodput_table(self.kinds, jobs.kind, smallest.num_gpus[:, None],
                                 self._noise(every, np.zeros(len(jobs))), self.gpus_per_node)
        rates = rates[:, :, 0]
        fits = (rates > 0) & (smallest.num_gpus[:, None] <= cluster.capacity[None, :])
        self.rates = np.where(fits, rates, 0.0)  # where each job can run at all, at its smallest size
        replay = Replay.empty(len(jobs), cluster)
        never_run = self._never_run()
        replay.schedulable = fits.any(axis=1) & ~never_run
        self.unschedulable_reason = unschedulable_reasons(smallest, cluster, rates, never_run)
        return replay

    def _noise(self, rows: np.ndarray, steps_done: np.ndarray) -> np.ndarray:
        return self.kinds.noise_scale_at(self.jobs.kind[rows], steps_done / self.jobs.total_steps[rows])

    def _own_size_rates(self, rows: np.ndarray, noise: np.ndarray) -> np.ndarray:
        """[rows, T] goodput of each job on each type at its user's GPU count and batch."""
        jobs = self.jobs
        value, _ = goodput_table(self.kinds, jobs.kind[rows], jobs.num_gpus[rows][:, None], noise,
                                 self.gpus_per_node, batch_size=jobs.elastic.batch_size[rows])
        return value[:, :, 0]

    def _view(self, replay: Replay, holder: np.ndarray, partner: np.ndarray) -> JobView:
        view = super()._view(replay, holder, partner)
        active, elastic = replay.active, self.jobs.elastic
        self._noise_now = self._noise(active, replay.steps_done[active])
        kinds, max_gpus = self.kinds, elastic.max_gpus[active]
        if self.learnt is not None:  # one learnt kind a job, by row
            kinds = self.learnt.kinds
            max_gpus = self.learnt.max_gpus(active, elastic.min_gpus[active], max_gpus)
            view = replace(view, kind=active.astype(np.int64))
        return replace(view, elastic=ElasticView(
            kinds=kinds, min_gpus=elastic.min_gpus[active], max_gpus=max_gpus,
            batch_size=elastic.batch_size[active], noise_scale=self._noise_now, gpus_now=self.gpus_now[active],
            restarts=self.restarts[active], gpus_per_node=self.gpus_per_node, nodes_now=self.nodes_now[active]))

    def _state(self, replay: Replay, view: JobView, holder: np.ndarray, partner: np.ndarray) -> RoundState:
        """A fixed-size policy is given each job's goodput now at its user's size; a policy that sizes
        jobs reads their goodput from the elastic view, and is given where they can run at all."""
        active = replay.active
        rates = self.rates[active] if self.sizes_jobs else self._own_size_rates(active, self._noise_now)
        return RoundState(view, rates, replay.time_alone_on_type[active], holder, partner)

    def _decide(self, replay: Replay) -> tuple[RoundDecision, JobView]:
        """The shared round; then which running jobs start a new attempt (a resume or a rescale)."""
        decision, view = super()._decide(replay)
        self._restarted = decision.running & ~decision.kept & ~np.isnan(view.first_start_s)
        return decision, view

    def _pace(self, replay: Replay, decision: RoundDecision, view: JobView) -> RunPace:
        """Each running job at its goodput for the size and batch it is given (learning as it goes),
        a rescale's or resume's restart cost charged this round; the simulator's ``_advance`` runs them."""
        jobs, active = self.jobs, replay.active
        running = decision.running
        run_rows = active[running]
        run_type = decision.chosen_type[running]
        gpus = decision.gpus_of(view)[running].astype(np.int64)
        batch = (jobs.elastic.batch_size[run_rows] if decision.allocation.batch_size is None
                 else decision.allocation.batch_size[running])
        nodes = self._nodes_spanned(decision.owner, len(active))[running]
        if self.learnt is not None:  # the job measures its first steps and sets its batch by what it learnt
            batch = self._learn_batch(run_rows, run_type, nodes, gpus, batch, self._noise_now[running])
        kind = jobs.kind[run_rows]
        rate = goodput_at(self.kinds.step_params[kind, run_type], nodes, gpus, batch,
                          self._noise_now[running], self.kinds.limits(kind))
        rate = np.where(np.isfinite(rate) & (rate > 0), rate, 0.0)
        self.gpus_now[active] = 0
        self.gpus_now[run_rows] = gpus
        self.nodes_now[active] = 0
        self.nodes_now[run_rows] = nodes
        self.restarts[active[self._restarted]] += 1
        run_delay = np.where(self._restarted[running], self.config.restart_cost_s, 0.0)
        none = np.zeros(len(run_rows))
        return RunPace(rate, gpus, np.full(len(run_rows), -1, dtype=np.int64), none, run_delay, None)

    def _finish(self, replay: Replay, done_rows: np.ndarray, finish_s: np.ndarray) -> None:
        self.gpus_now[done_rows] = 0
        self.nodes_now[done_rows] = 0
        super()._finish(replay, done_rows, finish_s)

    def _learn_batch(self, rows: np.ndarray, gpu_type: np.ndarray, nodes: np.ndarray, gpus: np.ndarray,
                     batch: np.ndarray, noise: np.ndarray) -> np.ndarray:
        """[rows] the batch each running job trains at this round, learning as it goes (Pollux's agent).

        A job's first steps at the batch the policy chose are observed; where that refits its model,
        the job takes the best batch for its GPUs under the new model (its agent chooses its batch,
        as AdaptDL's does, from what it has measured), whose first steps are observed in turn, at
        most ``AGENT_PASSES`` times. The steps measured take a negligible part of the round."""
        batch = np.asarray(batch, dtype=np.float64).copy()
        todo = np.arange(len(rows))
        for _ in range(AGENT_PASSES):
            before = self.learnt.fits_of(rows[todo], gpu_type[todo])
            self._observe(rows[todo], gpu_type[todo], nodes[todo], gpus[todo], batch[todo])
            todo = todo[self.learnt.fits_of(rows[todo], gpu_type[todo]) != before]
            if not len(todo):
                break
            params = self.learnt.kinds.step_params[rows[todo], gpu_type[todo]]
            _, best = best_batch(params, nodes[todo], gpus[todo], noise[todo], self.kinds.limits(self.jobs.kind[rows[todo]]))
            moved = (best > 0) & (best != batch[todo])
            batch[todo[moved]] = best[moved]
            todo = todo[moved]
            if not len(todo):
                break
        return batch

    def _observe(self, rows: np.ndarray, gpu_type: np.ndarray, nodes: np.ndarray, gpus: np.ndarray,
                 batch: np.ndarray) -> None:
        """Tell the learnt models the step each job made this round, as its true model times it.

        The sync time observed is what a job measures: the part of its step spent waiting for the
        all-reduce after its own compute (step − compute), not the all-reduce's whole length, most of
        which overlaps the backward pass when γ > 1. So step − sync is the micro-batch's compute
        time, as an accumulation step measures it (AdaptDL profiles both the same way)."""
        kind = self.jobs.kind[rows]
        params = self.kinds.step_params[kind, gpu_type]
        local, _ = split_batch(batch, gpus, self.kinds.limits(kind))
        step = step_time_s(params, nodes, gpus, local)
        waited = np.maximum(step - compute_time_s(params, local), 0.0)
        self.learnt.observe(rows, gpu_type, nodes, gpus, local, step, waited)

    def _nodes_spanned(self, owner: np.ndarray, count: int) -> np.ndarray:
        """[count] nodes each active job's GPUs lie on this round (0 for a job with none)."""
        held = owner >= 0
        pairs = np.unique(owner[held] * self.cluster.num_nodes + self.cluster.gpu_node[held])
        return np.bincount(pairs // self.cluster.num_nodes, minlength=count)

    def run(self) -> SimResult:
        result = super().run()
        result.summary["elastic"] = True
        result.summary["restarts"] = int(self.restarts.sum())
        if self.learnt is not None:
            result.summary["model_fits"] = self.learnt.fits
        return result
