"""The service a job's live attempt has received since it was last counted, as the job's new fields.

One rule (``mechanism/service.py``) for the two places that count it: a round, for every live
attempt, from its own table (``rounds.py``), and an attempt's exit when it is settled
(``lifecycle.py``), from the job's record.
"""

from __future__ import annotations

from apportion.mechanism.service import held_service
from apportion.serve.jobs.records import JobRecord


def service_since(now: float, *, accounted_at: float | None, run_s: float, service_gpu_s: float, slots: int,
                  gpu_type: str | None, partner: int | None, service_by_type: dict, shared_by_type: dict) -> dict:
    """The fields to update: running time and GPU time up to ``now``, and time alone on its type, or
    together with its partner when it shares its slot; {} when nothing is being counted."""
    if accounted_at is None:
        return {}
    dt = max(0.0, now - accounted_at)
    gpu_s, alone_s, together_s = held_service(dt, max(1, slots), not partner)
    fields = {"run_s": run_s + dt, "service_gpu_s": service_gpu_s + gpu_s, "accounted_at": now}
    if gpu_type and partner:
        key = f"{partner}:{gpu_type}"
        fields["shared_by_type"] = {**shared_by_type, key: shared_by_type.get(key, 0.0) + together_s}
    elif gpu_type:
        fields["service_by_type"] = {**service_by_type, gpu_type: service_by_type.get(gpu_type, 0.0) + alone_s}
    return fields


def accrued(job: JobRecord | dict, now: float) -> dict:
    """:func:`service_since` for ``job``'s live attempt; {} when it has none. ``job``: its record, or
    its row in a round's table (a dict: the round reads the jobs as columns)."""
    if isinstance(job, dict):
        live, get = job["live"], job.get
    else:
        live, get = job.attempt_live, lambda name: getattr(job, name)
    if not live:
        return {}
    return service_since(now, accounted_at=get("accounted_at"), run_s=get("run_s"),
                         service_gpu_s=get("service_gpu_s"), slots=len(get("slot_list")), gpu_type=get("gpu_type"),
                         partner=get("partner"), service_by_type=get("service_by_type"),
                         shared_by_type=get("shared_by_type") or {})
