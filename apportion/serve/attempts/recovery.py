"""A server starting on an existing state directory: take over the attempts still alive.

Attempts outlive the server. A new server finds them (``Executor.scan``), adopts each job's
current attempt, kills any other (a stray), and settles the attempts that ended while no
server ran from what they left behind; then a round runs at once.
"""

from __future__ import annotations

from apportion.executors.base import Attempt, Exit
from apportion.serve.attempts.context import SchedulerState
from apportion.serve.attempts.lifecycle import AttemptLifecycle


def recover(state: SchedulerState, lifecycle: AttemptLifecycle, now: float | None = None) -> dict:
    """Adopt the attempts still alive, settle those that ended while no server ran, kill strays."""
    now = state.clock() if now is None else now
    adopted, ended, strays = [], [], []
    with state.lock:
        for attempt in sorted(state.executor.scan(), key=lambda a: (a.job_id, -a.attempt)):
            row = state.store.job(attempt.job_id)
            if (row is None or attempt.attempt < row.attempt or attempt.job_id in adopted
                    or (row.status in ("completed", "failed") and not row.attempt_live)):
                state.executor.kill_attempt(attempt)
                strays.append(attempt.job_id)
                state.store.add_event(now, attempt.job_id, "stray", f"attempt {attempt.attempt}{_pid(attempt)} killed")
                continue
            if not state.executor.adopt(attempt):
                continue
            slots = [s for s in attempt.slots]
            gpu_type = state.slot_by_id[slots[0]].gpu_type if slots and slots[0] in state.slot_by_id else row.gpu_type
            fields = dict(attempt_live=True, pid=attempt.pid, proc_start=attempt.proc_start, attempt=attempt.attempt,
                          slots=",".join(slots), gpu_type=gpu_type)
            if not row.attempt_live or row.attempt != attempt.attempt:  # started, but never recorded
                fields.update(started=row.started or now, accounted_at=now, stop=None, stop_at=None, term_at=None,
                              attempt_started=now, contact_at=None)
            if row.status == "cancelled":
                fields.update(stop="cancel")
                if row.term_at is None:
                    state.executor.terminate(row.id)
                    fields.update(term_at=now)
            else:
                fields.update(status="running", lease_end=max(row.lease_end or 0.0, now + state.plan_ahead_s))
            with state.store.transaction():
                state.store.update_job(row.id, **fields)
                state.store.add_event(now, row.id, "adopt", f"attempt {attempt.attempt}{_pid(attempt)}")
            adopted.append(row.id)
        for row in state.store.live_jobs():
            if row.id in adopted:
                continue
            # its wrapper is gone (killed with it, perhaps): nothing of the attempt may run on
            state.executor.kill_attempt(Attempt(row.id, row.attempt, row.pid, row.proc_start, ()))
            code = state.executor.exit_record(row.id, row.attempt)
            lifecycle.on_exit(Exit(row.id, row.attempt, code), now, heard_to_the_end=False)
            ended.append(row.id)
        state.round_end = now  # a round at once
        state.store.add_event(now, None, "recover",
                             f"adopted {len(adopted)}, ended while down {len(ended)}, strays killed {len(strays)}")
    return {"adopted": adopted, "ended": ended, "strays": strays}


def _pid(attempt: Attempt) -> str:
    """ " pid N" for an attempt with a process of this machine; '' for one without (Ray's)."""
    return f" pid {attempt.pid}" if attempt.pid is not None else ""
