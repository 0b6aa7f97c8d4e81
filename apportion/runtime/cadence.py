"""How often a job writes periodic checkpoints, so that a crash loses little and costs little.

A preemption always checkpoints; a crash (an exception, an OOM kill, ``kill -9``) restarts
from the newest periodic checkpoint. The setting (``APPORTION_CHECKPOINT_EVERY``, the job
file's ``checkpoint_every``, ``serve --checkpoint-every``, or ``Job(checkpoint_every=...)``):

- ``auto`` (the default): CheckFreq's rule. From the measured time of a step and of a
  checkpoint (snapshot + background write, counted as if it held training up entirely), the
  interval is the shortest whose overhead stays within 5% (``cost / interval <= 0.05``), but
  never shorter than a second (a file a second is plenty) and never longer than the bound on
  lost work, 300 s by default (``auto:120`` sets it). The first checkpoint comes a second into
  an attempt, to measure what one costs; every later one updates the measurements.
- ``SECONDS``: every that many seconds, whatever it costs.
- ``off``: never (a crash restarts from the last preemption's checkpoint, or from step 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

OVERHEAD = 0.05  # the share of training time periodic checkpoints may take
MAX_LOST_S = 300.0  # the most training time a crash may cost, by default
MIN_INTERVAL_S = 1.0  # never more often than this


@dataclass(frozen=True)
class CheckpointEvery:
    """A parsed setting: ``mode`` is ``auto``, ``fixed`` or ``off``."""

    mode: str
    seconds: float | None = None  # fixed: the interval; auto: the bound on lost work

    @classmethod
    def parse(cls, value: str | float | int | None, *, source: str = "checkpoint_every") -> CheckpointEvery:
        """``auto``, ``auto:SECONDS``, ``off`` or ``SECONDS`` (a number, ``s`` suffix allowed); ValueError otherwise."""
        if value is None:
            return cls("auto", MAX_LOST_S)
        if isinstance(value, bool):
            raise ValueError(f"{source}: expected auto, auto:SECONDS, off or SECONDS, got {value!r}")
        if isinstance(value, (int, float)):
            return cls("fixed", _seconds(value, source))
        text = str(value).strip().lower()
        if text in ("off", "none", "never"):
            return cls("off")
        if text == "auto":
            return cls("auto", MAX_LOST_S)
        if text.startswith("auto:"):
            bound = _seconds(text[5:].removesuffix("s"), source)
            if bound <= 0:
                raise ValueError(f"{source}: the bound of auto must be positive, got {text!r}")
            return cls("auto", bound)
        return cls("fixed", _seconds(text.removesuffix("s"), source))

    def __str__(self) -> str:
        if self.mode == "off":
            return "off"
        if self.mode == "fixed":
            return f"{self.seconds:g}"
        return "auto" if self.seconds == MAX_LOST_S else f"auto:{self.seconds:g}"


def _seconds(value, source: str) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{source}: expected auto, auto:SECONDS, off or SECONDS, got {value!r}") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{source}: seconds must be a number >= 0, got {value!r}")
    return seconds


def auto_interval(step_s: float, checkpoint_s: float, max_lost_s: float,
                  overhead: float = OVERHEAD) -> tuple[float, str]:
    """The interval CheckFreq's rule gives, and what it means in words.

    ``checkpoint_s / interval <= overhead``, as short as that allows but at least
    ``MIN_INTERVAL_S`` and at most ``max_lost_s`` (then the overhead may exceed its target).
    """
    wanted = checkpoint_s / overhead if overhead > 0 else math.inf
    interval = min(max(wanted, MIN_INTERVAL_S, step_s), max_lost_s)
    steps = f" (~{max(1, round(interval / step_s))} steps of {step_s:.3f} s)" if step_s > 0 else ""
    share = checkpoint_s / interval if interval > 0 else math.inf
    if wanted > max_lost_s:
        why = (f"a crash loses at most {interval:g} s (the bound), at an overhead of {share:.1%},"
               f" above the {overhead:.0%} target")
    else:
        why = f"overhead {share:.1%} (target {overhead:.0%}), a crash loses at most {interval:.1f} s"
    return interval, f"every {interval:.1f} s{steps}: a checkpoint takes {checkpoint_s:.3f} s; {why}"


class Cadence:
    """At each step boundary: is a periodic checkpoint due? Learns from every checkpoint written."""

    def __init__(self, every: CheckpointEvery, overhead: float = OVERHEAD) -> None:
        self.every = every
        self.overhead = overhead
        self.checkpoint_s: float | None = None  # snapshot + write of the newest checkpoint measured
        self.interval_s: float | None = every.seconds if every.mode == "fixed" else None
        self._told: float | None = None  # the interval last told to the user

    @property
    def enabled(self) -> bool:
        return self.every.mode != "off"

    def due(self, since_last_s: float) -> bool:
        if self.every.mode == "off":
            return False
        if self.interval_s is None:  # auto, nothing measured yet: the first checkpoint measures
            return since_last_s >= MIN_INTERVAL_S
        return since_last_s >= self.interval_s

    def measured(self, step_s: float, snapshot_s: float | None, write_s: float | None) -> str | None:
        """Note a checkpoint's cost; a line for the log when the interval is new or changed by 2x or more."""
        if snapshot_s is None or write_s is None or self.every.mode != "auto":
            return None
        self.checkpoint_s = snapshot_s + write_s
        self.interval_s, words = auto_interval(step_s, self.checkpoint_s, self.every.seconds or MAX_LOST_S,
                                               self.overhead)
        if self._told is None or not 0.5 < self.interval_s / self._told < 2.0:
            self._told = self.interval_s
            return f"periodic checkpoints {words}"
        return None

    def describe(self) -> str:
        """The setting in words, for the log when an attempt starts."""
        if self.every.mode == "off":
            return "periodic checkpoints off: a crash restarts from the last preemption's checkpoint, or from step 0"
        if self.every.mode == "fixed":
            return f"periodic checkpoints every {self.every.seconds:g} s: a crash loses at most that much work"
        return (f"periodic checkpoints auto: overhead within {self.overhead:.0%}, a crash losing at most"
                f" {self.every.seconds:g} s; the first one, {MIN_INTERVAL_S:g} s in, measures the cost")
