"""The service a job's live attempt has received since it was last counted, as the job's new fields.

What an attempt's exit settles (lifecycle.py); a round counts the same for its live jobs from
its own table (rounds.account).
"""

from __future__ import annotations

from apportion.serve.records import JobRecord


def accrued(job: JobRecord, now: float) -> dict:
    """The fields to update: running time and GPU time up to ``now``, and time alone on its type, or
    together with its partner when it shares its slot; {} when it has no live attempt being counted."""
    if not job.attempt_live or job.accounted_at is None:
        return {}
    dt = max(0.0, now - job.accounted_at)
    fields = {"run_s": job.run_s + dt, "service_gpu_s": job.service_gpu_s + dt * max(1, len(job.slot_list)),
              "accounted_at": now}
    if job.gpu_type and job.partner:
        key = f"{job.partner}:{job.gpu_type}"
        fields["shared_by_type"] = {**job.shared_by_type, key: job.shared_by_type.get(key, 0.0) + dt}
    elif job.gpu_type:
        fields["service_by_type"] = {**job.service_by_type,
                                     job.gpu_type: job.service_by_type.get(job.gpu_type, 0.0) + dt}
    return fields
