"""The attempts' lifecycle: starting them (with the contract's environment), escalating from a
lease's end to SIGTERM and SIGKILL, and settling an attempt that ended (completed, preempted,
cancelled, hung or crashed: retried from its checkpoint up to ``max_retries``, then failed; past
its time limit: failed; never placed on the executor's machines: back to wait for a round). What
stops a hung attempt or one past its time limit is watchdog.py's.

A job never has two attempts at once: an attempt starts only when the job has none alive.

What the server says about resuming is what will happen: the step a job resumes from is the
newest intact ``step-XXXXXXXX.*`` file in its checkpoint directory (docs/serve-contract.md:
readable by the job's account, matching its SHA-256 where it has one), read once when an
attempt ends, and it becomes the job's ``steps_done``; a corrupt one passed over is named. The
step the next attempt reports at its first lease call is the truth: one lower than said
(its restore passed over more, named in its call; or a script that never calls
``restore()``) is warned about, in the event log, the server's log and, for as long as the job
lives, its reason.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

from apportion.executors.base import Exit
from apportion.runtime.checkpoint import Intact
from apportion.serve.attempts.accounting import accrued
from apportion.serve.accounts.auth import issue_attempt_credential
from apportion.serve.attempts.checkpoints import newest_intact_as
from apportion.serve.attempts.context import SchedulerState, with_note
from apportion.serve.estimates.elastic_batch import attempt_batch
from apportion.serve.jobs.job_array import array_environment
from apportion.serve.jobs.records import JobRecord
from apportion.serve.accounts.runas import Account, NoAccount, prepare_job_dirs
from apportion.serve.base.space import NoSpace, is_no_space
from apportion.serve.attempts.watchdog import silence

EXIT_PREEMPTED = 75
EXIT_CANNOT_START = {126: "not executable", 127: "not found"}  # as a shell says it; the wrapper too
WATCHED = ("hung", "time_limit")  # stops the watchdog ordered (watchdog.py): SIGTERM already sent
RETRY_BACKOFF_CAP_S = 600.0  # the longest wait between a crash and its retry (unless the backoff itself is longer)
START_AT_ONCE = 4  # attempts a tick starts however long they take (ServeConfig.start_hold_s)


class AttemptLifecycle:
    """Starts, stops and settles the attempts of one server's jobs."""

    def __init__(self, state: SchedulerState) -> None:
        self.state = state
        self.store, self.executor, self.config, self.log = state.store, state.executor, state.config, state.log
        self.slots, self.slot_by_id = state.slots, state.slot_by_id
        self._killed: set[int] = set()  # SIGKILL sent to these jobs' attempts
        for event in self.store.warning_events():  # warnings outlive a server restart
            if event.event == "warning" and event.job_id is not None:
                state.notes[event.job_id] = event.detail
            elif event.event == "warning-cleared":
                state.notes.pop(event.job_id, None)

    def start_ready(self, now: float) -> None:
        """Start the jobs a round placed whose slots are free and that have no attempt alive, by id.

        A tick holds the state lock, which every API call waits for: after START_AT_ONCE starts it
        starts more only while it has spent less than ``start_hold_s`` on them, and the rest start at
        the next tick (a round that places a thousand jobs does not stall submits for a second)."""
        pending = self.store.pending_start_slots()
        if not pending:
            return
        began = time.perf_counter()
        holders_of: dict[str, set[str]] = {}  # slot -> ids of the live jobs holding it
        staying: set[str] = set()  # live jobs not told to go: a partner may start beside them
        for job_id, slots, stop in self.store.job_columns(("id", "slots", "stop"), "attempt_live"):
            for slot in slots.split(","):
                if slot:
                    holders_of.setdefault(slot, set()).add(str(job_id))
            if stop is None:
                staying.add(str(job_id))
        started = 0
        for job_id, slots, partner, reason in pending:
            slot_list = [slot for slot in slots.split(",") if slot]
            holders = sorted(set().union(*(holders_of.get(slot, set()) for slot in slot_list)))
            if partner is not None and holders == [str(partner)] and holders[0] in staying:
                holders = []  # space sharing: it starts beside its partner on the same slot
            if holders:
                waiting = f"starting on {slots} when job {', '.join(holders)} releases it"
                if reason != waiting:
                    self.store.update_job(job_id, reason=waiting)
                continue
            if self.executor.is_alive(job_id):  # never two attempts at once
                continue
            hold_s = self.config.start_hold_s
            if started >= START_AT_ONCE and hold_s is not None and time.perf_counter() - began > hold_s:
                return
            row = self.store.job(job_id)
            started += 1
            try:
                self._start(row, now)
            except NoSpace:  # no job's fault: nothing starts until the state directory has space again
                raise
            except Exception as err:  # what one job's fields make fail fails that job, not the others' starts
                self._cannot_start(row, err, now)
                continue
            staying.add(str(job_id))
            for slot in slot_list:
                holders_of.setdefault(slot, set()).add(str(job_id))

    def _start(self, row: JobRecord, now: float) -> None:
        """Start the job's next attempt on its promised slots; one that cannot start counts as a crash."""
        job_id, attempt = row.id, row.attempt + 1
        spec = row.spec
        batch, counted = attempt_batch(row)  # a target in examples: this attempt's batch and last step
        row = replace(row, **counted)
        checkpoint_dir = job_checkpoint_dir(self.state, row)
        lease_end = max(row.lease_end or 0.0, self.state.round_end, now + min(self.config.round_s, 1.0))
        slots = tuple(row.slot_list)
        try:
            account = self.config.run_as.account(row.user)  # None: as the server's own OS user
            env = self._environment(row, attempt, lease_end, checkpoint_dir, slots, batch, account)
            if account is None:
                Path(checkpoint_dir).mkdir(parents=True, exist_ok=True)
            else:
                prepare_job_dirs(account, self.config.state_dir, job_id, checkpoint_dir)
            options = {"run_as": account} if account is not None else {}
            if row.elastic is not None:  # one process a slot: torch.distributed's replicas
                options["replicas"] = len(slots)
            if spec.get("warm_start") is False:  # the job file asks for a cold start (executors/local/warm_start.py)
                options["cold"] = True
            for ask in ("cpus", "memory_gb"):  # what it needs beside its slots: Ray reserves it (executors/ray_room.py)
                if spec.get(ask) is not None:
                    options[ask] = spec[ask]
            handle = self.executor.start(job_id, attempt, spec["command"], env, spec.get("workdir"), slots, **options)
        except (OSError, NoAccount) as err:
            if is_no_space(err):  # no fault of the job's: it starts when there is space again
                raise self.store.no_space(f"starting job {job_id}: {err}") from err
            message = f"apportion: cannot start attempt {attempt}: {err}"
            try:
                log = self.executor.log_path(job_id, attempt)
                log.parent.mkdir(parents=True, exist_ok=True)
                with open(log, "a", encoding="utf-8") as out:
                    out.write(message + "\n")
            except OSError:
                pass
            with self.store.transaction():
                self._crashed(replace(row, attempt=attempt), None, now,
                              dict(attempt=attempt, slots="", gpu_type=None, partner=None),
                              saved_checkpoint(self.state, row), last_lines=message)
            return
        try:
            self._started(row, handle, now, lease_end, counted)
        except NoSpace:
            self.executor.kill(job_id)  # an attempt the state file does not know of must not run
            raise
        self.log(f"job {job_id} attempt {attempt} started on {','.join(slots)}"
                 + (f" (pid {handle.pid})" if handle.pid is not None else "") + _how_started(handle))

    def _started(self, row: JobRecord, handle, now: float, lease_end: float, counted: dict) -> None:
        """Record the attempt ``handle`` just started, in one transaction."""
        job_id, attempt, slots = row.id, row.attempt + 1, tuple(row.slot_list)
        with self.store.transaction():
            self.store.update_job(
                job_id, attempt=attempt, status="running", attempt_live=True, pid=handle.pid,
                proc_start=handle.proc_start, lease_end=lease_end,
                started=row.started if row.started is not None else now, accounted_at=now, reason=f"starting attempt {attempt}", stop=None, stop_at=None, term_at=None,
                exit_code=None, attempt_started=now, contact_at=None, heard_at=None, **counted,
            )
            self.store.add_event(now, job_id, "start", f"attempt {attempt} on {','.join(slots)}"
                                 + (f" pid {handle.pid}" if handle.pid is not None else "")  # None: no process here
                                 + _how_started(handle))
            self.store.attempt_started(job_id, attempt, now, row.gpu_type, row.slots, row.partner)
            if row.started is None:  # its first start: what a resource granted it is taken now (budget consumed)
                for resource in self.state.resources:
                    resource.started([job_id])

    def _cannot_start(self, row: JobRecord, err: Exception, now: float) -> None:
        """Fail job ``row``, whose start raised what no crash of its own explains."""
        if self.executor.is_alive(row.id):  # it raised after its process started: the job has no attempt
            self.executor.kill(row.id)
        reason = "cannot be started: " + " ".join(f"{type(err).__name__}: {err}".split())[:300]
        with self.store.transaction():
            self.store.update_job(row.id, status="failed", slots="", gpu_type=None, partner=None, finished=now,
                                  reason=reason)
            self.store.add_event(now, row.id, "fail", reason)
        self.log(f"job {row.id} failed: {reason}")

    def _environment(self, row: JobRecord, attempt: int, lease_end: float, checkpoint_dir: str,
                     slots: tuple[str, ...], batch: int | None, account: Account | None = None) -> dict[str, str]:
        """The attempt's environment: the server's (as its own OS user), or under ``--run-as mapped``
        a clean one (the account's login variables and ``--job-path``), then the job's ``env``,
        then apportion's variables."""
        if account is not None:
            env = self.config.run_as.clean_environment(account)
        else:
            env = {k: v for k, v in os.environ.items() if not k.startswith("APPORTION_") and k != "CUDA_VISIBLE_DEVICES"}
            env.setdefault("PYTHONUNBUFFERED", "1")
        devices = [self.slot_by_id[s].device for s in slots if s in self.slot_by_id and self.slot_by_id[s].device]
        cpu_slots = sum(1 for s in slots if s in self.slot_by_id and self.slot_by_id[s].gpu_type == "cpu")
        if cpu_slots:  # a CPU slot is a share of the host's cores
            per_slot = max(1, self.config.cpu_threads // max(1, sum(s.gpu_type == "cpu" for s in self.slots)))
            env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(per_slot * cpu_slots)
        env.update(row.spec.get("env") or {})
        env.update({
            "APPORTION_SERVER": self.config.server_url,
            "APPORTION_JOB_ID": str(row.id),
            "APPORTION_ATTEMPT": str(attempt),
            "APPORTION_LEASE_END": repr(float(lease_end)),
            "APPORTION_TOTAL_STEPS": str(row.total_steps),
            "APPORTION_CHECKPOINT_DIR": checkpoint_dir,
            "APPORTION_SLOTS": ",".join(slots),
            "CUDA_VISIBLE_DEVICES": ",".join(devices),
        })
        every = row.spec.get("checkpoint_every") or self.config.checkpoint_every
        if every is not None:  # periodic checkpoints (apportion.runtime's default is auto)
            env["APPORTION_CHECKPOINT_EVERY"] = str(every)
        elastic = row.spec.get("elastic")
        if elastic:  # apportion.runtime.elastic: the batch over all replicas, M0 and the learning-rate rule
            env["APPORTION_BATCH_SIZE"] = str(batch or elastic["batch_size"])
            if elastic.get("target_examples"):  # it stops there (the server's APPORTION_TOTAL_STEPS says when)
                env["APPORTION_TARGET_EXAMPLES"] = str(elastic["target_examples"])
            env["APPORTION_INIT_BATCH_SIZE"] = str(elastic.get("init_batch_size") or elastic["batch_size"])
            env["APPORTION_LR_RULE"] = elastic.get("lr_rule", "sqrt")
        if row.partner:  # space sharing: another job runs on the same slot, at the speed of the pair
            env["APPORTION_SHARED_WITH"] = str(row.partner)
        if row.array_id is not None:  # a job array's task: which one, of how many
            env.update(array_environment(row.array_id, row.array_index, self.store.array_size(row.array_id)))
        # its own credential: renews this attempt's lease and reports its progress, nothing else
        env["APPORTION_TOKEN"] = issue_attempt_credential(self.store, row.id, attempt)
        return env

    def escalate(self, now: float) -> None:
        """SIGTERM an attempt still alive ``grace_s`` after it should have gone; SIGKILL after as long again."""
        for r in self.store.stopping_attempts():
            if r.term_at is None and now >= (r.stop_at or now) + self.config.grace_s:
                self.executor.terminate(r.id)
                with self.store.transaction():
                    self.store.update_job(r.id, term_at=now, reason="did not stop at its lease end: SIGTERM sent")
                    self.store.add_event(now, r.id, "sigterm", f"attempt {r.attempt}")
                self.log(f"job {r.id}: SIGTERM (still running {self.config.grace_s:g} s after its lease end)")
            elif r.term_at is not None and now >= r.term_at + self.config.grace_s and r.id not in self._killed:
                self.executor.kill(r.id)
                self._killed.add(r.id)
                why = (r.reason.removesuffix(": SIGTERM sent") if r.stop in WATCHED
                       else "did not exit after SIGTERM")
                with self.store.transaction():
                    self.store.update_job(r.id, reason=f"{why}: SIGKILL sent")
                    self.store.add_event(now, r.id, "sigkill", f"attempt {r.attempt}")
                self.log(f"job {r.id}: SIGKILL")

    def on_exit(self, ended: Exit, now: float, heard_to_the_end: bool = True) -> None:
        """Settle an attempt that ended: its event and the job's new state in one transaction.
        ``heard_to_the_end``: the server was up until it exited (not so for one that ended while no server
        ran: its last progress report found nobody, so its steps are not judged)."""
        with self.store.transaction():
            self._settle(ended, now, heard_to_the_end)

    def _settle(self, ended: Exit, now: float, heard_to_the_end: bool = True) -> None:
        row = self.store.job(ended.job_id)
        if row is None or not row.attempt_live or ended.attempt != row.attempt:
            return
        self._killed.discard(ended.job_id)
        acct = accrued(row, now)
        code = ended.code
        what = (f"lost: {ended.lost}" if ended.lost else f"never placed: {ended.unplaced}" if ended.unplaced
                else _ended_how(code))
        saved = None if code == 0 else saved_checkpoint(self.state, row)
        kept = "" if saved is None else _kept(saved)
        self.store.add_event(now, row.id, "exit", f"attempt {row.attempt}: {what}{kept}")
        self.state.dirty = True
        released = dict(acct, attempt_live=False, pid=None, proc_start=None, slots="", gpu_type=None, partner=None,
                        lease_end=None, stop=None, stop_at=None, term_at=None, accounted_at=None, exit_code=code)
        if row.status == "cancelled" or row.stop == "cancel":  # cancelled, or failed by a round (rounds._fail)
            by = row.reason.replace("; stopping", "")
            ended_as = "failed" if row.status == "failed" else "cancelled"
            # its last step: the checkpoint it wrote as it stopped, when later than its last progress report
            last_step = row.steps_done if saved is None or saved.step is None else max(row.steps_done, saved.step)
            self.store.update_job(row.id, status=ended_as, reason=by, **dict(released, steps_done=last_step))
            self.store.attempt_ended(row.id, row.attempt, now, last_step, ended_as)
            self.log(f"job {row.id} {ended_as} ({what})")
        elif code == 0 and heard_to_the_end and short_of_steps(row):  # it says it is done, but its own reports say otherwise
            why = f"exited 0 after {row.steps_done} of {row.total_steps} steps"
            self.store.update_job(row.id, status="failed", finished=now, reason=f"{why} (attempt {row.attempt})",
                                  **dict(released, steps_done=row.steps_done))
            self.store.attempt_ended(row.id, row.attempt, now, row.steps_done, "failed")
            self.store.add_event(now, row.id, "fail", why)
            self.log(f"job {row.id} failed: {why}")
        elif code == 0:
            self.store.update_job(row.id, status="completed", reason="", finished=now, **released)
            self.store.attempt_ended(row.id, row.attempt, now, row.total_steps, "completed")
            if self.state.durations is not None:  # the predictor learns its GPU time, in the same transaction
                self.state.durations.record(row, now)
            self.log(f"job {row.id} completed (attempt {row.attempt}, {row.preemptions} preemptions)")
        elif row.stop == "time_limit":  # Slurm's --time: the job ends, whatever it was doing
            limit, resume = row.spec["time_limit"], _resume_point(row, saved)
            self.store.update_job(row.id, status="failed", finished=now, **dict(released, steps_done=resume.step),
                                  reason=f"time limit {limit:g} s reached (ran {acct.get('run_s', row.run_s):.0f} s"
                                  f" over {_times(row.attempt, 'attempt', 'attempts')}; {what})")
            self.store.attempt_ended(row.id, row.attempt, now, resume.step, "failed")
            self.store.add_event(now, row.id, "fail", f"time limit {limit:g} s")
            self.log(f"job {row.id} failed: time limit {limit:g} s reached ({what})")
        elif ended.unplaced:  # its machines could not be had (Ray): nothing ran, no fault of the job's
            self._unplaced(row, ended.unplaced, now, released, saved)
        elif row.stop == "hung" and not ended.lost:  # retried from its checkpoint as a crash is, and counted as one
            self._crashed(row, code, now, released, saved, hung=f"hung ({silence(row, self.config)}; {what})")
        elif code == EXIT_PREEMPTED or (row.stop == "preempt" and (code is None or code < 0 or row.term_at)):
            resume = _resume_point(row, saved)
            released.update(steps_done=resume.step)
            self.store.attempt_ended(row.id, row.attempt, now, resume.step,
                                     "moved" if row.move_to else "preempted")
            if row.move_to:  # it was moved: it restarts on the slots its round gave it
                move = row.move_to
                self.store.update_job(
                    row.id, status="preempted", **dict(released, slots=move.slots, gpu_type=move.gpu_type,
                                                          partner=move.partner), move_to=None,
                    reason=self._noted(row, f"moving to {move.slots} {resume.words}"))
                self.log(f"job {row.id} stopped at step {row.steps_done} to move to {move.slots} ({what});"
                         f" it restarts {resume.words}")
            else:
                self.store.update_job(
                    row.id, status="preempted", preemptions=row.preemptions + 1,
                    reason=self._noted(row, f"waiting to resume {resume.words}"), **released)
                self.log(f"job {row.id} preempted at step {max(row.steps_done, resume.step)} ({what});"
                         f" it resumes {resume.words}")
        elif code in EXIT_CANNOT_START and not ended.lost:  # a retry would fail the same way
            self._crashed(row, code, now, released, saved, cannot_start=True)
        else:
            self._crashed(row, code, now, released, saved, lost=ended.lost)

    def _unplaced(self, row: JobRecord, why: str, now: float, released: dict, saved: Intact) -> None:
        """Put the job of an attempt that never ran (``why``: what it waits for) back to wait for a round,
        counting neither a retry nor a preemption: a round places it again, where it may be placed then."""
        resume = _resume_point(row, saved)
        self.store.attempt_ended(row.id, row.attempt, now, resume.step, "unplaced")
        self.store.update_job(row.id, status="queued", move_to=None, reason=self._noted(row, why),
                              **dict(released, steps_done=resume.step))
        self.log(f"job {row.id}: attempt {row.attempt} never placed: {why}; it waits for a round")

    def _noted(self, row: JobRecord, reason: str) -> str:
        return with_note(reason, self.state.notes.get(row.id))

    def _crashed(self, row: JobRecord, code: int | None, now: float, released: dict, saved: Intact,
                 last_lines: str | None = None, lost: str = "", hung: str = "", cannot_start: bool = False) -> None:
        """Retry the job from ``saved`` (its newest intact checkpoint), or fail it.

        An attempt ``lost`` with the machine it ran on is retried whatever the count: it is no
        fault of the job's. One that ``hung`` (why, in words) counts as a crash. One whose command
        ``cannot_start`` (exit 126 or 127: not executable, not found) fails at once: the log's last
        line, behind the reason, names what is missing."""
        lines = last_lines if last_lines is not None else self.executor.tail(row.id, row.attempt, 20)
        last = next((line.strip() for line in reversed(lines.splitlines()) if line.strip()), "")
        what = ("could not start" if last_lines is not None else f"lost: {lost}" if lost else hung if hung
                else f"its command is {EXIT_CANNOT_START[code]} ({_ended_how(code)})" if cannot_start
                else _ended_how(code))
        retries = row.retries + (0 if cannot_start else 1)
        resume = _resume_point(row, saved)
        released = dict(released, steps_done=resume.step)
        fails = (retries > self.config.max_retries or cannot_start) and not lost
        self.store.attempt_ended(row.id, row.attempt, now, resume.step, "failed" if fails else "crashed")
        if fails:
            after = "not retried" if cannot_start else f"after {_times(self.config.max_retries, 'retry', 'retries')}"
            # the log's last line may hold anything the job printed: kept apart, for its owner and admins
            self.store.update_job(
                row.id, status="failed", retries=retries, finished=now, last_lines=lines, reason_log=last,
                reason=f"{what} on attempt {row.attempt}, {after}", **released)
            self.store.add_event(now, row.id, "fail", what)
            self.log(f"job {row.id} failed: {what}" + (f": {last}" if last else ""))
        else:
            delay = 0.0 if lost else retry_delay_s(retries, self.config.retry_backoff_s)  # a lost node: at once
            wait = f" in {delay:.0f} s" if delay else ""
            retry = (f"retry {retries} {resume.words}" if lost else
                     f"retry {retries} of {self.config.max_retries}{wait} {resume.words}")
            if delay:  # no round places it before then (rounds.py); the tick asks for one when it ends
                self.state.retry_at[row.id] = now + delay
            elif last_lines is None and not lost and row.stop is None and not row.partner and row.slots:
                # the round gave it these slots and nobody else has them: it restarts on them at once
                released.update(slots=row.slots, gpu_type=row.gpu_type)
            self.store.update_job(row.id, status="queued", retries=retries, last_lines=lines,
                                  reason=self._noted(row, f"{what}; {retry}"), **released)
            self.store.add_event(now, row.id, "retry", retry)
            self.log(f"job {row.id} crashed ({what}) at step {max(row.steps_done, resume.step)}; {retry}")


def retry_delay_s(retry: int, backoff_s: float) -> float:
    """How long a crashed job waits before its ``retry``-th retry: ``backoff_s`` × 2^(retry-1), at most
    RETRY_BACKOFF_CAP_S (or ``backoff_s`` where that is more); 0 when ``backoff_s`` is 0. A command that
    fails at once does not burn its retries in seconds."""
    if backoff_s <= 0 or retry < 1:
        return 0.0
    return min(backoff_s * 2.0 ** min(retry - 1, 30), max(backoff_s, RETRY_BACKOFF_CAP_S))


def short_of_steps(row: JobRecord) -> bool:
    """Did the job report fewer steps than its total (so an exit 0 is no completion)? Only a job that
    reports its steps is judged (a lease call or progress report this attempt, or steps from an
    earlier one): a command that never talks to the server is taken at its word. Elastic jobs
    count examples, not steps, and are left to their own end."""
    reported = row.heard_at is not None or row.steps_done > 0
    return reported and row.elastic is None and row.steps_done < row.total_steps


def _how_started(handle) -> str:
    """ ", warm" (handed to a spare that has imported torch) or ", cold" (exec'd), as the executor says; ""."""
    warm = getattr(handle, "warm", None)
    return "" if warm is None else ", warm" if warm else ", cold"


def _ended_how(code: int | None) -> str:
    """An attempt's exit, in words: "exit 1", "killed by SIGKILL", "killed (no exit code)"."""
    if code is None:
        return "killed (no exit code)"
    return f"killed by {_signal_name(-code)}" if code < 0 else f"exit {code}"


def _resume_point(row: JobRecord, saved: Intact) -> ResumePoint:
    """Where the job's next attempt will start: ``saved``, its newest intact checkpoint, or step 0."""
    if saved.step is None:
        if saved.error:
            return ResumePoint(0, f"from step 0: {saved.error}")
        if saved.skipped:
            return ResumePoint(0, f"from step 0: no intact checkpoint ({_skipped_words(saved.skipped)})")
        return ResumePoint(0, "from step 0: it had no checkpoint")
    behind = row.steps_done - saved.step
    lost = f"; the {behind} step(s) after it are redone" if behind > 0 else ""
    which = f"its newest intact checkpoint; {_skipped_words(saved.skipped)}" if saved.skipped else "its last checkpoint"
    return ResumePoint(saved.step, f"from step {saved.step} ({which}{lost})")


class ResumePoint(NamedTuple):
    step: int
    words: str  # "from step S (its last checkpoint)", or "from step 0: it had no checkpoint"


def _skipped_words(skipped: tuple[str, ...]) -> str:
    """ "skipped step-00000040.pt: checksum mismatch" for lines "step-00000040.pt: checksum mismatch: …"."""
    return "skipped " + ", ".join(_short(line) for line in skipped)


def _short(line: str) -> str:
    """ "FILE: what" of a line "FILE: what: details" (the details go to the event log)."""
    name, _, why = line.partition(": ")
    what = why.split(": ")[0]
    return f"{name}: {what if what.count('(') == what.count(')') else why}"


def _kept(saved: Intact) -> str:
    """What an exit event says of the checkpoints it leaves, the files passed over in full."""
    newest = "; no checkpoint" if saved.step is None else f"; newest checkpoint step {saved.step}"
    if saved.error:
        return f"{newest} ({saved.error})"
    return f"{newest} (skipped {'; '.join(saved.skipped)})" if saved.skipped else newest


def saved_checkpoint(state: SchedulerState, row: JobRecord) -> Intact:
    """The job's newest intact checkpoint, read as the OS account it runs as."""
    try:
        account = state.config.run_as.account(row.user)
    except NoAccount as err:  # nobody to read it as: nothing counts
        return Intact(None, error=str(err))
    return newest_intact_as(job_checkpoint_dir(state, row), account)


def job_checkpoint_dir(state: SchedulerState, row: JobRecord) -> str:
    """The job's APPORTION_CHECKPOINT_DIR: its job file's, else STATE_DIR/jobs/ID/checkpoints
    (SHARED_DIR/jobs/ID/checkpoints when the server has a directory its nodes share)."""
    root = state.config.shared_dir or state.config.state_dir
    return row.spec.get("checkpoint_dir") or str(root / "jobs" / str(row.id) / "checkpoints")


def check_resumed(state: SchedulerState, row: JobRecord, steps_done: int | None, now: float,
                  skipped: tuple[str, ...] = ()) -> str | None:
    """At an attempt's first lease call: did it resume from where the server said it would?

    That step is the one its last attempt ended at (the newest intact checkpoint then). An
    attempt that starts below it either passed over newer checkpoints it could not load
    (``skipped``, what the runtime says in that call) or ignores them (a script that never calls
    ``restore()`` starts over from 0 on every attempt and, preempted often enough, never
    finishes). Returns the job's new reason, or None when nothing changes.
    """
    job_id = row.id
    if skipped:
        state.store.add_event(now, job_id, "resumed", f"attempt {row.attempt} at step {steps_done}; "
                              f"its restore skipped {'; '.join(skipped)}")
    if steps_done is None or row.attempt < 2:
        return None
    saved = state.store.end_step(job_id, row.attempt - 1)
    if saved is not None and steps_done < saved:
        if skipped:
            note = (f"WARNING: attempt {row.attempt} resumed at step {steps_done}, not {saved}: its newer "
                    f"checkpoints could not be loaded ({_skipped_words(skipped)})")
        elif steps_done == 0:
            note = (f"WARNING: never calls restore(): restarts from 0 (attempt {row.attempt} started at step 0;"
                    f" step {saved} is checkpointed)")
        else:
            note = (f"WARNING: attempt {row.attempt} resumed at step {steps_done}, not from its newest checkpoint"
                    f" (step {saved})")
        if state.notes.get(job_id) != note:
            state.notes[job_id] = note
            state.store.add_event(now, job_id, "warning", note)
            state.log(f"job {job_id}: {note}")
        return note
    if job_id in state.notes:  # it resumes as it should now
        del state.notes[job_id]
        state.store.add_event(now, job_id, "warning-cleared", f"attempt {row.attempt} resumed at step {steps_done}")
    return None


def _times(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
