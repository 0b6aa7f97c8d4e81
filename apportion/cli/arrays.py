"""`apportion queue`'s view of job arrays: each array's tasks as one row, ``12[0-15]``.

Pure functions over the jobs as the API lists them (``array_id``, ``array_index`` per task).
"""

from __future__ import annotations

STATUS_ORDER = ("running", "preempted", "queued", "completed", "failed", "cancelled")


def collapse_arrays(jobs: list[dict]) -> list[dict]:
    """``jobs`` with the tasks of each array replaced by one row, where its first task stood: id
    ``ARRAY[INDICES]``, its status the tasks' counts (``running 4, queued 12``), its runtime and steps
    summed, its data stall the mean of its tasks', and as reason the first reason of a task not
    running (``[3] ...``)."""
    tasks: dict[str, list[dict]] = {}
    for job in jobs:
        if job.get("array_id") is not None:
            tasks.setdefault(job["array_id"], []).append(job)
    if not tasks:
        return jobs
    rows: list[dict] = []
    for job in jobs:
        array_id = job.get("array_id")
        if array_id is None:
            rows.append(job)
        elif array_id in tasks:
            rows.append(array_row(array_id, tasks.pop(array_id)))
    return rows


def array_row(array_id: str, tasks: list[dict]) -> dict:
    """One row for array ``array_id`` out of its ``tasks`` (the fields `queue` shows)."""
    tasks = sorted(tasks, key=lambda t: t["array_index"])
    first = tasks[0]
    counts = {status: sum(t["status"] == status for t in tasks) for status in STATUS_ORDER}
    counts.update({t["status"]: counts.get(t["status"], 0) for t in tasks if t["status"] not in counts})
    waiting = next((t for t in tasks if t["status"] != "running" and t["reason"]), None)
    finishes = [t.get("estimated_finish") for t in tasks if t["status"] not in ("completed", "failed", "cancelled")]
    ended = [t["finished"] for t in tasks]
    stalls = [t["data_stall"] for t in tasks if t.get("data_stall") is not None]
    return {
        **first,
        "id": f"{array_id}[{index_ranges([t['array_index'] for t in tasks])}]",
        "name": base_name(first["name"], first["array_index"]),
        "status": ", ".join(f"{status} {n}" for status, n in counts.items() if n),
        "reason": f"[{waiting['array_index']}] {waiting['reason']}" if waiting else "",
        "gpus": first["gpus"],  # each task's
        "alloc": ",".join(t["alloc"] for t in tasks if t["alloc"]),
        "submitted": min(t["submitted"] for t in tasks),
        "finished": None if None in ended else max(ended),
        "runtime_s": sum(t["runtime_s"] for t in tasks),
        "steps_done": sum(t["steps_done"] for t in tasks),
        "total_steps": sum(t["total_steps"] for t in tasks),
        "estimated_finish": None if not finishes or None in finishes else max(finishes),
        "hangs": sum(t.get("hangs") or 0 for t in tasks),
        "data_stall": sum(stalls) / len(stalls) if stalls else None,  # the mean of the tasks that said theirs
        "target_examples": None,
        "last_lines": "",
        "tasks": len(tasks),
    }


def index_ranges(indices: list[int]) -> str:
    """Ascending indices as Slurm writes them: runs of consecutive ones as ranges (``0-3,7,9-10``)."""
    parts: list[str] = []
    start = previous = None
    for index in sorted(indices):
        if previous is not None and index == previous + 1:
            previous = index
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = index
    if start is not None:
        parts.append(str(start) if start == previous else f"{start}-{previous}")
    return ",".join(parts)


def base_name(name: str, index: int) -> str:
    """A task's name without its ``[INDEX]``."""
    suffix = f"[{index}]"
    return name[: -len(suffix)] if name.endswith(suffix) else name
