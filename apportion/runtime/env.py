"""The environment `apportion serve` gives a job attempt (see docs/serve-contract.md)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class JobEnv:
    """What a job attempt learns from its environment.

    A script started without ``APPORTION_JOB_ID`` is *standalone*: no server, no lease, it
    runs to its end. Every field is ``None`` (or empty) when its variable is absent.
    """

    job_id: str | None = None
    server: str | None = None
    attempt: int = 1
    lease_end: float | None = None
    total_steps: int | None = None
    checkpoint_dir: str | None = None
    checkpoint_every: str | None = None  # auto, auto:SECONDS, off or SECONDS (see cadence.py)
    token: str | None = None
    cuda_visible_devices: str | None = None
    slots: tuple[str, ...] = ()

    @property
    def standalone(self) -> bool:
        return not self.job_id

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> JobEnv:
        env = os.environ if environ is None else environ

        def text(name: str) -> str | None:
            value = env.get(name)
            return value.strip() if value is not None and value.strip() != "" else None

        def number(name: str, kind):
            value = text(name)
            if value is None:
                return None
            try:
                return kind(float(value)) if kind is int else kind(value)
            except ValueError:
                raise ValueError(f"{name}={value!r} is not a number") from None

        slots = text("APPORTION_SLOTS")
        server = text("APPORTION_SERVER")
        return cls(
            job_id=text("APPORTION_JOB_ID"),
            server=server.rstrip("/") if server else None,
            attempt=number("APPORTION_ATTEMPT", int) or 1,
            lease_end=number("APPORTION_LEASE_END", float),
            total_steps=number("APPORTION_TOTAL_STEPS", int),
            checkpoint_dir=text("APPORTION_CHECKPOINT_DIR"),
            checkpoint_every=text("APPORTION_CHECKPOINT_EVERY"),
            token=text("APPORTION_TOKEN"),
            # An empty CUDA_VISIBLE_DEVICES means "no GPU" and must stay distinguishable
            # from an absent one.
            cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
            slots=tuple(s.strip() for s in slots.split(",") if s.strip()) if slots else (),
        )
