"""The few lines that make a training script preemptible, resumable and measurable.

    job = Job.from_env(total_steps=200)
    state = job.restore(current_state())          # the newest checkpoint, or your own state
    if job.resumed:
        load_back(state)
    for step in job.steps(current_state):         # step = number of steps already done
        train_one_step()

``steps()`` yields from the restored step to the total. Between two steps it

- reports steps done and measured steps/s to the server every few seconds (in the
  background, so a slow server never holds training up), with the share of step time spent
  waiting for data where the job times it (``batches``, ``waiting_for_data``, stalls.py);
- near the end of its lease asks the server whether it keeps its GPUs: yes → carry on with
  the new lease end and write nothing; no → checkpoint the state after the last completed
  step and exit with code 75 (preempted, resume me);
- after SIGTERM (the executor's stop signal) checkpoints the same way and exits 75;
- after a 409 (this attempt is stale) exits at once without writing anything;
- writes periodic checkpoints in the background, as often as a 5% overhead allows and at
  least every 5 minutes (cadence.py), so that a crash loses little.

A job of several processes (one a GPU, torch.distributed initialized before the first step)
works as one: rank 0 alone talks to the server and writes checkpoints, and the ranks agree
between steps on going on or stopping, so they all stop at the same step (group.py).

A server that cannot be reached never stops training: the job asks again a little later.
Run without ``APPORTION_JOB_ID`` the script is standalone and runs to its end.
"""

from __future__ import annotations

import atexit
import gc
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar

from apportion.runtime.cadence import Cadence, CheckpointEvery
from apportion.runtime.checkpoint import Checkpointer
from apportion.runtime.client import LeaseClient, ServerError, StaleAttempt
from apportion.runtime.env import JobEnv
from apportion.runtime.group import GO, STALE, STOP, Group
from apportion.runtime.rng import rng_state, set_rng_state
from apportion.runtime.stalls import DataStall, StallMeter, use

T = TypeVar("T")

RANKS_KEY = "__apportion_ranks__"  # a group's checkpoint: every rank's own state ({"rng", "state"}), in rank order
PREEMPTED_EXIT_CODE = 75  # EX_TEMPFAIL: stopped after a complete checkpoint, resume me
QUICK_LEASE_S = 0.5  # how long a lease call with much of its lease left waits for an absent server
# A stale attempt stops without writing; its last complete checkpoint is untouched, so
# "resume from the last checkpoint" is still the truth and the same code is the safe one.
STALE_EXIT_CODE = PREEMPTED_EXIT_CODE


def _exit(code: int) -> None:
    """``sys.exit(code)``, with a shorter interpreter teardown if the interpreter does exit.

    With torch loaded, Python's final garbage collection over torch's module graph takes
    most of a second; freezing the heap at exit (``gc.freeze`` from an atexit hook, so after
    ``finally`` blocks and before teardown) makes it ~0.15 s, and the GPUs go back sooner.
    Code that catches the SystemExit in-process is not affected.
    """
    atexit.register(gc.freeze)
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    sys.exit(code)


def _env_count(name: str) -> int | None:
    """A positive count from the environment (torch.distributed's WORLD_SIZE, say), or None."""
    value = os.environ.get(name, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def _stderr_log(message: str) -> None:
    """One line, in one write: an elastic job's replicas share a log, and unbuffered (PYTHONUNBUFFERED)
    ``print`` writes the text and its newline separately, so two ranks' lines could interleave."""
    sys.stderr.write(f"[apportion] {message}\n")
    sys.stderr.flush()


class _Meter:
    """Steps/s from the time the training loop spent in its steps, first steps left out."""

    def __init__(self, warmup_steps: int) -> None:
        self.warmup_steps = warmup_steps
        self.seen = 0
        self.window_steps = 0
        self.window_s = 0.0
        self.total_steps = 0
        self.total_s = 0.0
        self.warm_s = 0.0  # time of the warm-up steps, used only while nothing else is known
        self.last_rate: float | None = None

    def add(self, seconds: float) -> None:
        self.seen += 1
        if self.seen <= self.warmup_steps:
            self.warm_s += seconds
            return
        self.window_steps += 1
        self.window_s += seconds
        self.total_steps += 1
        self.total_s += seconds

    def step_estimate(self) -> float:
        if self.total_steps:
            return self.total_s / self.total_steps
        return self.warm_s / self.seen if self.seen else 0.0

    def rate(self, *, reset_window: bool) -> float | None:
        if self.window_steps and self.window_s > 0:
            rate = self.window_steps / self.window_s
        elif self.last_rate is not None:
            rate = self.last_rate
        elif self.seen and self.warm_s > 0:
            rate = self.seen / self.warm_s
        else:
            rate = None
        if reset_window:
            self.window_steps, self.window_s = 0, 0.0
        if rate is not None:
            self.last_rate = rate
        return rate

    def overall_rate(self) -> float | None:
        if self.total_steps and self.total_s > 0:
            return self.total_steps / self.total_s
        return self.rate(reset_window=False)


class Job:
    """One attempt of a training job: its steps, lease, checkpoints and reports.

    Build it with :meth:`from_env`. ``step`` is the number of completed steps; it is the step
    number stored in a checkpoint and the first value ``steps()`` yields after a resume.
    """

    def __init__(
        self,
        total_steps: int,
        *,
        env: JobEnv | None = None,
        checkpoint_dir: str | Path | None = None,
        client: LeaseClient | None = None,
        keep: int = 2,
        report_every_s: float = 5.0,
        lease_margin_s: float = 1.0,
        lease_retry_s: float = 2.0,
        lease_retry_max_s: float = 30.0,
        checkpoint_every: str | float | None = None,
        checkpoint_every_s: float | None = None,
        warmup_steps: int = 2,
        handle_sigterm: bool = True,
        log: Callable[[str], None] | None = _stderr_log,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        """``clock``: what times steps and waits for data (seconds, monotonic)."""
        if total_steps < 0:
            raise ValueError("total_steps must be >= 0")
        self.env = env or JobEnv()
        self.total_steps = int(total_steps)
        self.client = client
        self.attempt = self.env.attempt
        self.lease_end = self.env.lease_end
        self.report_every_s = report_every_s
        self.lease_margin_s = lease_margin_s
        self.lease_retry_s = lease_retry_s
        self.lease_retry_max_s = lease_retry_max_s
        self._retry_s = lease_retry_s  # doubles while the server stays unreachable
        if self.env.checkpoint_every is not None:  # the environment wins (the job file, the server)
            every = CheckpointEvery.parse(self.env.checkpoint_every, source="APPORTION_CHECKPOINT_EVERY")
        elif checkpoint_every_s is not None:
            every = CheckpointEvery("fixed", float(checkpoint_every_s))
        else:
            every = CheckpointEvery.parse(checkpoint_every)
        self.cadence = Cadence(every)
        self._log = log or (lambda message: None)
        self.checkpointer = (
            Checkpointer(checkpoint_dir, keep=keep, log=self._log) if checkpoint_dir is not None else None
        )

        self.step = 0
        self.resumed = False
        self.restored_from: Path | None = None
        self.skipped_checkpoints: tuple[str, ...] = ()  # newer ones restore() passed over: the server hears why
        self.started_at = time.time()
        self._saved_step: int | None = None  # step of the newest checkpoint on disk, if known
        self._restore_called = False
        self._started_steps = False
        self._pending_step: int | None = None  # step of a background write not yet collected
        self._last_checkpoint_at = time.monotonic()
        self._clock = clock
        self._meter = _Meter(warmup_steps)
        self._stalls = StallMeter(clock)  # waits for data against steps (stalls.py)
        self._not_before = 0.0  # no lease call before this time (after errors)
        self._contacted = False  # the first boundary always asks: the server learns the job is up
        self._stop_signal: int | None = None
        self._stale: StaleAttempt | None = None
        self._reporter: threading.Thread | None = None
        self._last_report = time.monotonic()
        self._old_handler = None
        self._group: Group | None = None  # the job's other processes, when it has some
        self._rank_state_fn: Callable[[], Any] | None = None  # steps(rank_state=...): this rank's own state
        self._ranks: list | None = None  # rank 0: every rank's own state, gathered for the checkpoint being written
        self._restored_own: dict | None = None  # this rank's own state in the checkpoint restored
        self._measured: dict[str, float] = {}  # what an elastic job measured, sent with its progress reports
        if handle_sigterm and (self.client is not None or self.checkpointer is not None):
            self._install_sigterm()

    # --- construction ------------------------------------------------------------------
    @classmethod
    def from_env(
        cls,
        total_steps: int | None = None,
        checkpoint_dir: str | Path | None = None,
        **options: Any,
    ) -> Job:
        """A Job from the environment the executor sets; the environment wins over arguments.

        ``total_steps`` and ``checkpoint_dir`` are the standalone defaults (a standalone job
        without a checkpoint directory writes no checkpoints).
        """
        env = JobEnv.from_environ()
        total = env.total_steps if env.total_steps is not None else total_steps
        if total is None:
            raise ValueError("total_steps is not set: pass it, or set APPORTION_TOTAL_STEPS")
        log = options.get("log", _stderr_log) or (lambda message: None)
        client = None
        if not env.standalone:
            if env.server:
                client = LeaseClient(env.server, env.job_id, env.attempt, env.token)
            else:
                log(f"job {env.job_id} has no APPORTION_SERVER: running without a lease")
        return cls(
            total,
            env=env,
            checkpoint_dir=env.checkpoint_dir or checkpoint_dir,
            client=client,
            **options,
        )

    @property
    def standalone(self) -> bool:
        return self.client is None

    @property
    def steps_per_s(self) -> float | None:
        """The latest measured steps/s (training time only, warm-up steps left out)."""
        return self._meter.last_rate if self._meter.last_rate is not None else self._meter.overall_rate()

    # --- resume ------------------------------------------------------------------------
    def restore(self, default: Any = None) -> Any:
        """The state in the newest complete checkpoint, or ``default`` when there is none.

        Sets ``resumed``, ``step`` (the checkpoint's step) and ``restored_from``.
        """
        self._restore_called = True
        if self.checkpointer is None:
            return default
        start = time.perf_counter()
        found = self.checkpointer.load_latest()
        self.skipped_checkpoints = tuple(self.checkpointer.skipped)
        if found is None:
            if self.skipped_checkpoints:
                self._log(f"attempt {self.attempt}: no checkpoint could be loaded; starting from step 0")
            return default
        step, state, path = found
        if isinstance(state, dict) and RANKS_KEY in state:  # every rank's own state (a group's checkpoint)
            state = dict(state)
            self._restored_own = _own_of(state.pop(RANKS_KEY))
        self.step = self._saved_step = step
        self.resumed = True
        self.restored_from = path
        self._log(
            f"attempt {self.attempt}: resumed from {path.name} at step {step}/{self.total_steps}"
            f" (loaded in {time.perf_counter() - start:.3f}s)"
        )
        return state

    def checkpoint(self, state: Any, *, wait: bool = True) -> Path | None:
        """Write ``state`` as the checkpoint of the current step now (in a group, rank 0 writes; the others return None)."""
        if self.checkpointer is None:
            raise RuntimeError("this job has no checkpoint directory")
        if not self._writes:
            return None
        self._collect_write()
        if self._ranks is not None and isinstance(state, dict):  # each rank's own random state and rank_state
            state = {**state, RANKS_KEY: self._ranks}
        self._ranks = None
        self.checkpointer.snapshot(state, self.step)
        self._pending_step = self.step
        self._last_checkpoint_at = time.monotonic()
        if not wait:
            return None
        path = self.checkpointer.wait()
        self._pending_step = None
        self._saved_step = self.step
        return path

    # --- the loop ----------------------------------------------------------------------
    def steps(self, state_fn: Callable[[], Any], rank_state: Callable[[], Any] | None = None) -> Iterator[int]:
        """Yield the step numbers still to run; ``state_fn()`` gives the state to checkpoint. In a group,
        ``rank_state()`` gives what is each rank's own (its data order: ``sampler.state()``), saved
        with rank 0's checkpoint for every rank beside its random generators; ``job.rank_state``
        hands it back to the same rank on resume."""
        self._rank_state_fn = rank_state
        if not self._started_steps:
            self._started_steps = True
            use(self._stalls)
            self._join_group()
            self._own_random_state()
            self._before_first_step()
        clock, stalls = self._clock, self._stalls
        while self.step < self.total_steps:
            self._between_steps(state_fn)
            stalls.in_step = True
            start = clock()
            yield self.step
            elapsed = clock() - start
            stalls.step_done(elapsed)
            self._meter.add(elapsed)
            self.step += 1
        self._finish()

    # --- waiting for data --------------------------------------------------------------
    def batches(self, loader: Iterable[T]) -> Iterator[T]:
        """``loader``'s batches, pass after pass, each wait for one timed as a data stall:
        ``for step, batch in zip(job.steps(state), job.batches(loader))`` (the steps first, so
        that the loop ends when they do). Any iterable: a PyTorch DataLoader, a generator, a list."""
        return self._stalls.batches(loader)

    def waiting_for_data(self) -> AbstractContextManager[None]:
        """``with job.waiting_for_data(): batch = ...``: the block's time is a data stall."""
        return self._stalls.waiting()

    def data_wait(self, seconds: float, fetch_s: float | None = None) -> None:
        """A data stall the loop timed itself: ``seconds`` waiting, ``fetch_s`` of them fetching if known."""
        self._stalls.waited(seconds, fetch_s)

    @property
    def data_stall(self) -> DataStall | None:
        """The share of this attempt's step time spent waiting for data so far; None if never timed."""
        return self._stalls.overall()

    def _before_first_step(self) -> None:
        """Say how this attempt checkpoints, and warn when it ignores a checkpoint it could resume from."""
        if self.checkpointer is None:
            return
        self._log(f"attempt {self.attempt}: {self.cadence.describe()}")
        self._last_checkpoint_at = time.monotonic()
        if self._restore_called or self.step != 0:
            return
        found = self.checkpointer.checkpoints()
        if found:
            self._log(
                f"attempt {self.attempt}: WARNING: {found[-1][1].name} is on disk but this script never called"
                f" job.restore(): it starts over from step 0, and so will every later attempt"
            )

    def _join_group(self) -> None:
        """Find the job's other processes (torch.distributed, initialized by the script)."""
        self._group = Group.current()
        if self._group is not None:
            role = "talks to the server and writes checkpoints" if self._group.leads else "follows rank 0"
            self._log(f"attempt {self.attempt}: rank {self._group.rank} of {self._group.size}: {role}")

    @property
    def rank_state(self) -> Any:
        """This rank's own ``rank_state()`` as the checkpoint restored holds it (a group's); None without one."""
        return None if self._restored_own is None else self._restored_own.get("state")

    def _own_random_state(self) -> None:
        """In a group resumed from a checkpoint that holds every rank's random generators, this rank takes
        its own back before its first step (after the script's restore: rank 0's would be wrong here)."""
        if self._group is not None and self._restored_own is not None and "rng" in self._restored_own:
            set_rng_state(self._restored_own["rng"])
            self._log(f"attempt {self.attempt}: rank {self._group.rank}: its own random generators restored")

    def _own_state(self) -> dict:
        """What this rank hands rank 0 for a checkpoint: its random generators, its ``rank_state()``."""
        return {"rng": rng_state(), "state": self._rank_state_fn() if self._rank_state_fn is not None else None}

    @property
    def _leads(self) -> bool:
        """Talks to the server: a job alone, or rank 0 of a group."""
        return self.client is not None and (self._group is None or self._group.leads)

    @property
    def _writes(self) -> bool:
        """Writes checkpoints: a job alone, or rank 0 of a group."""
        return self._group is None or self._group.leads

    def _between_steps(self, state_fn: Callable[[], Any]) -> None:
        if self._group is not None:
            self._between_steps_together(state_fn)
            return
        if self._stale is not None:
            self._exit_stale(self._stale)
        if self._stop_signal is not None:
            self._preempt(state_fn, f"signal {signal.Signals(self._stop_signal).name}")
        if self.client is not None:
            if self._lease_due(time.time()):
                self._ask_lease(state_fn)
            if time.monotonic() - self._last_report >= self.report_every_s:
                self._report_in_background()
        self._periodic_checkpoint(state_fn)

    def _between_steps_together(self, state_fn: Callable[[], Any]) -> None:
        """Rank 0 asks the server; then every rank goes on, or stops, as the most urgent of them says."""
        verdict, reason = GO, ""
        if self._stale is not None:
            verdict = STALE
        elif self._stop_signal is not None:
            verdict, reason = STOP, f"signal {signal.Signals(self._stop_signal).name}"
        elif self._leads:
            if self._lease_due(time.time()) and not self._lease_renewed():
                verdict, reason = (STALE, "") if self._stale is not None else (STOP, "lease not renewed")
            if time.monotonic() - self._last_report >= self.report_every_s:
                self._report_in_background()
        agreed, save = self._group.agree_on(verdict, self._writes and self._checkpoint_due())
        if agreed == STALE:
            self._exit_stale(self._stale or StaleAttempt("rank 0's attempt is stale"))
        if (agreed == STOP or save) and self.checkpointer is not None:  # every rank hands rank 0 its own state
            self._ranks = self._group.gather(self._own_state())
        if agreed == STOP:
            self._preempt(state_fn, reason or "another rank is stopping")
        if save and self._writes:
            self.checkpoint(state_fn(), wait=False)

    def _periodic_checkpoint(self, state_fn: Callable[[], Any]) -> None:
        if self._checkpoint_due():
            self.checkpoint(state_fn(), wait=False)

    def _checkpoint_due(self) -> bool:
        """Is a periodic checkpoint due now (a background write that ended is collected first)?"""
        if self.checkpointer is None or not self.cadence.enabled:
            return False
        if self._pending_step is not None and not self.checkpointer.writing:
            self._collect_write()  # a background write has ended: note its step and its cost
            if self._leads:  # the server hears a step no older than the checkpoint a loss resumes from
                self._report_in_background()
        return (
            self._pending_step is None
            and self.step > 0
            and self._saved_step != self.step
            and self.cadence.due(time.monotonic() - self._last_checkpoint_at)
        )

    # --- lease -------------------------------------------------------------------------
    def _lease_due(self, now: float) -> bool:
        if now < self._not_before:
            return False
        if self.lease_end is None or not self._contacted:
            return True
        return now + self.lease_margin_s + self._meter.step_estimate() >= self.lease_end

    def _ask_lease(self, state_fn: Callable[[], Any]) -> None:
        if not self._lease_renewed():
            if self._stale is not None:
                self._exit_stale(self._stale)
            self._preempt(state_fn, "lease not renewed")

    def _lease_renewed(self) -> bool:
        """Ask the server for the lease: False when it is not renewed, or when this attempt is stale
        (``_stale`` set); a server that cannot be reached renews it for now."""
        assert self.client is not None
        try:
            said = {} if self._contacted or not self.skipped_checkpoints else {"skipped": self.skipped_checkpoints}
            answer = self.client.lease(self.step, deadline_s=self._lease_deadline(), **said)
        except StaleAttempt as exc:
            self._stale = exc
            return False
        except ServerError as exc:
            self._log(f"lease renewal failed ({exc}); training on, asking again in {self._retry_s:g}s")
            self._not_before = time.time() + self._retry_s
            self._retry_s = min(2 * self._retry_s, self.lease_retry_max_s)
            return True
        self._retry_s = self.lease_retry_s
        self._contacted = True
        if not answer.renew:
            return False
        now = time.time()
        self.lease_end = answer.lease_end
        if self.lease_end is None or self.lease_end <= now:
            self._not_before = now + self.lease_retry_s  # never hammer a confused server
        return True

    def _lease_deadline(self) -> float | None:
        """A short try when the lease has long to run (an attempt's first call): a server that is
        restarting then holds training up for half a second rather than the client's whole deadline,
        and is asked again a little later. None (the client's deadline) when the lease is ending."""
        if self.lease_end is not None and self.lease_end - time.time() > self.lease_margin_s + 2 * self.client.deadline_s:
            return QUICK_LEASE_S
        return None

    # --- stopping ----------------------------------------------------------------------
    def _preempt(self, state_fn: Callable[[], Any], reason: str) -> None:
        start = time.perf_counter()
        if self.checkpointer is None:
            self._log(f"stopping at step {self.step} ({reason}) without a checkpoint directory")
        elif not self._writes:
            self._log(f"attempt {self.attempt}: preempted at step {self.step}/{self.total_steps} ({reason}); "
                      f"rank 0 writes the checkpoint; exit {PREEMPTED_EXIT_CODE}")
        else:
            self._collect_write()
            if self._saved_step == self.step:
                detail = f"step-{self.step:08d}.pt already on disk"
            elif self.step == 0:
                detail = "no step done, nothing to save"
            else:
                self.checkpoint(state_fn())
                detail = (
                    f"checkpoint step-{self.step:08d}.pt: snapshot {self.checkpointer.last_snapshot_s:.3f}s,"
                    f" write {self.checkpointer.last_write_s:.3f}s"
                )
            self._log(
                f"attempt {self.attempt}: preempted at step {self.step}/{self.total_steps} ({reason}); "
                f"{detail}; total {time.perf_counter() - start:.3f}s; exit {PREEMPTED_EXIT_CODE}"
            )
        self._restore_sigterm()
        _exit(PREEMPTED_EXIT_CODE)

    def _exit_stale(self, exc: StaleAttempt) -> None:
        if self.checkpointer is not None:
            self.checkpointer.abort()  # an in-flight write must not land over the current attempt's
        self._log(f"attempt {self.attempt}: {exc}; exiting without a checkpoint")
        self._restore_sigterm()
        _exit(STALE_EXIT_CODE)

    def _collect_write(self) -> None:
        """Wait for a background (periodic) write and note its step."""
        if self.checkpointer is None:
            return
        path, pending = self.checkpointer.wait(), self._pending_step
        self._pending_step = None
        if path is not None and pending is not None:
            self._saved_step = pending
            said = self.cadence.measured(
                self._meter.step_estimate(), self.checkpointer.last_snapshot_s, self.checkpointer.last_write_s
            )
            if said:
                self._log(f"attempt {self.attempt}: {said}")

    def _finish(self) -> None:
        self._collect_write()
        if self._reporter is not None:
            self._reporter.join()
        if self._stale is not None:
            self._exit_stale(self._stale)
        rate = self._meter.overall_rate()
        if self._leads and rate is not None:
            stall = self._stalls.overall()
            measured = {**self._measured, **(stall.fields() if stall is not None else {})}
            try:
                self.client.progress(self.step, rate, deadline_s=min(5.0, self.client.deadline_s), **measured)
            except StaleAttempt as exc:
                self._exit_stale(exc)
            except ServerError as exc:
                self._log(f"final progress report failed: {exc}")
        self._log(
            f"attempt {self.attempt}: finished {self.step}/{self.total_steps} steps"
            + (f", {rate:.1f} steps/s" if rate is not None else "")
        )
        self._restore_sigterm()

    # --- progress ----------------------------------------------------------------------
    def measured(self, **values: float | None) -> None:
        """What an elastic job measured of its recent steps, sent with its next progress reports
        (rank 0's): ``noise_scale`` (examples), ``sync_s`` (seconds a step waits for its gradients'
        synchronisation after its own compute: step − compute, not the all-reduce's whole length,
        which may overlap the backward pass), ``micro_batch`` (examples a replica computes at once),
        ``micro_batches`` (a replica's per step). The server fits the job's step-time model and
        statistical efficiency to them (docs/goodput.md); the nodes the replicas span come from the
        environment."""
        self._measured.update({k: float(v) for k, v in values.items() if v is not None})
        world, local = _env_count("WORLD_SIZE"), _env_count("LOCAL_WORLD_SIZE")
        if world and local:
            self._measured["nodes"] = float(-(-world // local))

    def _report_in_background(self) -> None:
        if self._reporter is not None and self._reporter.is_alive():
            return
        rate = self._meter.rate(reset_window=True)
        self._last_report = time.monotonic()
        if rate is None:
            return
        steps_done = self.step
        client = self.client
        stall = self._stalls.window()
        measured = {**self._measured, **(stall.fields() if stall is not None else {})}
        assert client is not None

        def report() -> None:
            try:
                client.progress(steps_done, rate, **measured)
            except StaleAttempt as exc:
                self._stale = exc
            except ServerError as exc:
                self._log(f"progress report failed: {exc}")

        self._reporter = threading.Thread(target=report, name="apportion-progress", daemon=True)
        self._reporter.start()

    # --- signals -----------------------------------------------------------------------
    def _install_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def on_sigterm(signum, frame) -> None:
            self._stop_signal = signum

        self._old_handler = signal.signal(signal.SIGTERM, on_sigterm)

    def _restore_sigterm(self) -> None:
        if self._old_handler is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._old_handler)
            self._old_handler = None


def _own_of(ranks: object) -> dict | None:
    """This process's entry of a group checkpoint's ``ranks`` (by ``RANK``), when the group has the same size."""
    rank, world = os.environ.get("RANK", ""), os.environ.get("WORLD_SIZE", "")
    if not (isinstance(ranks, list) and rank.isdigit() and world.isdigit() and int(world) == len(ranks)):
        return None
    own = ranks[int(rank)]
    return own if isinstance(own, dict) else None
