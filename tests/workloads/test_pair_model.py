"""The conservative pair model for GPU types with no measured pairs."""

import numpy as np

from apportion.core.throughputs import ThroughputTable
from apportion.workloads.catalog import builtin_throughputs
from apportion.workloads.pair_model import leave_one_out, predicted_pairs


def little_table(pairs) -> ThroughputTable:
    """Kinds a and b, 1 step/s alone everywhere except 4 on the new type."""
    rates = np.array([[[1.0], [1.0], [4.0]], [[1.0], [1.0], [4.0]]])
    return ThroughputTable(("a", "b"), ("small", "big", "new"), (1,), rates, pairs)


def test_each_job_keeps_its_smallest_measured_fraction():
    table = little_table({("a", "b", "small"): (0.9, 0.5), ("a", "b", "big"): (0.6, 0.7)})

    predicted = predicted_pairs(table, ("small", "big"), ("new",), {"small": 12, "big": 16, "new": 16})

    assert predicted == {("a", "b", "new"): (0.6 * 4, 0.5 * 4)}


def test_a_pair_that_did_not_fit_on_a_gpu_no_larger_is_never_formed():
    table = little_table({("a", "b", "small"): (0.0, 0.0), ("a", "b", "big"): (0.6, 0.7)})

    predicted = predicted_pairs(table, ("small", "big"), ("new",), {"small": 12, "big": 16, "new": 16})

    assert predicted == {("a", "b", "new"): (0.0, 0.0)}


def test_no_prediction_for_a_gpu_smaller_than_every_measured_one():
    table = little_table({("a", "b", "small"): (0.9, 0.9), ("a", "b", "big"): (0.9, 0.9)})

    assert predicted_pairs(table, ("small", "big"), ("new",), {"small": 12, "big": 16, "new": 8}) == {}


def test_the_catalog_predicts_few_gains_on_new_gpus_and_they_hold_where_checkable():
    """Leave-one-GPU-out on Gavel's pairs: where the held-out GPU is p100 or v100, most pairs the
    model says beat time-slicing did (benchmarks/accuracy/pair_model.py prints the figures)."""
    rows = {row["held_out"]: row for row in leave_one_out(builtin_throughputs(), ("k80", "p100", "v100"))}
    catalog = builtin_throughputs()
    new_pairs = {key: value for key, value in catalog.pair_steps_per_s.items() if key[2] in ("t4", "a100", "h100")}

    assert rows["p100"]["of_those_measured_at_least_1"] > 0.9
    assert rows["v100"]["of_those_measured_at_least_1"] > 0.9
    assert len(new_pairs) == 3 * len(catalog.kinds) ** 2
