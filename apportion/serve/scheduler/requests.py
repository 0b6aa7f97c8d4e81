"""The HTTP API's side of the scheduler: submit, cancel, lease and progress, and their checks.

A request that does not fit raises, before it changes anything: InputError (a bad job spec, a
``steps_done`` beyond the job's total; naming the field), NotFound, Forbidden (another user's
job) or Conflict (a stale attempt, a job that has ended).

What a job reports about itself is trusted only so far: its ``steps_done`` must lie within
``[0, total_steps]`` (a resumed attempt may report fewer steps than before), and its
``steps_per_s`` moves the shared throughput estimate by at most a factor RATE_FACTOR from the
current one (and never past MAX_STEPS_PER_S), so one job cannot distort the allocation of others.
"""

from __future__ import annotations

import hashlib
import json
import os
import math
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np

from apportion.core.errors import InputError
from apportion.core.views import ClusterView, ThroughputView
from apportion.runtime.stalls import STALL, STALL_FIELDS
from apportion.serve.base.bounds import MAX_STEPS_PER_S
from apportion.serve.attempts.checkpoints import unusable_checkpoint_dir, unusable_workdir
from apportion.serve.attempts.context import SchedulerState, with_note
from apportion.serve.estimates.elastic import StepReport
from apportion.serve.estimates.elastic_batch import examples_done
from apportion.serve.jobs.elastic_spec import ElasticSpec
from apportion.serve.estimates.throughput import ThroughputEstimates
from apportion.serve.accounts.budgets import DEMAND_ROWS, Budgets, Charge, charge_of
from apportion.serve.jobs.job_array import ArraySpec, check_task_names
from apportion.serve.jobs.jobspec import JobSpec, check_after, read_job
from apportion.serve.attempts.lifecycle import check_resumed
from apportion.serve.base.slots import shares_by_type
from apportion.serve.jobs.notify_hosts import NotifyTarget
from apportion.serve.jobs.policy_check import one_job_view
from apportion.serve.jobs.records import JobRecord
from apportion.serve.accounts.runas import NoAccount

RATE_FACTOR = 10.0  # a progress report moves the estimate it feeds to at most ×10 (or ÷10) of its value


class NotFound(Exception):
    """No such job (or no such attempt of it)."""


class Forbidden(Exception):
    """The job belongs to another user."""


class Conflict(Exception):
    """The request does not fit the job's state (a stale attempt, cancelling a finished job)."""


@dataclass(frozen=True)
class Submission:
    """A submit read and checked once (:meth:`Requests.checked`): its spec, the spec as stored (its user
    set), its array's indices, its notify URL split, what it is charged. Storing it parses nothing again."""

    spec: JobSpec
    data: dict
    array: ArraySpec | None
    notify: NotifyTarget | None
    charge: Charge
    source: str = "request"

    @property
    def tasks(self) -> int:
        """How many jobs it stores: an array's tasks, else one."""
        return 1 if self.array is None else len(self.array)


class Submitted(NamedTuple):
    """What a submit stored: the job's (or array's) id, whether it was stored before (an idempotency
    key sent again), and an array's tasks (None: one job)."""

    job_id: int
    existing: bool
    tasks: int | None = None


class Requests:
    """Answers the API's calls about jobs, under the server's lock."""

    def __init__(self, state: SchedulerState, throughputs: ThroughputEstimates) -> None:
        self.state = state
        self.throughputs = throughputs
        self.store, self.executor, self.policy, self.config = state.store, state.executor, state.policy, state.config
        self.clock, self.log, self.lock, self.changed = state.clock, state.log, state.lock, state.changed
        self.gpu_types, self.capacity = state.gpu_types, state.capacity
        self.lease_answers = {"renew": 0, "stop": 0}  # lease calls answered this run, for /metrics
        said = [r.demand_rows_are for r in state.resources if r.demand_rows_are]  # what its demand rows are
        # what each user may hold, charged at submit
        self.budgets = Budgets(self.store, self.config.budgets, rows_are=said[0] if len(said) == 1 else DEMAND_ROWS)

    def submit(self, body: dict, user: str, source: str = "request", sees_all: bool = False) -> int:
        """Check a job spec (InputError naming the field) and store it; returns the job id.
        ``sees_all``: the job may wait for (``after``) any user's jobs, not only ``user``'s."""
        return self.submit_once(body, user, None, source, sees_all).job_id

    def submit_once(self, body: dict, user: str, key: str | None, source: str = "request",
                    sees_all: bool = False) -> Submitted:
        """:meth:`submit`, once per idempotency ``key`` of ``user`` (None: no key): the job's id, whether
        it was stored before, and an array's tasks. The same key with another request is a Conflict
        naming the key. Every submit is charged to ``user``'s budgets (budgets.py): TooFast over their
        rate, OverQuota over a quota. The body is read and checked once (:meth:`checked`)."""
        self.budgets.take_submit(user)  # before anything is read or parsed
        digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest() if key is not None else ""
        if key is not None:
            earlier = self._earlier(user, key, digest)
            if earlier is not None:  # a retry of a submit that was stored: its job, whatever holds now
                return self._again(earlier, body)
        return self.store_checked(self.checked(body, user, source, sees_all), user, key, digest)

    def checked(self, body: dict, user: str, source: str = "request", sees_all: bool = False) -> Submission:
        """``body`` read once and checked once, before anything is stored: whether the job could ever run
        here, its directories, its notify URL against ``--notify-hosts``, its array's tasks' names, what
        it waits for (``after``: ``user``'s jobs unless ``sees_all``), and what it is charged. InputError
        naming the field. What its claims of the optional resources take (a privacy budget), and whether
        the user's budgets hold it, is known only under the write lock: :meth:`store_checked`."""
        read = read_job(body, source)
        spec, array = read.spec, read.array
        self._check_directories(spec, user, source)
        self._check_fits(spec, source)
        self._check_notify(read.notify, source)
        if array is not None:
            check_task_names(spec.name, array, source)
        data = spec.to_dict()
        data["user"] = spec.user or user
        # a job's owner never changes: checked before the insert, as all the rest
        check_after(spec.after, self._owners(list(spec.after or ())), data["user"], sees_all, source)
        copies = 1 if array is None else len(array)
        rows = sum(resource.claims(spec) for resource in self.state.resources)  # the rows its claims store, a job
        charge = charge_of(data, copies, rows, len(spec.after or ()), array=array is not None)
        return Submission(spec, data, array, read.notify, charge, source)

    def store_checked(self, submission: Submission, user: str, key: str | None = None,
                      digest: str = "") -> Submitted:
        """Store a checked submit (:meth:`checked`) in one transaction, with its claims of the optional
        resources and its charge to its user's budgets; ``key``: its idempotency key (a submit stored since
        answers instead)."""
        spec, data, array = submission.spec, submission.data, submission.array
        claiming = [resource for resource in self.state.resources if resource.claims(spec)]
        # only the insert waits for a round under way (the state lock), and only when a resource a round
        # grants from (the privacy ledger) takes a claim; the write transaction alone keeps the rest whole
        with self.lock if claiming else nullcontext(), self.store.transaction():
            if key is not None:
                earlier = self._earlier(user, key, digest)  # it may have been stored since
                if earlier is not None:
                    return Submitted(earlier, True, None if array is None else len(array))
            now = self.clock()
            common = dict(user=data["user"], queue=spec.queue, priority=spec.priority, kind=spec.throughput_kind,
                          gpus=spec.gpus, total_steps=spec.total_steps, submitted=now,
                          key=(user, key, digest) if key is not None else None)
            claims = [(resource, resource.check_claim(spec, submission.source, submission.tasks))
                      for resource in claiming]
            self.budgets.check(data["user"], submission.charge)  # inside the write transaction: two cannot both fit
            if array is None:
                job_id = self.store.insert_job(spec=data, name=spec.name, **common)
                tasks = [job_id]
            else:
                job_id, tasks = self.store.insert_array(spec=data, indices=array.indices, **common)
            for resource, checked in claims:
                resource.store_claim(tasks, spec, checked)
            self.budgets.record(data["user"], tasks, submission.charge, job_id if array is not None else None)
        self.state.dirty = True  # after the commit: a round that began before it clears it before reading the jobs
        if array is not None:
            self.log(f"array {job_id} submitted: {spec.name} by {data['user']}, {len(array)} tasks (jobs {tasks[0]}"
                     f"-{tasks[-1]}), {spec.gpus} slot(s) and {spec.total_steps} steps each")
            return Submitted(job_id, False, len(array))
        self.log(f"job {job_id} submitted: {spec.name} by {data['user']}, {spec.gpus} slot(s), {spec.total_steps} steps")
        return Submitted(job_id, False, None)

    def _again(self, job_id: int, body: dict) -> Submitted:
        """A submit sent again: the job (or array) stored the first time, its tasks counted in the store."""
        return Submitted(job_id, True, self.store.array_size(job_id) if body.get("array") is not None else None)

    def _owners(self, ids: list[int]) -> dict[int, str]:
        """The user of each of ``ids`` that is a job or an array."""
        owners = {i: who for i, (who, _) in self.store.owners_and_statuses(ids).items()}
        missing = [i for i in ids if i not in owners]
        if missing:
            owners.update({i: who for i, (who, _) in self.store.arrays_of(missing).items()})
        return owners

    def _earlier(self, user: str, key: str, digest: str) -> int | None:
        """The job ``user`` stored with ``key`` (None: none); Conflict when it was another request."""
        found = self.store.submitted_with(user, key)
        if found is None:
            return None
        job_id, stored = found
        if stored != digest:
            raise Conflict(f"Idempotency-Key {key!r} was used for job {job_id}, a different request: a new job needs"
                           " a new key")
        return job_id

    def _check_directories(self, spec, user: str, source: str) -> None:
        """InputError unless the OS account the job runs as (``--run-as mapped``) can enter its
        ``workdir`` and keep its checkpoints in its ``checkpoint_dir``: the server reads that
        directory as that account, and never lets a job start in a directory its account could not enter.
        Under ``mapped`` both are looked at only by that account (a child dropped to it), so a refusal
        says no more than the user could learn with its own account."""
        try:
            account = self.config.run_as.account(spec.user or user)
        except NoAccount:  # refused by the API already; such a job never starts
            return
        if account is None:  # the server is the account its jobs run as: it may look itself
            if spec.workdir is not None and not os.path.isdir(spec.workdir):  # False, not OSError, for a name too long
                raise InputError(source, f"no such directory on the server: {spec.workdir}", field="workdir")
            return
        if spec.workdir is not None:  # looked at only as the account: root's answer would tell what lies where
            problem = unusable_workdir(spec.workdir, account)
            if problem is not None:
                raise InputError(source, problem, field="workdir")
        directory = spec.checkpoint_dir
        if directory is None or not (Path(directory).is_absolute() or spec.workdir):
            return
        problem = unusable_checkpoint_dir(str(Path(spec.workdir or "/", directory)), account)
        if problem is not None:
            raise InputError(source, problem, field="checkpoint_dir")

    def _check_fits(self, spec, source: str) -> None:
        """InputError unless the job could ever run here: an allowed type, enough slots of it, a queue that fits."""
        usable = [t for t in self.gpu_types if spec.allows(t)]
        if not usable:
            raise InputError(source, f"none of {', '.join(spec.gpu_types or ())} is offered here "
                             f"(this server has {', '.join(self.gpu_types)})", field="gpu_types")
        largest = max(usable, key=lambda t: self.capacity[t])
        sized = spec.elastic is not None and getattr(self.policy, "sizes_jobs", False)
        if sized and spec.elastic.min_gpus > self.capacity[largest]:  # a policy that sizes jobs needs only min_gpus
            raise InputError(source, f"asks for at least {spec.elastic.min_gpus}; the most this server has of an allowed"
                             f" type is {self.capacity[largest]} ({largest})", field="elastic.min_gpus")
        if not sized and spec.gpus > self.capacity[largest]:
            raise InputError(source, f"asks for {spec.gpus}; the most this server has of an allowed type is "
                             f"{self.capacity[largest]} ({largest})", field="gpus")
        refusal = getattr(self.state.executor, "refusal", None)  # an executor written before it may lack it
        refused = refusal(tuple(usable), spec.gpus, spec.cpus, spec.memory_gb) if refusal is not None else None
        if refused is not None:  # no machine of the executor's could ever hold what it needs beside its slots
            raise InputError(source, refused[1], field=refused[0])
        node = self.state.node
        shares = shares_by_type(node, list(self.state.slots)) if spec.cpus or spec.memory_gb else {}
        for name, asked, whole, part, unit in (("cpus", spec.cpus, len(node.cpus), 0, "CPU cores"),
                                               ("memory_gb", spec.memory_gb, node.memory_gib, 1, "GiB of memory")):
            most = max((shares[t][part] or 0.0 for t in usable if t in shares), default=0.0)
            if asked is None or not whole or asked <= most + 1e-9:
                continue
            if most >= whole - 1e-9:
                raise InputError(source, f"asks for {asked:g} {unit}; the node here has {whole:g}", field=name)
            raise InputError(source, f"asks for {asked:g} {unit}; the node here has {whole:g}, divided among its slot"
                             f" types by their slots: at most {most:g} beside the slots of a type it may use",
                             field=name)
        never_runs = getattr(self.policy, "never_runs", None)
        if never_runs is not None:
            view = one_job_view(gpus=spec.gpus, queue=spec.queue)
            cluster = ClusterView(tuple(self.gpu_types), np.array([self.capacity[t] for t in self.gpu_types]),
                                  np.full(len(self.gpu_types), np.nan))
            allowed = np.array([[1.0 if spec.allows(t) else 0.0 for t in self.gpu_types]])
            if never_runs(view, cluster, ThroughputView(allowed))[0]:
                raise InputError(source, f"asks for {spec.gpus}; queue '{spec.queue}' may not borrow and its "
                                 f"nominal quota of every allowed type is smaller, so it could never run", field="gpus")

    def _check_notify(self, target: NotifyTarget | None, source: str) -> None:
        """InputError naming ``notify`` when the server's ``--notify-hosts`` refuses its URL by its text."""
        if target is None:
            return
        refusal = self.config.notify_hosts.refusal(target)
        if refusal is not None:
            raise InputError(source, refusal, field="notify")

    def cancel(self, job_id: int, user: str, admin: bool = False) -> int:
        """Cancel job ``job_id`` for ``user``, or every task still active of the array ``job_id``
        names: Forbidden unless it is theirs or they are an admin. How many jobs were cancelled.

        Whose it is comes from the jobs' indexed columns before anything else is read or the server's
        lock is taken (a job's user never changes): a refusal costs two key lookups, whatever the size
        of the array. The cancel itself is a few SQL statements over the tasks' rows, no spec read."""
        found = self.store.owner(job_id)
        if found is None:
            raise NotFound(f"no job {job_id}")
        owner, array = found
        what = f"array {job_id}" if array else f"job {job_id}"
        if user != owner and not admin:
            raise Forbidden(f"{what} belongs to {owner!r}, not {user!r}")
        with self.lock:
            now = self.clock()
            with self.store.transaction():
                cancelled, live = self.store.cancel_active(job_id, array=array, by=user, now=now)
                if cancelled:
                    for resource in self.state.resources:  # what a job that never started was granted goes back
                        resource.cancelled(cancelled)
                    owners = {job_id} if array else {job_id, *(a for (a,) in self.store.job_columns(
                        ("array_id",), "id = ? AND array_id IS NOT NULL", (job_id,)))}
                    self.store.drop_after_edges(owners)
            if not cancelled:
                if array:
                    raise Conflict(f"array {job_id} has no task left to cancel: its "
                                   f"{self.store.array_size(job_id)} tasks have ended")
                raise Conflict(f"job {job_id} has already {_past(self.store.owners_and_statuses([job_id])[job_id][1])}")
            for live_id in live:
                self.executor.terminate(live_id)
            self.state.dirty = True
            self.changed.notify_all()
        self.log(f"{what} cancelled by {user}" + (f": {len(cancelled)} tasks" if array else ""))
        return len(cancelled)

    def lease(self, job_id: int, attempt: int, steps_done: int | None = None, skipped: tuple[str, ...] = ()) -> dict:
        """The lease call: renew until the round's end, or ``renew: false`` (checkpoint, exit 75);
        ``skipped``, at an attempt's first call: the newer checkpoints its restore passed over.

        Rounds are decided ahead of time, so the answer is usually known already. A call that
        comes earlier, close to its lease's end while the deciding round is due within
        ``renew_wait_s``, waits for that one round (the runtime's timeout is longer).
        """
        with self.changed:
            row = self.current(job_id, attempt)
            if steps_done is not None:
                _check_steps(steps_done, row)
            now = self.clock()
            fields = {"heard_at": now} if steps_done is None else {"heard_at": now, "steps_done": int(steps_done)}
            if row.contact_at is None:  # its first lease call: a full round from now
                fields["contact_at"] = now
                self.store.attempt_first_lease(job_id, attempt, now, steps_done)
                if row.stop is None and row.status == "running":
                    fields["lease_end"] = max(row.lease_end or now, now + self.config.round_s)
                    fields["reason"] = ""
                note = check_resumed(self.state, row, steps_done, now, skipped)  # did it resume from its checkpoint?
                if note is not None:
                    fields["reason"] = with_note(fields.get("reason", row.reason), note)
            if fields:
                self.store.update_job(job_id, **fields)
                row = replace(row, **fields)
            wait = self.config.renew_wait_s
            give_up, asked_in_round = now + wait, self.state.round
            while ("lease_end" not in fields and row.stop is None and row.status == "running"
                   and row.lease_end is not None
                   and self.state.round == asked_in_round and row.lease_end - now <= wait
                   and self.state.next_plan_at - now <= wait and now < give_up):
                self.changed.wait(timeout=min(give_up - now, 0.25))
                row = self.current(job_id, attempt)
                now = self.clock()
            if row.stop is not None or row.status != "running":
                self.store.attempt_stop_told(job_id, attempt, now, steps_done, row.lease_end)
                self.lease_answers["stop"] += 1
                return {"renew": False}
            self.store.attempt_lease_told(job_id, attempt, row.lease_end)
            self.lease_answers["renew"] += 1
            return {"renew": True, "lease_end": row.lease_end}

    def progress(self, job_id: int, attempt: int, steps_done: int, steps_per_s: float | None, *,
                 stall: dict[str, float] | None = None, **measured) -> str:
        """A progress report: the job's steps done, and a measured steps/s for the estimates; an
        elastic job's ``measured`` (noise scale, how its step was made) feeds its model; its data
        ``stall`` (the share of its step time spent waiting for data, its parts where known) is kept
        as the job's latest.

        Returns "" when the rate was used as reported, else a note saying how it was used (and
        when a job's examples done are not what the batches it was given make)."""
        reported_examples = measured.pop("examples_done", None)
        with self.lock:
            row = self.current(job_id, attempt)
            _check_steps(steps_done, row)
            # kept at the cores the round reads speeds at (its share under --cpu-split: resources/cores)
            factor = self.state.resources.report_factor(job_id) if steps_per_s is not None else 1.0
            counted = examples_done(row, steps_done)
            warning = ""
            if reported_examples is not None and counted is not None and reported_examples != counted:
                warning = (f"examples_done {reported_examples:,} at step {steps_done:,} is not what the batches it was "
                           f"given (APPORTION_BATCH_SIZE) make, {counted:,}: the server counts {counted:,}")
            with self.store.transaction():
                self.store.update_job(job_id, steps_done=int(steps_done), heard_at=self.clock(), **stall_fields(stall))
                if steps_done == row.total_steps:
                    self.store.attempt_done(job_id, attempt, self.clock())
                # a job sharing its slot reports its speed together, not the speed alone the estimates hold
                if steps_per_s is None or not row.gpu_type or row.partner:
                    return warning
                # an elastic job runs on as many slots as its round gave it
                key = (row.kind, row.gpu_type, len(row.slot_list) if row.elastic else row.gpus)
                used, note = plausible_rate(steps_per_s * factor, self.throughputs.rate(*key, None))
                if used is not None:
                    self.throughputs.record(*key, used, self.clock())
                    if row.elastic and self.state.elastic is not None:  # its model: as it ran
                        spec = ElasticSpec.from_dict(row.elastic)
                        self.state.elastic.record(row, spec, StepReport(used / factor, **measured), self.clock())
                return "; ".join(text for text in (note, warning) if text)

    def row(self, job_id: int) -> JobRecord:
        """Job ``job_id``'s row; NotFound if there is none."""
        row = self.store.job(job_id)
        if row is None:
            tasks = self.store.array_size(job_id)
            raise NotFound(f"job {job_id} is a job array of {tasks} tasks (jobs {job_id + 1}-{job_id + tasks}): "
                           f"`apportion queue --array {job_id}` lists them" if tasks else f"no job {job_id}")
        return row

    def current(self, job_id: int, attempt: int) -> JobRecord:
        """The job's row if ``attempt`` is its live attempt; Conflict if not (a stale attempt)."""
        row = self.row(job_id)
        if attempt > row.attempt:
            raise Conflict(f"job {job_id} has no attempt {attempt} (attempts so far: {row.attempt})")
        if attempt < row.attempt:
            raise Conflict(f"attempt {attempt} of job {job_id} is not its current attempt ({row.attempt})")
        if not row.attempt_live:  # its current attempt, ended: settled, and the job has not started another
            ended = self.store.attempt(job_id, attempt)
            how = (ended.how if ended is not None else None) or row.status
            raise Conflict(f"attempt {attempt} of job {job_id} has ended ({how}): it may no longer renew its lease or"
                           f" report progress; the job is {row.status}")
        return row


def stall_fields(stall: dict[str, float] | None) -> dict[str, float | None]:
    """The job's columns a report's data stall sets: all three when it gives one (a part it does not
    give is unknown now), none when it gives none (the latest stays)."""
    if not stall or STALL not in stall:
        return {}
    return {name: stall.get(name) for name in STALL_FIELDS}


def plausible_rate(reported: float, estimate: float) -> tuple[float | None, str]:
    """The rate a report may feed into an estimate now at ``estimate`` steps/s, and a note when
    that is not ``reported``: 0 feeds nothing; a rate is held within ``estimate`` ×/÷ RATE_FACTOR
    and at most MAX_STEPS_PER_S. A job that truly runs much faster or slower gets there over a
    few reports (the estimate is an average); a job that lies moves it little."""
    if not math.isfinite(reported) or reported <= 0:
        return None, "steps_per_s 0 says nothing about the speed; the estimate is unchanged"
    low, high = estimate / RATE_FACTOR, min(estimate * RATE_FACTOR, MAX_STEPS_PER_S)
    if not math.isfinite(estimate) or estimate <= 0:
        low, high = 0.0, MAX_STEPS_PER_S
    used = min(max(reported, low), high)
    if used == reported:
        return used, ""
    return used, (f"steps_per_s {reported:.6g} is more than {RATE_FACTOR:g}× off the current estimate "
                  f"{estimate:.6g} (or beyond {MAX_STEPS_PER_S:g}); counted as {used:.6g}")


def _check_steps(steps_done: int, row: JobRecord) -> None:
    """InputError unless ``steps_done`` lies within [0, the job's total_steps]."""
    if not 0 <= steps_done <= row.total_steps:
        raise InputError("request", f"must be from 0 to the job's total_steps ({row.total_steps:,}), "
                         f"got {steps_done:,}", field="steps_done")


def _past(status: str) -> str:
    return {"completed": "completed", "failed": "failed", "cancelled": "been cancelled"}.get(status, status)
