"""When rounds are decided, on the server's clock: the rules its loop follows and the simulator
mirrors (``SimConfig.wall_clock``).

A regular round starts when the last one ends, every ``round_s``, and is decided
``plan_ahead_s`` before it starts. An early round, starting at once, comes when slots idle
while jobs wait (a job ended or arrived), no sooner than ``fill_gap_s`` after the last round.
The server asks "is a round due now?"; the simulator, which jumps from event to event, asks
"when is the next one?"; both answers come from here.
"""

from __future__ import annotations

import math

ROUNDING_S = 1e-9  # a time this close past a round boundary counts as on it


def regular_decision_at(round_end_s: float, plan_ahead_s: float) -> float:
    """When the round that starts at ``round_end_s`` is decided."""
    return round_end_s - plan_ahead_s


def regular_round_due(now_s: float, round_end_s: float, plan_ahead_s: float) -> bool:
    """Whether the next regular round (it starts at ``round_end_s``) is to be decided now."""
    return now_s >= regular_decision_at(round_end_s, plan_ahead_s)


def early_round_due(now_s: float, last_round_s: float, fill_gap_s: float) -> bool:
    """Whether enough time passed since the last round for an early one (to fill idle slots)."""
    return now_s - last_round_s >= fill_gap_s


def early_round_at(event_s: float, last_round_s: float, fill_gap_s: float) -> float:
    """When an early round for something at ``event_s`` (an exit, an arrival) comes."""
    return max(event_s, last_round_s + fill_gap_s)


def fill_event_at(first_exit_s: float, next_arrival_s: float, waiting: bool, idle: bool) -> float:
    """The first moment slots idle while a job waits: the first exit while jobs wait (or one
    arrives before it), the next arrival while slots idle (or one frees before it); inf: never."""
    event = math.inf
    if waiting or next_arrival_s <= first_exit_s:
        event = first_exit_s
    if idle or first_exit_s <= next_arrival_s:
        event = min(event, next_arrival_s)
    return event


def next_boundary(now_s: float, when_s: float, round_s: float) -> float:
    """The first round boundary (``now_s`` + k·``round_s``, k ≥ 1) at or past ``when_s``."""
    rounds = max(1, math.ceil((when_s - now_s) / round_s - ROUNDING_S))
    return now_s + rounds * round_s


def idle_round_at(arrival_s: float, now_s: float, last_round_s: float, round_end_s: float, round_s: float,
                  plan_ahead_s: float, fill_gap_s: float) -> tuple[float, bool]:
    """When the round for a job arriving at ``arrival_s`` to an idle cluster is decided, and whether
    it is an early one: at once, unless the last round (regular ones go on while the cluster
    idles) was under ``fill_gap_s`` ago; then after the gap, or at the next regular round if
    that comes first. A regular round found here starts ``plan_ahead_s`` after it is decided."""
    if not math.isfinite(last_round_s):  # no round yet, and the first regular one is not known
        return max(now_s, arrival_s), True
    regular = regular_decision_at(round_end_s, plan_ahead_s)  # and every round_s on
    next_regular = regular + max(0, math.ceil((arrival_s - regular) / round_s - ROUNDING_S)) * round_s
    if next_regular > regular:
        last_round_s = max(last_round_s, next_regular - round_s)
    early = early_round_at(max(now_s, arrival_s), last_round_s, fill_gap_s)
    if next_regular <= early:
        return next_regular, False
    return early, True
