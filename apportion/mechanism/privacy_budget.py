"""The privacy-budget admission stage: a job that claims privacy budget enters a round only once
its claim is granted, whole, on every block it reads; budget granted is consumed for good.

The stage keeps the ledger (what each block has given, how many claims arrived for it, each
claim's state) and is asked with the jobs' claim indices (``Applicants.claim``). The simulator
keeps one stage for a whole replay; the server builds one each round from the ledger in its
state file (a :class:`Ledger` to start from) and writes back what the round decided. A claim arrives
the first time it is asked once all its blocks exist; a claim that can no longer fit in what
its blocks have left, or that waited past ``timeout_s``, is rejected and its job fails. Which
waiting claims are granted, and how budget unlocks, is the policy's (``privacy_policies.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from apportion.core.privacy import FIT_TOLERANCE, Blocks, Claims, dominant_share, fits
from apportion.mechanism.admission import AdmissionContext, Applicants, Verdict
from apportion.mechanism.privacy_policies import PrivacyPolicy, water_fill


_DENSE_CELLS = 4_000_000  # claims × blocks × columns held at once when granting a run of claims


class ClaimState(IntEnum):
    UNSEEN = 0  # not asked yet, or its blocks have not all arrived
    WAITING = 1
    GRANTED = 2
    REJECTED = 3


_UNSEEN, _WAITING, _GRANTED, _REJECTED = (int(s) for s in ClaimState)  # plain ints: an enum's lookup costs


@dataclass(frozen=True)
class BudgetHistory:
    """Each block's budget over time: one row per moment the ledger changed."""

    time_s: np.ndarray  # [k]
    consumed: np.ndarray  # [k, B] fraction of each block's budget consumed
    unlocked: np.ndarray  # [k, B] fraction unlocked


@dataclass(frozen=True)
class Ledger:
    """What a stage starts from instead of an empty ledger: what was decided before it."""

    consumed: np.ndarray  # [B, A] budget granted on each block
    arrived_claims: np.ndarray  # [B] claims arrived for each block
    state: np.ndarray  # [n] each claim's ClaimState
    arrived_s: np.ndarray  # [n] when each arrived (NaN: not yet)
    accumulated: np.ndarray | None = None  # [m, A] round robin's portions held by each claim entry; None: none
    lost: np.ndarray | None = None  # [B, A] round robin's portions lost with rejected claims; None: none
    retired: np.ndarray | None = None  # [B] round robin's blocks that release no more budget; None: none


REJECTED_PORTIONS = ("lost", "returned")  # what becomes of a rejected round-robin claim's portions
DECIDE_AT = ("arrival", "round")  # a replay asks the claims at each arrival, or once per GPU round


class PrivacyStage:
    """Admission by privacy budget: hold a job until its claim is granted, fail it when rejected.

    ``retire_blocks`` (round robin; the simulator's default, PrivacySetup): a block *retires* once
    all its budget is unlocked and handed out (under N, when a claim for it arrives after that;
    under T, once the ask that handed out the last of it is over): the claims still short of
    their portion of it are rejected (after the other blocks shared that ask's budget, their
    portions then lost too), and so is every later claim on it, at its arrival, as PrivateKube
    does (a stage rebuilt from a ``Ledger`` carries ``retired`` and ``lost`` in it).
    ``rejected_portions``: what a rejected round-robin claim held is ``lost`` (PrivateKube's:
    then a claim is rejected only when a block it is short of retires, or at the timeout, and
    holds its portions until then even when it can no longer fit) or ``returned`` to its blocks
    for the others (and a claim that can no longer fit is rejected at once). ``decide``: when a
    replay asks the waiting claims (the simulator's, ``sim/admission.py``): at each claim's
    arrival, as PrivateKube, or once per GPU round with the round's arrivals as one batch."""

    name = "privacy"

    def __init__(self, blocks: Blocks, claims: Claims, policy: PrivacyPolicy, timeout_s: float | None = None,
                 ledger: Ledger | None = None, rejected_portions: str = "returned", decide: str = "arrival",
                 retire_blocks: bool = False) -> None:
        if timeout_s is not None and not timeout_s > 0:
            raise ValueError(f"the privacy timeout must be more than 0 seconds, got {timeout_s}")
        if decide not in DECIDE_AT:
            raise ValueError(f"decide must be one of {', '.join(DECIDE_AT)}, got '{decide}'")
        if rejected_portions not in REJECTED_PORTIONS:
            raise ValueError(f"rejected_portions must be one of {', '.join(REJECTED_PORTIONS)}, got '{rejected_portions}'")
        if policy.name == "rr" and blocks.rdp:
            raise ValueError("privacy policy rr shares ε and δ: it takes blocks under ε-δ accounting, not Rényi")
        self.blocks, self.claims, self.policy, self.timeout_s = blocks, claims, policy, timeout_s
        self.budget = blocks.budget
        n, (num_blocks, columns) = len(claims), self.budget.shape
        self.consumed = np.zeros((num_blocks, columns))
        self.arrived_claims = np.zeros(num_blocks, dtype=np.int64)
        self.state = np.zeros(n, dtype=np.int8)
        self.arrived_s = np.full(n, np.nan)
        self.decided_s = np.full(n, np.nan)
        self.rejected_because: dict[int, str] = {}
        self.accumulated = np.zeros(claims.demand.shape) if policy.name == "rr" else None
        self.rejected_portions, self.decide, self.retire_blocks = rejected_portions, decide, retire_blocks
        # PrivateKube's round robin rejects only when a block retires (or at the timeout): a claim that
        # can no longer fit still takes its portions until then, and they are lost with it
        self._reject_early = not (policy.name == "rr" and rejected_portions == "lost")
        self.lost = np.zeros((num_blocks, columns))  # [B, A] portions lost with rejected claims (rr)
        self.retired = np.zeros(num_blocks, dtype=bool)  # [B] blocks that release no more budget (rr)
        self._held = np.zeros((num_blocks, columns))  # [B, A] round robin's portions held by waiting claims
        self._fresh = np.zeros(n, dtype=bool)  # [n] arrived since last shared (rr: may complete with nothing given)
        self._owner = claims.owner  # [m] the claim of each entry
        self._open_entries = np.zeros(0, dtype=np.int64)  # round robin: entries of waiting claims still short
        self._asks = claims.asks
        self._shares = dominant_share(claims, self.budget, blocks.rdp)  # [n] DPF's order, fixed with the budget
        self._history: list[tuple[float, np.ndarray, np.ndarray]] = []
        self._unlocked = np.zeros(num_blocks)  # [B] the fraction unlocked at the last grant
        if ledger is not None:
            self.consumed = np.array(ledger.consumed, dtype=np.float64).reshape(num_blocks, columns)
            self.arrived_claims = np.array(ledger.arrived_claims, dtype=np.int64)
            self.state = np.array(ledger.state, dtype=np.int8)
            self.arrived_s = np.array(ledger.arrived_s, dtype=np.float64)
            if self.accumulated is not None and ledger.accumulated is not None:
                self.accumulated = np.array(ledger.accumulated, dtype=np.float64)
            if ledger.lost is not None:
                self.lost = np.array(ledger.lost, dtype=np.float64).reshape(num_blocks, columns)
            if ledger.retired is not None:
                self.retired = np.array(ledger.retired, dtype=bool)
            if self.accumulated is not None:
                holding = self.state[self._owner] == _WAITING
                self._open_entries = np.flatnonzero(
                    holding & np.any(self.accumulated < claims.demand - 1e-12, axis=1))
                for column in range(columns):
                    self._held[:, column] = np.bincount(claims.block[holding], weights=self.accumulated[holding, column],
                                                        minlength=num_blocks)

    # the stage ---------------------------------------------------------------------------

    def admit(self, jobs: Applicants, context: AdmissionContext) -> Verdict:
        n = len(jobs)
        if jobs.claim is None:
            return Verdict.admit_all(n)
        claim = np.asarray(jobs.claim, dtype=np.int64)
        asks = claim >= 0
        asks[asks] = self._asks[claim[asks]]
        if not asks.any():
            return Verdict.admit_all(n)
        now = context.now_s
        asking = claim[asks]
        new = asks & (self.state[np.maximum(claim, 0)] == _UNSEEN)
        arrived_before = self.arrived_claims.copy()
        arrived = self._arrive(claim[new], now, None if jobs.arrived_s is None else jobs.arrived_s[new])
        retiring = self.accumulated is not None and self.retire_blocks
        if retiring:  # claims on blocks retired before are rejected first, with no share of this ask's budget
            self._reject_on_retired(asking[self.state[asking] == _WAITING], now)
            dying = self._dying_on_arrival(arrived, arrived_before)
        waiting = asking[self.state[asking] == _WAITING]
        if len(waiting):
            self._reject_hopeless(waiting, now)
            waiting = waiting[self.state[waiting] == _WAITING]
            if len(waiting):
                self._grant(waiting, now)
                # what was just granted may leave others no hope: say so now, not at a later ask
                self._reject_hopeless(waiting[self.state[waiting] == _WAITING], now)
        if retiring:  # as PrivateKube, a block retires after the others shared this ask's budget
            self.retired |= dying | self._spent_by_time(now)
            self._reject_on_retired(asking[self.state[asking] == _WAITING], now)

        state = np.full(n, _GRANTED, dtype=np.int8)
        state[asks] = self.state[asking]
        hold = (state == _WAITING) | (state == _UNSEEN)
        fail = state == _REJECTED
        reasons: dict[int, str] = {}
        for position in np.flatnonzero(fail).tolist():
            reasons[position] = self.rejected_because[int(claim[position])]
        for position in np.flatnonzero(state == _UNSEEN).tolist():
            reasons[position] = f"waiting for block {self._missing_block(int(claim[position]), now)} to arrive"
        held = np.flatnonzero(state == _WAITING)
        if len(held):
            short = self._short_blocks(claim[held]).tolist()
            reasons.update({position: f"waiting for privacy budget on block {block} ({self.policy.name})"
                            for position, block in zip(held.tolist(), short)})
        return Verdict(hold, fail, reasons)

    def next_change_s(self, now_s: float) -> float:
        """When asking the waiting claims again may grant or reject one without any arrival or
        ending: at once (the next round) while budget unlocks with time, else at the next block's
        arrival or the next timeout; infinity when only an arrival can change anything."""
        waiting = self.state == _WAITING
        unseen_blocks = self.blocks.arrival_s > now_s
        times = [self.blocks.arrival_s[unseen_blocks].min()] if unseen_blocks.any() else []
        if waiting.any():
            if self.policy.unlocks_by == "time" and np.any((now_s - self.blocks.arrival_s) < self.policy.t_s):
                return now_s
            if self.timeout_s is not None:
                times.append(float(np.min(self.arrived_s[waiting])) + self.timeout_s)
        return float(min(times)) if times else math.inf

    # what the replay reports ---------------------------------------------------------------

    def history(self) -> BudgetHistory:
        if not self._history:
            empty = np.zeros((0, len(self.blocks)))
            return BudgetHistory(np.zeros(0), empty, empty)
        times, consumed, unlocked = zip(*self._history)
        return BudgetHistory(np.asarray(times), np.vstack(consumed), np.vstack(unlocked))

    def delay_s(self) -> np.ndarray:
        """[n] seconds from each claim's arrival to its grant (NaN where not granted)."""
        return np.where(self.state == _GRANTED, self.decided_s - self.arrived_s, np.nan)

    # the ledger ------------------------------------------------------------------------------

    def _arrive(self, new: np.ndarray, now: float, arrived_s: np.ndarray | None = None) -> np.ndarray:
        """Register the new claims whose blocks all exist; count them toward their blocks' unlocking.
        A claim arrives when its job did (``arrived_s``; None: now) or its last block did, whichever
        is later. Returns [B] bool: the blocks a claim arrived for."""
        touched = np.zeros(len(self.blocks), dtype=bool)
        if not len(new):
            return touched
        entries = self.claims.entries(new)
        late = self.blocks.arrival_s[self.claims.block[entries]] > now
        owner_local = np.repeat(np.arange(len(new)), self.claims.start[new + 1] - self.claims.start[new])
        blocked = np.zeros(len(new), dtype=bool)
        blocked[owner_local[late]] = True
        ready = new[~blocked]
        if not len(ready):
            return touched
        self.state[ready] = _WAITING
        self._fresh[ready] = True
        if self.accumulated is not None:
            self._open_entries = np.concatenate([self._open_entries, self.claims.entries(ready)])
        if arrived_s is None:
            self.arrived_s[ready] = now
        else:
            lengths = self.claims.start[ready + 1] - self.claims.start[ready]
            last_block = np.maximum.reduceat(self.blocks.arrival_s[self.claims.block[self.claims.entries(ready)]],
                                             np.cumsum(lengths) - lengths)
            self.arrived_s[ready] = np.minimum(np.maximum(arrived_s[~blocked], last_block), now)
        ready_blocks = self.claims.block[self.claims.entries(ready)]
        np.add.at(self.arrived_claims, ready_blocks, 1)
        touched[ready_blocks] = True
        return touched

    def _left_to_hand_out(self) -> np.ndarray:
        """[B] ε of each block neither granted, held in portions by waiting claims, nor lost."""
        return (self.budget - self.consumed - self.lost - self._held)[:, 0]

    def _dying_on_arrival(self, arrived_for: np.ndarray, arrived_before: np.ndarray) -> np.ndarray:
        """Round robin unlocking by N: [B] the blocks that retire at this ask, as PrivateKube's block
        stops: a claim arrived for one already all unlocked (``arrived_before``: the claims it had
        before) with all its budget handed out."""
        if self.policy.unlocks_by != "claims":
            return np.zeros(len(self.blocks), dtype=bool)
        empty = self._left_to_hand_out() <= 1e-8 * self.budget[:, 0]
        return empty & arrived_for & (arrived_before >= self.policy.n)

    def _spent_by_time(self, now: float) -> np.ndarray:
        """Round robin unlocking by T: [B] the blocks all unlocked with all their budget handed out
        once this ask shared it: they retire at once, as PrivateKube's block at its last tick."""
        if self.policy.unlocks_by != "time":
            return np.zeros(len(self.blocks), dtype=bool)
        empty = self._left_to_hand_out() <= 1e-8 * self.budget[:, 0]
        return empty & (self.policy.unlocked_fraction(self.blocks, self.arrived_claims, now) >= 1.0)

    def _reject_on_retired(self, waiting: np.ndarray, now: float) -> None:
        """Round robin: reject the waiting claims still short of their portion of a retired block."""
        if not len(waiting) or not self.retired.any():
            return
        claims = self.claims
        asked = np.zeros(len(claims), dtype=bool)
        asked[waiting] = True
        entries = np.sort(self._open_entries)
        entries = entries[self.retired[claims.block[entries]] & asked[self._owner[entries]]]
        entries = entries[np.any(self.accumulated[entries] < claims.demand[entries] - 1e-12, axis=1)]
        first = {}
        for entry, claim in zip(entries.tolist(), self._owner[entries].tolist()):
            first.setdefault(claim, entry)
        for claim, entry in first.items():
            self._reject(claim, now, f"privacy claim cannot be granted: block {self.blocks.name[claims.block[entry]]} "
                                     "retired (its budget is all unlocked and handed out)")

    def _reject_hopeless(self, waiting: np.ndarray, now: float) -> None:
        """Reject the claims that what their blocks have left can never hold, and those that waited too long."""
        left = self.budget - self.consumed - self.lost
        hopeless = waiting[~fits(left, self.claims, waiting, self.blocks.rdp)] if self._reject_early else waiting[:0]
        for claim in hopeless.tolist():
            self._reject(claim, now, f"privacy claim cannot be granted: {self._short_block(claim, left)} "
                                     "has not enough budget left")
        if self.timeout_s is not None:
            still = waiting[self.state[waiting] == _WAITING]
            for claim in still[now - self.arrived_s[still] >= self.timeout_s].tolist():
                self._reject(claim, now, f"privacy claim not granted within {self.timeout_s:g} s")

    def _reject(self, claim: int, now: float, why: str) -> None:
        self.state[claim] = _REJECTED
        self.decided_s[claim] = now
        self.rejected_because[claim] = why
        if self.accumulated is not None:
            lo, hi = self.claims.start[claim], self.claims.start[claim + 1]
            np.subtract.at(self._held, self.claims.block[lo:hi], self.accumulated[lo:hi])
            if self.rejected_portions == "lost":
                np.add.at(self.lost, self.claims.block[lo:hi], self.accumulated[lo:hi])
            self.accumulated[lo:hi] = 0.0

    def _grant(self, waiting: np.ndarray, now: float) -> None:
        unlocked = self.policy.unlocked_fraction(self.blocks, self.arrived_claims, now)
        self._unlocked = unlocked
        room = unlocked[:, None] * self.budget - self.consumed
        if self.accumulated is not None:
            granted = self._share_round_robin(waiting, room - self.lost)
        else:
            order = self.policy.order(waiting, self.claims, self._shares, room, self.arrived_s, self.blocks.rdp)
            granted = self._grant_in_order(order, room)
        if len(granted):
            self.state[granted] = _GRANTED
            self.decided_s[granted] = now
            entries = self.claims.entries(granted)
            np.add.at(self.consumed, self.claims.block[entries], self.claims.demand[entries])
        self._record(now, unlocked)

    def _grant_in_order(self, order: np.ndarray, room: np.ndarray) -> np.ndarray:
        """The claims of ``order`` granted one after another while each fits what is left (one
        that does not fit is skipped: a later, smaller one may still fit). Vectorised: the run of
        claims that fit one after another is found from cumulative demands, granted at once, and
        the search goes on after the first claim that did not fit."""
        claims, rdp = self.claims, self.blocks.rdp
        room = room.copy()
        granted = []
        candidates = order[fits(room, claims, order, rdp)]
        while len(candidates):
            run, taken, stopped = self._fitting_run(candidates, room)
            granted.append(candidates[:run])
            room -= taken
            rest = candidates[run + 1:] if stopped else candidates[run:]  # one that did not fit never will here
            candidates = rest[fits(room, claims, rest, rdp)]
        return np.concatenate(granted) if granted else np.zeros(0, dtype=np.int64)

    def _fitting_run(self, candidates: np.ndarray, room: np.ndarray) -> tuple[int, np.ndarray, bool]:
        """How many of ``candidates`` (the first fits) fit one after another, what they take [B, A],
        and whether the claim after them did not fit (False: they were all looked at, or as many as
        are looked at at once)."""
        claims = self.claims
        columns = room.shape[1]
        head = candidates[:max(1, _DENSE_CELLS // (len(self.blocks) * columns))]
        lengths = claims.start[head + 1] - claims.start[head]
        entries = claims.entries(head)
        blocks, local_block = np.unique(claims.block[entries], return_inverse=True)
        local = np.repeat(np.arange(len(head)), lengths)
        demand = np.zeros((len(head), len(blocks), columns))
        demand[local, local_block] = claims.demand[entries]
        touched = np.zeros((len(head), len(blocks)), dtype=bool)
        touched[local, local_block] = True
        cumulative = np.cumsum(demand, axis=0)
        fits_cell = (cumulative <= room[blocks][None] + 1e-9) | ~touched[:, :, None]
        fits_column = fits_cell.all(axis=1)
        ok = fits_column.any(axis=1) if self.blocks.rdp else fits_column.all(axis=1)
        stopped = not ok.all()
        run = max(int(np.argmin(ok)), 1) if stopped else len(head)
        taken = np.zeros_like(room)
        taken[blocks] = cumulative[run - 1]
        return run, taken, stopped

    def _share_round_robin(self, waiting: np.ndarray, room: np.ndarray) -> np.ndarray:
        """Round robin: each block's unlocked budget not yet handed out is shared equally among the
        waiting claims that still need some of it; a claim is granted once it holds all it asked.

        Incremental: what the waiting claims hold is kept per block (``_held``), so an ask shares
        out only the blocks with budget to hand out, among the entries of waiting claims still short
        (``_open_entries``), with array operations over those alone."""
        claims, acc, owner = self.claims, self.accumulated, self._owner
        asked = np.zeros(len(claims), dtype=bool)
        asked[waiting] = True
        pool = np.maximum(room - self._held, 0.0)
        touched = []
        open_ = self._open_entries
        open_ = open_[(self.state[owner[open_]] == _WAITING) & asked[owner[open_]]]
        open_block = claims.block[open_]
        for column in range(room.shape[1]):
            idx = open_[(pool[open_block, column] > 0) & (acc[open_, column] < claims.demand[open_, column])]
            if not len(idx):
                continue
            block = claims.block[idx]
            given = water_fill(claims.demand[idx, column] - acc[idx, column], block, pool[:, column])
            acc[idx, column] += given
            self._held[:, column] += np.bincount(block, weights=given, minlength=len(room))
            touched.append(owner[idx])
        fresh = waiting[self._fresh[waiting]]
        self._fresh[waiting] = False
        candidates = np.unique(np.concatenate(touched + [fresh]))
        granted = candidates[:0]
        if len(candidates):
            entries = claims.entries(candidates)
            lengths = claims.start[candidates + 1] - claims.start[candidates]
            full = np.all(acc[entries] >= claims.demand[entries] - 1e-12, axis=1)
            complete = np.logical_and.reduceat(full, np.cumsum(lengths) - lengths) if len(entries) else full
            granted = candidates[complete]
        if len(granted):
            entries = claims.entries(granted)
            block = claims.block[entries]
            for column in range(room.shape[1]):
                self._held[:, column] -= np.bincount(block, weights=acc[entries, column], minlength=len(room))
            acc[entries] = 0.0  # granted: now consumed, not held
        open_ = self._open_entries
        self._open_entries = open_[(self.state[owner[open_]] == _WAITING)
                                   & np.any(acc[open_] < claims.demand[open_] - 1e-12, axis=1)]
        if len(granted):
            self._open_entries = self._open_entries[~np.isin(owner[self._open_entries], granted)]
        return granted

    def _record(self, now: float, unlocked: np.ndarray) -> None:
        budget = self.budget
        share = np.divide(self.consumed, budget, out=np.zeros_like(self.consumed), where=budget > 0)
        used = share.min(axis=1) if self.blocks.rdp else share[:, 0]
        if self._history and self._history[-1][0] == now:
            self._history[-1] = (now, used, unlocked)
        else:
            self._history.append((now, used, unlocked))

    def _short_block(self, claim: int, left: np.ndarray) -> str:
        lo, hi = self.claims.start[claim], self.claims.start[claim + 1]
        blocks, demand = self.claims.block[lo:hi], self.claims.demand[lo:hi]
        short = np.any(demand > left[blocks] + 1e-9, axis=1)
        return f"block {self.blocks.name[blocks[int(np.argmax(short))]]}"

    def _short_blocks(self, waiting: np.ndarray) -> np.ndarray:
        """[k] the name of the block each waiting claim waits on: the first of its blocks whose unlocked
        budget left cannot hold its demand (in any column; Rényi: in every order), else its first block."""
        claims = self.claims
        lengths = claims.start[waiting + 1] - claims.start[waiting]
        entries = claims.entries(waiting)
        room = self._unlocked[:, None] * self.budget - self.consumed
        over = claims.demand[entries] > room[claims.block[entries]] + FIT_TOLERANCE
        short = over.all(axis=1) if self.blocks.rdp else over.any(axis=1)
        first = np.cumsum(lengths) - lengths
        never = len(entries)
        first_short = np.minimum.reduceat(np.where(short, np.arange(len(entries)), never), first)
        chosen = np.where(first_short < never, first_short, first)
        return self.blocks.name[claims.block[chosen]]

    def _missing_block(self, claim: int, now: float) -> str:
        blocks = self.claims.block[self.claims.start[claim]:self.claims.start[claim + 1]]
        return str(self.blocks.name[blocks[int(np.argmax(self.blocks.arrival_s[blocks] > now))]])
