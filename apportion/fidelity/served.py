"""A finished ``apportion serve`` run, read from its state directory: how the server ran (policy,
round length, slots), what was submitted when, and every attempt with its measured times.

The state file is opened read-only; nothing in the directory changes. A directory that is not
a finished run gets an InputError naming it and what is wrong.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from apportion.core.errors import InputError
from apportion.mechanism.received import check_received_since
from apportion.policies.by_user import check_user_weights
from apportion.serve.jobs.records import AttemptRecord, JobRecord
from apportion.serve.store.state import ACTIVE, StateStore


@dataclass(frozen=True)
class RunSettings:
    """How the server ran: what a replay must simulate the same way."""

    policy: str  # its full spec, e.g. "las" or "max-min-fairness:space-sharing"
    policy_options: dict  # as given to the server (las thresholds, a queues file)
    round_s: float
    plan_ahead_s: float
    fill_gap_s: float
    slots: tuple[tuple[str, str], ...]  # (slot id, slot type)
    first_round: float | None = None  # when the server decided its first round, at its start (wall time)
    received_since: str = "arrival"  # the received share's rule; servers that did not record it used "arrival"
    share_by_user: bool = False  # the cluster divided among users first; servers that did not record it did not
    user_weights: tuple[tuple[str, float], ...] = ()  # (user, weight) pairs of that share

    def capacity(self) -> dict[str, int]:
        """Slots of each type, in the server's order."""
        counts: dict[str, int] = {}
        for _, slot_type in self.slots:
            counts[slot_type] = counts.get(slot_type, 0) + 1
        return counts

    def describe_slots(self) -> str:
        return ",".join(f"{t}:{n}" for t, n in self.capacity().items())


@dataclass(frozen=True)
class ServedRun:
    """What a state directory says about a run; jobs and attempts are the store's records."""

    state_dir: Path
    settings: RunSettings
    jobs: list[JobRecord]  # every job, by id
    attempts: list[AttemptRecord]  # every attempt, by job and attempt number
    estimates: dict[tuple[str, str, int], float]  # the server's last steps/s per (kind, slot type, slots)

    def attempts_of(self, job_id: int) -> list[AttemptRecord]:
        return [a for a in self.attempts if a.job_id == job_id]


def read_served_run(state_dir: str | Path) -> ServedRun:
    """The run kept in ``state_dir``; InputError when it is missing, not a state directory, written
    by an apportion that did not record what a replay needs, or not finished yet."""
    source = str(state_dir)
    directory = Path(state_dir).expanduser()
    if not directory.is_dir():
        raise InputError(source, "no such state directory (give the --state-dir of a finished `apportion serve` run)")
    path = directory / "state.db"
    if not path.is_file():
        raise InputError(source, "no state.db here: not the state directory of an `apportion serve` run")
    try:
        store = StateStore(path, read_only=True)
    except sqlite3.Error as err:
        raise InputError(str(path), f"not an apportion state file ({err})") from None
    try:
        try:
            raw, jobs, attempts = store.run_settings(), store.jobs(), store.attempts()
            first_round = store.first_round()
            first_round = store.first_start() if first_round is None else first_round
            estimates = {key: rate for key, (rate, _) in store.throughputs().items()}
        except sqlite3.Error as err:
            raise InputError(str(path), f"written by an apportion that did not record attempts ({err}); "
                             "replay needs a run served by this version") from None
    finally:
        store.close()
    settings = _settings(raw, str(path), first_round)
    if not jobs:
        raise InputError(source, "the run has no jobs")
    unfinished = [j for j in jobs if j.status in ACTIVE or j.attempt_live]
    if unfinished:
        first = unfinished[0]
        more = f" (and {len(unfinished) - 1} more)" if len(unfinished) > 1 else ""
        raise InputError(source, f"the run has not finished: job {first.id} is {first.status}{more}; "
                         "replay it once every job has ended")
    return ServedRun(directory, settings, jobs, attempts, estimates)


def _settings(raw: dict, source: str, first_round: float | None) -> RunSettings:
    if not raw:
        raise InputError(source, "the server's settings (policy, round length, slots) are not recorded: "
                         "it was served by an older apportion; replay needs a run served by this version")
    try:
        return RunSettings(
            policy=str(raw["policy"]), policy_options=dict(raw.get("policy_options") or {}),
            round_s=float(raw["round_s"]), plan_ahead_s=float(raw.get("plan_ahead_s", 0.0)),
            fill_gap_s=float(raw.get("fill_gap_s", 1.0)),
            slots=tuple((str(slot), str(slot_type)) for slot, slot_type in raw["slots"]),
            first_round=first_round, received_since=check_received_since(str(raw.get("received_since", "arrival"))),
            share_by_user=bool(raw.get("share_by_user", False)),
            user_weights=tuple(sorted(check_user_weights(raw.get("user_weights") or {}).items())),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise InputError(source, f"the recorded server settings are malformed ({type(err).__name__}: {err})") from None
