"""Dividing a node's cores: worked out by hand on one or two small nodes."""

import numpy as np
import pytest

from apportion.core.cpu_speed import CoreCurves, relative_speed
from apportion.mechanism.cpu_split import proportional_split, split_cores

POINTS = [1, 2, 4, 6]
SENSITIVE = [0.25, 0.5, 1.0, 1.0]  # a decoder-bound loader: full speed from 4 cores per GPU
INSENSITIVE = [1.0, 1.0, 1.0, 1.0]  # a model whose batches are cheap to make


def test_the_cores_an_insensitive_job_does_not_need_go_to_the_one_that_waits_for_data():
    curves = CoreCurves(np.array(POINTS), np.array([SENSITIVE, INSENSITIVE]))
    node, job, gpus = np.array([0, 0]), np.array([0, 1]), np.array([1, 1])
    even = proportional_split(np.array([6.0]), np.array([2]), node)
    assert even.tolist() == [3.0, 3.0]
    assert relative_speed(curves, job, even).tolist() == [0.75, 1.0]  # 1.75 GPUs busy

    split = split_cores(np.array([6.0]), node, job, gpus, curves, np.ones(2))
    assert split.tolist() == [4.0, 1.0]  # 2 GPUs busy, one core idle
    assert relative_speed(curves, job, split).tolist() == [1.0, 1.0]


def test_a_steeper_curve_is_served_first_and_a_two_gpu_job_pays_a_core_per_gpu():
    steep = [0.2, 0.6, 1.0, 1.0]  # +0.4 per core from 1 to 2, then +0.2 per core to 4
    shallow = [0.5, 0.6, 0.8, 1.0]  # +0.1 per core per GPU throughout
    curves = CoreCurves(np.array(POINTS), np.array([steep, shallow]))
    node, job, gpus = np.array([0, 0]), np.array([0, 1]), np.array([1, 2])
    # 7 cores, minimum 1 per GPU: 3 spent, 4 free. Steps by progress per core: steep 1->2 (0.4),
    # steep 2->3 and 3->4 (0.2 each), then shallow 1->2 (0.1, costing 2 cores): only 1 core left.
    split = split_cores(np.array([7.0]), node, job, gpus, curves, np.ones(2))
    assert split.tolist() == [4.0, 1.0]


def test_each_node_is_divided_on_its_own_and_no_job_falls_below_its_minimum():
    curves = CoreCurves(np.array(POINTS), np.array([SENSITIVE, INSENSITIVE, SENSITIVE]))
    node, job, gpus = np.array([0, 0, 1]), np.array([0, 1, 2]), np.array([1, 1, 2])
    split = split_cores(np.array([4.0, 12.0]), node, job, gpus, curves, np.array([1.0, 2.0, 1.0]))
    # node 0: 1 free core goes to the sensitive job; node 1: its 2-GPU job reaches 4 per GPU (8 cores)
    assert split.tolist() == [2.0, 2.0, 4.0]


def test_minimums_that_do_not_fit_name_the_node():
    curves = CoreCurves(np.array(POINTS), np.array([SENSITIVE]))
    with pytest.raises(ValueError, match="node 0: the jobs' minimum cores \\(8\\) are more than its 4 cores"):
        split_cores(np.array([4.0]), np.array([0]), np.array([0]), np.array([2]), curves, np.array([4.0]))


def test_speed_is_interpolated_flat_beyond_the_last_point_and_proportional_below_the_first():
    curves = CoreCurves(np.array([2.0, 4.0]), np.array([[0.5, 1.0]]))
    at = relative_speed(curves, np.zeros(5, dtype=int), np.array([0.0, 1.0, 3.0, 4.0, 9.0]))
    assert at.tolist() == [0.0, 0.25, 0.75, 1.0, 1.0]
    assert curves.saturation.tolist() == [4.0]


def test_a_curve_that_dips_is_read_as_never_slower_with_more_cores():
    curves = CoreCurves(np.array([1.0, 2.0, 3.0]), np.array([[0.5, 1.0, 0.8]]))
    assert curves.speed.tolist() == [[0.5, 1.0, 1.0]]
    assert curves.saturation.tolist() == [2.0]


def test_bad_curves_say_what_is_wrong():
    with pytest.raises(ValueError, match="ascending"):
        CoreCurves(np.array([2.0, 1.0]), np.array([[1.0, 1.0]]))
    with pytest.raises(ValueError, match="a speed at each of 2 core counts"):
        CoreCurves(np.array([1.0, 2.0]), np.array([[1.0, 1.0, 1.0]]))


def test_jobs_with_the_same_curve_take_equal_gains_in_turn_and_a_finer_step_splits_fractions():
    curves = CoreCurves(np.array(POINTS), np.array([SENSITIVE, SENSITIVE]))
    node, job, gpus = np.array([0, 0]), np.array([0, 1]), np.array([1, 1])
    # 6 cores, 1 each to start: the 4 free go a core at a time, to each job in turn
    assert split_cores(np.array([6.0]), node, job, gpus, curves, np.ones(2)).tolist() == [3.0, 3.0]
    # 5 cores in half cores: 3 free, half a core to each in turn
    assert split_cores(np.array([5.0]), node, job, gpus, curves, np.ones(2), step=0.5).tolist() == [2.5, 2.5]
