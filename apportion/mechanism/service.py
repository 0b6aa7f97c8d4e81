"""The service a job receives for holding GPUs: what the mechanism's received shares count.

One rule for both clocks: held seconds × GPUs are GPU-seconds (attained service); the seconds
count alone on the type only while the job does not share its GPUs, and otherwise as time
together with its partner; a pair's time together is the smaller of its two members' held
times (one may hold on alone after the other has gone). The simulator applies it to arrays
over jobs, the server to one attempt at a time with plain numbers.
"""

from __future__ import annotations

import numpy as np


def held_service(held_s, gpus, alone):
    """(GPU-seconds, seconds alone, seconds together) of holding ``gpus`` GPUs for ``held_s``,
    ``alone`` or sharing them; numbers or arrays alike."""
    alone_s = held_s * alone
    return held_s * gpus, alone_s, held_s - alone_s


def pair_together_s(first_held_s: np.ndarray, second_held_s: np.ndarray) -> np.ndarray:
    """Seconds each pair ran together, from the seconds each of its two jobs held the GPU."""
    return np.minimum(first_held_s, second_held_s)
