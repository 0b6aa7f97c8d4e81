"""A job of several processes (torch.distributed, one a GPU): they stop together, at the same step.

Only rank 0 talks to the server (lease, progress) and writes checkpoints; every rank restores
the same one. Between two steps the ranks agree on what to do next, the most urgent verdict
winning (two int64s, the verdict and a checkpoint flag, all-reduced with MAX on a gloo group
of their own, so it works whatever backend the training uses): go on, stop after a checkpoint (the lease was not renewed, or a
rank got SIGTERM), or stop at once (rank 0's attempt is stale). Without that agreement one
rank would leave while the others wait for it in their next all-reduce.

Rank 0's periodic checkpoint is agreed the same way (its clock decides), so that every rank
hands rank 0 its own random generators' state and its ``rank_state`` (its data order) for that
checkpoint (``gather``): each rank resumes with its own, not rank 0's.
"""

from __future__ import annotations

import sys

GO, STOP, STALE = 0, 1, 2  # verdicts, in rising urgency


class Group:
    """The processes of one attempt, as torch.distributed knows them."""

    def __init__(self, dist, group, rank: int, size: int) -> None:
        self._dist = dist
        self._group = group
        self.rank = rank
        self.size = size

    @classmethod
    def current(cls) -> Group | None:
        """This job's process group when the script has initialized torch.distributed with more
        than one process (before its first step); None otherwise. Every rank must call it."""
        dist = sys.modules.get("torch.distributed")
        if dist is None or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
            return None
        return cls(dist, dist.new_group(backend="gloo"), dist.get_rank(), dist.get_world_size())

    @property
    def leads(self) -> bool:
        """Rank 0: the one that talks to the server and writes checkpoints."""
        return self.rank == 0

    def agree(self, verdict: int) -> int:
        """The most urgent of every rank's ``verdict`` (a collective call: every rank makes it)."""
        return self.agree_on(verdict, False)[0]

    def agree_on(self, verdict: int, checkpoint: bool) -> tuple[int, bool]:
        """The most urgent verdict, and whether any rank (rank 0: its periodic checkpoint is due)
        asks for a checkpoint now: one all-reduce, a collective call."""
        import torch

        value = torch.tensor([verdict, int(checkpoint)], dtype=torch.int64)
        self._dist.all_reduce(value, op=self._dist.ReduceOp.MAX, group=self._group)
        return int(value[0].item()), bool(value[1].item())

    def gather(self, mine: object) -> list | None:
        """Every rank's ``mine``, in rank order, on rank 0 (None on the others): a collective call."""
        found = [None] * self.size if self.leads else None
        self._dist.gather_object(mine, found, dst=0, group=self._group)
        return found
