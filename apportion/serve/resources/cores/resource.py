"""CPU cores and memory as a resource of the server: its settings, the node's cores divided among the
running attempts (``split.py``), each job's speed per core learnt from its progress (``speeds.py``), the
cores a job that asked none counts for in placement, and the split in ``apportion status``."""

from __future__ import annotations

from typing import Any

from apportion.serve.resources.base import BadSetting, Resource, Setting

CPU_SPLITS = ("off", "proportional", "aware")  # the rules of split.py (CoreSplit.mode)


class Cores(Resource):
    """The core split of one server; ``off`` (the default) leaves the cores to the OS."""

    name = "cores"
    settings = (
        Setting("cpu_split", "off", "text",
                "the node's cores: left to the OS, the same share per slot, or for the most progress", "str",
                after="slots"),
    )
    config = (
        Setting("cpu_split", "off", "text", "how the node's cores are divided among its jobs (split.py)", "str"),
        Setting("cpu_profile_s", 4.0, "number",
                "seconds of progress reports a job is measured for at each share of its profile", "float"),
    )

    def __init__(self, host: Any, given: dict[str, Any]) -> None:
        super().__init__(host, given)
        self.split = None

    @classmethod
    def check_settings(cls, s: Any) -> None:
        if s.cpu_split not in CPU_SPLITS:
            raise BadSetting("cpu_split", f"must be one of {', '.join(CPU_SPLITS)}, got {s.cpu_split!r}")

    def start(self, throughputs: Any) -> None:
        from apportion.serve.resources.cores.split import CoreSplit

        self.split = CoreSplit(self.host)

    def parts(self) -> dict[str, Any]:
        return {"cores": self.split} if self.split is not None else {}

    def least_cores_per_gpu(self) -> float:
        """What the split never cuts a job that asked no cores below, where the server divides them (else 0)."""
        from apportion.serve.resources.cores.split import floor_per_gpu

        return floor_per_gpu(self.host.config.cpu_split, len(self.host.node.cpus), len(self.host.slots))

    def speed_at_share(self, job_ids, gpus, cpus):
        """The jobs' speed at the share of cores the split gives them, off their curves as learnt (as the
        simulator ranks by the speed at the proportional share, ``sim/cpu_cores.py``); None: not divided."""
        if self.split is None or not self.split.divides:
            return None
        return self.split.speed_at_share(job_ids, gpus, cpus)

    def report_factor(self, job_id: int) -> float:
        """What the job's reported steps/s is multiplied by to be its speed at the proportional share (``split.py``)."""
        if self.split is None or not self.split.divides:
            return 1.0
        return self.split.report_factor(job_id)

    def progress(self, job_id: int, attempt: int, steps_done: int, now: float) -> None:
        if self.split is not None and self.split.divides:  # its speed at the cores it holds
            with self.host.lock:
                self.split.speeds.heard(job_id, attempt, steps_done, self.host.clock())

    def after_tick(self, now: float) -> None:
        if self.split is not None:
            self.split.tick(now)

    def status(self) -> dict[str, Any]:
        return {"cores": self.split.describe()} if self.split is not None else {}
