"""Save and restore every random generator a training step may draw from.

Python's ``random``, numpy's global generator (if numpy is loaded) and torch's CPU and CUDA
generators (if torch is loaded; CUDA only once initialised). Put ``rng_state()`` in the
checkpointed state and hand it back to ``set_rng_state`` on resume, and dropout masks,
augmentations and shuffles continue exactly as if the job had never stopped.
"""

from __future__ import annotations

import random
import sys
from typing import Any


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate()}
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        state["numpy"] = numpy.random.get_state()
    torch = sys.modules.get("torch")
    if torch is not None:
        state["torch"] = torch.get_rng_state()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    if "python" in state:
        python = state["python"]
        # a round trip through some serialisers turns the inner tuple into a list
        random.setstate((python[0], tuple(python[1]), python[2]))
    if "numpy" in state:
        import numpy

        numpy.random.set_state(state["numpy"])
    if "torch" in state:
        import torch

        torch.set_rng_state(state["torch"])
        if "cuda" in state and torch.cuda.is_available():
            states = state["cuda"]
            if len(states) == torch.cuda.device_count():
                torch.cuda.set_rng_state_all(states)
            else:  # placed on a different number of GPUs: keep what matches
                for index, cuda_state in enumerate(states[: torch.cuda.device_count()]):
                    torch.cuda.set_rng_state(cuda_state, index)
