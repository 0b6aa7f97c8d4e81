"""A seeded, resumable data order.

Each epoch is a permutation of ``range(length)`` drawn from a generator seeded by
``(seed, epoch)`` alone, never from global random state, so the order is the same in every
process. ``state()`` is a small JSON-able dict; a sampler that loads it yields exactly the
indices the saved one had not yet yielded.
"""

from __future__ import annotations

import random
from collections.abc import Iterator


def epoch_permutation(length: int, seed: int, epoch: int) -> list[int]:
    """The order of epoch ``epoch``: the same list for the same arguments, everywhere."""
    rng = random.Random(f"apportion-sampler:{seed}:{epoch}")  # str seeds hash with SHA-512
    order = list(range(length))
    rng.shuffle(order)
    return order


class ResumableSampler:
    """Yields dataset indices in a seeded order, one permutation per epoch.

    Usable as a ``torch.utils.data.Sampler`` (``sampler=`` of a DataLoader): ``iter()``
    yields what is left of the current epoch and then moves to the next epoch, so each new
    ``iter()`` (each DataLoader epoch) continues where the last left off. ``take(n)`` draws
    the next ``n`` indices across epoch boundaries, for step-driven loops.

    The position counts indices *handed out*. With a multi-worker DataLoader that prefetches
    batches, save ``seek``-able positions computed from the steps done instead
    (``sampler.seek(steps_done * batch_size)``), since the sampler runs ahead of training.
    """

    def __init__(self, length: int, seed: int = 0, epoch: int = 0) -> None:
        if length <= 0:
            raise ValueError(f"length must be positive, got {length}")
        self.length = int(length)
        self.seed = int(seed)
        self.epoch = int(epoch)
        self.position = 0
        self._order: list[int] | None = None
        self._order_epoch: int | None = None

    # --- the order ---------------------------------------------------------------------
    def _current_order(self) -> list[int]:
        if self._order is None or self._order_epoch != self.epoch:
            self._order = epoch_permutation(self.length, self.seed, self.epoch)
            self._order_epoch = self.epoch
        return self._order

    def _advance(self) -> int:
        index = self._current_order()[self.position]
        self.position += 1
        if self.position == self.length:  # roll over at once: a state never ends an epoch
            self.epoch += 1
            self.position = 0
        return index

    def take(self, n: int) -> list[int]:
        """The next ``n`` indices, continuing into the next epoch when this one runs out."""
        return [self._advance() for _ in range(n)]

    def __iter__(self) -> Iterator[int]:
        epoch = self.epoch
        while self.epoch == epoch:
            yield self._advance()

    def __len__(self) -> int:
        """How many indices the next ``iter()`` yields (the rest of the current epoch)."""
        return self.length - self.position

    # --- state -------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` from its beginning (like DistributedSampler.set_epoch)."""
        self.epoch = int(epoch)
        self.position = 0

    def seek(self, samples: int) -> None:
        """Move to the position after ``samples`` indices in total since epoch 0."""
        self.epoch, self.position = divmod(int(samples), self.length)

    def state(self) -> dict:
        return {"length": self.length, "seed": self.seed, "epoch": self.epoch, "position": self.position}

    def load_state(self, state: dict) -> None:
        if int(state["length"]) != self.length or int(state["seed"]) != self.seed:
            raise ValueError(
                f"sampler state is for length={state['length']} seed={state['seed']}, "
                f"this sampler has length={self.length} seed={self.seed}"
            )
        self.epoch, self.position = divmod(int(state["epoch"]) * self.length + int(state["position"]), self.length)

    def __repr__(self) -> str:
        return f"ResumableSampler(length={self.length}, seed={self.seed}, epoch={self.epoch}, position={self.position})"
