"""A conservative model for space-sharing pairs on GPU types nobody measured them on.

For two kinds a and b sharing one GPU of an unmeasured type t:

* memory: the pair is formed only if it fitted together on every measured GPU type with no
  more memory than t (and there is at least one such type); a pair that did not fit on a
  smaller GPU is never formed, and one that fitted only on larger GPUs is not assumed to fit.
* speed: each job keeps the smallest fraction of its own speed alone that it kept in this
  pair on any measured type, r_a = min_g pair_a(g) / alone_a(g), and runs at r_a × alone_a(t).

Taking the minimum per job makes the predicted combined throughput r_a + r_b no larger than
on any measured GPU, so a pair is predicted to beat time-slicing (r_a + r_b > 1) only where
every measurement says so. docs/throughputs.md gives the leave-one-GPU-out check of this rule
on Gavel's measurements (``python benchmarks/accuracy/pair_model.py``).
"""

from __future__ import annotations

import numpy as np

from apportion.core.throughputs import ThroughputTable


def predicted_pairs(
    table: ThroughputTable,
    measured_types: tuple[str, ...],
    target_types: tuple[str, ...],
    memory_gb: dict[str, float],
) -> dict[tuple[str, str, str], tuple[float, float]]:
    """Pair steps/s on ``target_types`` from the pairs measured on ``measured_types``.

    Only pairs of kinds with a known one-GPU rate on the target are returned; a pair the model
    says does not fit gets (0, 0), as in Gavel's files.
    """
    ratio = measured_ratios(table, measured_types)
    out: dict[tuple[str, str, str], tuple[float, float]] = {}
    for target in target_types:
        smaller = [g for g in measured_types if memory_gb[g] <= memory_gb[target]]
        if not smaller:
            continue
        t = table.gpu_types.index(target)
        for (a, b), per_type in ratio.items():
            if any(g not in per_type for g in measured_types):
                continue  # not measured everywhere: no basis for a prediction
            alone_a = table.steps_per_s[table.kind_index(a), t, 0]
            alone_b = table.steps_per_s[table.kind_index(b), t, 0]
            if not (alone_a > 0 and alone_b > 0):
                continue
            if any(per_type[g] is None for g in smaller):
                out[(a, b, target)] = (0.0, 0.0)
                continue
            fitted = [per_type[g] for g in measured_types if per_type[g] is not None]
            r_a = min(r for r, _ in fitted)
            r_b = min(r for _, r in fitted)
            out[(a, b, target)] = (float(r_a * alone_a), float(r_b * alone_b))
    return out


def measured_ratios(
    table: ThroughputTable, measured_types: tuple[str, ...]
) -> dict[tuple[str, str], dict[str, tuple[float, float] | None]]:
    """Per kind pair and measured type: each job's rate in the pair over its rate alone (None: did not fit)."""
    out: dict[tuple[str, str], dict[str, tuple[float, float] | None]] = {}
    for (a, b, gpu), (rate_a, rate_b) in table.pair_steps_per_s.items():
        if gpu not in measured_types:
            continue
        t = table.gpu_types.index(gpu)
        alone_a = table.steps_per_s[table.kind_index(a), t, 0]
        alone_b = table.steps_per_s[table.kind_index(b), t, 0]
        fits = rate_a > 0 and rate_b > 0 and alone_a > 0 and alone_b > 0
        out.setdefault((a, b), {})[gpu] = (rate_a / alone_a, rate_b / alone_b) if fits else None
    return out


def leave_one_out(table: ThroughputTable, measured_types: tuple[str, ...]) -> list[dict]:
    """For each measured type, predict its pairs from the others and compare with what was measured."""
    ratio = measured_ratios(table, measured_types)
    rows = []
    for held_out in measured_types:
        others = [g for g in measured_types if g != held_out]
        compared = both_at_or_below = 0
        gain_measured = []
        for per_type in ratio.values():
            if any(per_type.get(g) is None for g in others) or per_type.get(held_out) is None:
                continue
            r_a = min(per_type[g][0] for g in others)
            r_b = min(per_type[g][1] for g in others)
            m_a, m_b = per_type[held_out]
            compared += 1
            both_at_or_below += r_a <= m_a + 1e-12 and r_b <= m_b + 1e-12
            if r_a + r_b > 1:
                gain_measured.append(m_a + m_b)
        gains = np.asarray(gain_measured)
        rows.append({
            "held_out": held_out,
            "pairs_compared": compared,
            "both_jobs_at_or_below_measured": both_at_or_below / compared if compared else None,
            "predicted_to_beat_time_slicing": len(gains),
            "of_those_measured_at_least_1": float((gains >= 1).mean()) if len(gains) else None,
            "of_those_median_measured_sum": float(np.median(gains)) if len(gains) else None,
        })
    return rows
