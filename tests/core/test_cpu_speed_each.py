"""Curves each on core counts of their own, read at once, read as one curve at a time reads them."""

from __future__ import annotations

import numpy as np
import pytest

from apportion.core.cpu_speed import CoreCurves, relative_speed, relative_speed_each


def test_a_curve_of_its_own_reads_as_relative_speed_reads_it_below_between_and_above_its_points():
    rng = np.random.default_rng(3)
    curves, cores = [], []
    for _ in range(300):
        k = int(rng.integers(1, 8))
        points = np.sort(rng.choice(np.arange(1, 40), size=k, replace=False)).astype(np.float64) / 2
        curves.append((points, rng.uniform(0.0, 2.0, size=k) + np.eye(k)[-1]))  # some speed > 0
        cores.append(rng.uniform(0.0, 25.0))
    alone = [relative_speed(CoreCurves(p, v[None, :]), np.zeros(1, dtype=np.int64), np.array([c]))[0]
             for (p, v), c in zip(curves, cores)]
    assert np.allclose(relative_speed_each(curves, np.array(cores)), alone, rtol=0, atol=1e-12)


def test_worked_by_hand():
    curves = [(np.array([1.0, 2.0, 4.0]), np.array([0.3, 0.66, 1.0])), (np.array([2.0]), np.array([5.0]))]
    # 3 cores: halfway from 0.66 to 1.0; 1 core on a one-point curve at 2: half its speed
    assert relative_speed_each(curves, np.array([3.0, 1.0])) == pytest.approx([0.83, 0.5])
