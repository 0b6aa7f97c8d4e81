"""Where the chaos pass's time went, kill by kill, from the server's own records.

The makespan difference between the clean and the chaos pass is the figure the issue asks
for, but on a shared machine it also measures how busy the machine was during each pass.
This accounting is taken from the chaos pass alone (its state file's ``attempts`` table and
events, and the kill log), so it is the same whatever the load:

- a kill of a training process or a wrapper whose attempt then crashed costs that attempt's
  slot time (start-up included) less the training it kept (steps up to the checkpoint the next
  attempt resumed from, at the job's own speed in its last attempt), plus the time its slot
  stood idle before the next attempt started on it;
- a kill of a wrapper whose job ran on costs nothing (``kills_survived``);
- a kill of the server costs the time slots stood idle between the kill and a second after
  the restarted server recovered (a job that ended meanwhile could not be replaced).

``time_lost_accounted_fraction`` is that slot time over the slots, as a fraction of the chaos
makespan without it: an estimate (a job's speed in its last attempt stands for its speed in
the attempt that was killed; start-up that a kill slowed elsewhere is not counted).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

TARGETS = ("server", "job", "wrapper")


def _attempts(state_dir: Path) -> tuple[list[dict], list[float], dict[int, int]]:
    db = sqlite3.connect(f"file:{state_dir / 'state.db'}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    try:
        attempts = [dict(r) for r in db.execute("SELECT * FROM attempts ORDER BY started")]
        recovers = [t for (t,) in db.execute("SELECT time FROM events WHERE event = 'recover' ORDER BY time")]
        totals = {i: n for i, n in db.execute("SELECT id, total_steps FROM jobs")}
    finally:
        db.close()
    return attempts, recovers, totals


def _step_s(attempts: list[dict], totals: dict[int, int]) -> dict[int, float]:
    """Each job's seconds per step in its completed attempt (lease call to its last step)."""
    speed = {}
    for a in attempts:
        if a["how"] == "completed" and a["first_lease"] is not None and a["done"] is not None:
            steps = totals[a["job_id"]] - (a["first_step"] or 0)
            if steps > 0:
                speed[a["job_id"]] = (a["done"] - a["first_lease"]) / steps
    return speed


def _idle(attempts: list[dict], slots: list[str], start: float, end: float) -> list[tuple[str, float, float]]:
    """(slot, from, to) for every stretch in which a slot ran no attempt."""
    gaps = []
    for slot in slots:
        spans = sorted((a["started"], a["ended"] or end) for a in attempts if slot in (a["slots"] or "").split(","))
        t = start
        for s, e in spans:
            if s > t:
                gaps.append((slot, t, s))
            t = max(t, e)
        if end > t:
            gaps.append((slot, t, end))
    return gaps


def account(state_dir: Path, kills: list[dict], slots: int, makespan_s: float) -> dict:
    """Slot-seconds lost to each kind of kill, restarts it caused, and the fraction they make."""
    attempts, recovers, totals = _attempts(state_dir)
    if not attempts:
        return {}
    speed = _step_s(attempts, totals)
    start = min(a["started"] for a in attempts)
    end = max(a["ended"] or a["started"] for a in attempts)
    slot_names = [f"cpu:{i}" for i in range(slots)]
    gaps = _idle(attempts, slot_names, start, end)
    lost = dict.fromkeys(TARGETS, 0.0)
    restarts = dict.fromkeys(TARGETS, 0)
    survived = dict.fromkeys(TARGETS[1:], 0)
    cause: dict[tuple[int, int], dict] = {}  # a crashed attempt -> the last kill that hit it
    for kill in kills:
        t, kind = kill["time"], kill["target"]
        if kind == "server":
            back = next((r for r in recovers if r >= t), t + kill.get("back_s", 0.0)) + 1.0
            lost[kind] += sum(max(0.0, min(b, back) - max(a, t)) for _, a, b in gaps)
            continue
        hit = next((a for a in attempts if a["job_id"] == kill["job"] and a["started"] <= t
                    and (a["ended"] is None or t <= a["ended"])), None)
        if hit is None:
            continue
        key = (hit["job_id"], hit["attempt"])
        if hit["how"] != "crashed":
            survived[kind] += 1
            continue
        if key in cause:
            survived[cause[key]["target"]] += 1  # it ran on after that one: this later kill ended it
        cause[key] = kill
    by_key = {(a["job_id"], a["attempt"]): a for a in attempts}
    for key, kill in cause.items():
        hit = by_key[key]
        restarts[kill["target"]] += 1
        kept = max(0, (hit["end_step"] or 0) - (hit["first_step"] or 0)) * speed.get(hit["job_id"], 0.0)
        waste = max(0.0, hit["ended"] - hit["started"] - kept)
        for slot in (hit["slots"] or "").split(","):
            waste += sum(b - a for s, a, b in gaps if s == slot and abs(a - hit["ended"]) < 1e-6)
        lost[kill["target"]] += waste
    per_slot = sum(lost.values()) / slots
    return {
        "lost_slot_s_by_target": {k: round(v, 1) for k, v in lost.items()},
        "restarts_by_target": restarts,
        "kills_survived": survived,  # the attempt hit ran on (to its end, or to a later kill)
        "time_lost_accounted_fraction": round(per_slot / max(1e-9, makespan_s - per_slot), 4),
    }


if __name__ == "__main__":  # python benchmarks/faults/chaos_accounting.py KEPT_DIR RESULT.json
    import sys

    result = json.loads(Path(sys.argv[2]).read_text())
    print(json.dumps(account(Path(sys.argv[1]) / "chaos", result["kill_log"], result["slots"],
                             result["chaos_makespan_s"])))
