"""How long each pair of jobs has run together on each GPU type (space sharing's received share)."""

from __future__ import annotations

import numpy as np

_SHIFT = np.int64(1) << np.int64(32)  # a pair's key: smaller job id << 32 | larger job id


class PairClock:
    """Seconds each pair of jobs has shared a GPU of each type, keyed by the jobs' identities.

    Identities are ``JobView.index`` values (JobTable rows in the simulator, job ids in the
    server), non-negative and below 2**31. Keys are kept sorted so lookups are one
    ``searchsorted`` over all pairs of a round.
    """

    def __init__(self, num_types: int) -> None:
        self.num_types = num_types
        self.keys = np.zeros(0, dtype=np.int64)
        self.seconds_by_type = np.zeros((0, num_types))

    @staticmethod
    def _key(pairs: np.ndarray) -> np.ndarray:
        pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        return pairs.min(axis=1) * _SHIFT + pairs.max(axis=1)

    def seconds(self, pairs: np.ndarray) -> np.ndarray:
        """[P, T] seconds together so far of each pair of job identities ([P, 2])."""
        keys = self._key(pairs)
        if not len(self.keys):
            return np.zeros((len(keys), self.num_types))
        position = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        found = self.keys[position] == keys
        return np.where(found[:, None], self.seconds_by_type[position], 0.0)

    def add(self, pairs: np.ndarray, gpu_type: np.ndarray, seconds: np.ndarray) -> None:
        """Count ``seconds`` together on ``gpu_type`` for each pair."""
        if not len(pairs):
            return
        keys, merged = np.unique(np.concatenate([self.keys, self._key(pairs)]), return_inverse=True)
        values = np.zeros((len(keys), self.num_types))
        values[merged[: len(self.keys)]] = self.seconds_by_type
        np.add.at(values, (merged[len(self.keys):], np.asarray(gpu_type, dtype=np.int64)), seconds)
        self.keys, self.seconds_by_type = keys, values

    @classmethod
    def from_each_side(cls, recorded: dict[tuple[int, int, int], float], num_types: int) -> PairClock:
        """The clock from what each job recorded with each partner ({(job, partner, type): seconds}):
        a pair's time together is the smaller of its two members' counts (one may have run on alone
        after the other finished)."""
        seconds: dict[tuple[int, int, int], float] = {}
        for (job, partner, gpu_type), value in recorded.items():
            key = (min(job, partner), max(job, partner), gpu_type)
            seconds[key] = min(value, seconds.get(key, np.inf))
        clock = cls(num_types)
        if seconds:
            keys = list(seconds)
            clock.add(np.array([k[:2] for k in keys]), np.array([k[2] for k in keys]), np.array(list(seconds.values())))
        return clock

    def to_json(self) -> dict:
        """A plain-data copy (for the server's state store)."""
        return {"keys": self.keys.tolist(), "seconds": self.seconds_by_type.tolist()}

    @classmethod
    def from_json(cls, data: dict, num_types: int) -> PairClock:
        clock = cls(num_types)
        keys = np.asarray(data.get("keys", []), dtype=np.int64)
        seconds = np.asarray(data.get("seconds", []), dtype=np.float64).reshape(len(keys), -1)
        if seconds.shape[1] == num_types:
            clock.keys, clock.seconds_by_type = keys, seconds
        return clock
