"""The goodput model: step time, statistical efficiency, batch splitting and the best batch,
worked out by hand; fitting its parameters to observed steps and refining them online."""

import numpy as np
import pytest

from apportion.core.goodput import (
    BatchLimits, best_batch, compute_time_s, efficiency, goodput_at, split_batch, step_time_s, sync_time_s,
    throughput,
)
from apportion.core.goodput_fit import StepObservations, fit_step_params

#                   α_c   β_c   α_n   β_n   α_r   β_r   γ
PARAMS = np.array([0.10, 0.01, 0.20, 0.02, 0.05, 0.01, 1.0])


def limits(init=8, most=256, min_local=1, max_local=32):
    return BatchLimits(*(np.float64(v) for v in (init, most, min_local, max_local)))


def test_compute_grows_linearly_with_the_micro_batch():
    assert compute_time_s(PARAMS, 10) == pytest.approx(0.10 + 0.01 * 10)


def test_sync_is_free_on_one_gpu_and_dearer_across_nodes():
    assert sync_time_s(PARAMS, 1, 1) == 0.0
    assert sync_time_s(PARAMS, 1, 4) == pytest.approx(0.05 + 0.01 * 2)  # one node: α_r + β_r (K − 2)
    assert sync_time_s(PARAMS, 2, 8) == pytest.approx(0.20 + 0.02 * 6)  # two nodes: α_n + β_n (K − 2)


def test_gamma_one_adds_compute_and_sync_and_a_large_gamma_overlaps_them():
    assert step_time_s(PARAMS, 1, 4, 10) == pytest.approx(0.20 + 0.07)
    overlapped = PARAMS.copy()
    overlapped[-1] = 10.0
    assert step_time_s(overlapped, 1, 4, 10) == pytest.approx(0.20, rel=1e-3)


def test_throughput_counts_every_gpu_and_accumulated_micro_batch():
    # 4 GPUs × 10 examples × 2 micro-batches; one micro-batch without sync (0.2 s) then one with (0.27 s)
    assert throughput(PARAMS, 1, 4, 10, 1) == pytest.approx(80 / 0.47)


def test_efficiency_from_the_noise_scale():
    assert efficiency(8.0, 8, 8) == 1.0
    assert efficiency(8.0, 8, 16) == pytest.approx(16 / 24)  # (φ + M0) / (φ + M)
    assert efficiency(1e12, 8, 1024) == pytest.approx(1.0)  # a noisy gradient: a big batch loses nothing


def test_a_batch_too_big_for_a_gpu_is_split_into_accumulated_micro_batches():
    local, accum = split_batch(100, 2, limits(max_local=20))
    # 50 examples a GPU, at most 20 a micro-batch: 3 micro-batches of 17
    assert (local, accum) == (17, 2)


def test_one_gpu_above_m0_always_accumulates_so_the_noise_can_be_measured():
    assert split_batch(16, 1, limits(init=8, max_local=32)) == (8, 1)
    assert split_batch(8, 1, limits(init=8, max_local=32)) == (8, 0)


def test_goodput_is_throughput_times_efficiency_at_the_batch_actually_run():
    noise = 8.0
    # 16 on 2 GPUs: 8 each, no accumulation; E = (8 + 8) / (8 + 16)
    expected = throughput(PARAMS, 1, 2, 8, 0) * 16 / 24
    assert goodput_at(PARAMS, 1, 2, 16, noise, limits()) == pytest.approx(expected)


def test_the_best_batch_is_m0_when_the_gradient_is_clean_and_the_largest_when_it_is_noisy():
    per_example = PARAMS.copy()
    per_example[0] = 0.0  # compute is all per example: throughput does not depend on the batch
    clean, batch_clean = best_batch(per_example, 1, 4, 1e-6, limits(init=8, most=256))
    assert batch_clean == 8  # any larger batch only loses efficiency
    with_overhead = PARAMS.copy()
    noisy, batch_noisy = best_batch(with_overhead, 1, 4, 1e12, limits(init=8, most=256))
    assert batch_noisy == 256  # efficiency stays 1, and a bigger batch amortises α_c and the sync
    assert noisy == pytest.approx(goodput_at(with_overhead, 1, 4, 256, 1e12, limits()))


def test_more_gpus_than_the_largest_batch_has_micro_batches_have_no_goodput():
    value, batch = best_batch(PARAMS, 4, 16, 100.0, limits(init=8, most=8, min_local=2))
    assert value == 0.0 and batch == 0.0


def test_best_batch_works_over_arrays_of_allocations():
    gpus = np.array([[1, 2, 4, 8]])
    value, batch = best_batch(PARAMS, np.array([[1, 1, 1, 2]]), gpus, 500.0, limits())
    assert value.shape == batch.shape == (1, 4)
    assert np.all(batch >= 8) and np.all(batch <= 256)
    for k in range(4):
        single, _ = best_batch(PARAMS, [1, 1, 1, 2][k], gpus[0, k], 500.0, limits())
        assert value[0, k] == pytest.approx(single)


def observed(params, nodes, gpus, local):
    """Steps the model with ``params`` would take: what a job would report."""
    nodes, gpus, local = (np.asarray(a, dtype=float) for a in (nodes, gpus, local))
    step = step_time_s(params, nodes, gpus, local)
    return StepObservations.of(nodes=nodes, gpus=gpus, local_batch=local, step_time_s=step,
                               sync_time_s=step - compute_time_s(params, local))


GRID = np.array([(n, g, b) for n, g in ((1, 1), (1, 2), (1, 4), (2, 8), (4, 16)) for b in (4, 8, 16, 32)], float)


def test_the_fit_recovers_a_model_from_its_own_steps():
    truth = np.array([0.05, 0.004, 0.3, 0.01, 0.04, 0.002, 1.5])
    fit = fit_step_params(observed(truth, *GRID.T))

    assert fit.rmsle < 0.01
    assert fit.fixed == ()
    # and it predicts a configuration it never saw
    assert step_time_s(fit.params, 8, 32, 24) == pytest.approx(step_time_s(truth, 8, 32, 24), rel=0.05)


def test_terms_no_observation_can_pin_down_are_held_at_the_prior():
    truth = np.array([0.05, 0.004, 0.3, 0.01, 0.04, 0.002, 1.5])
    one_node = GRID[GRID[:, 0] == 1]
    prior = np.array([0.1, 0.01, 0.5, 0.05, 0.1, 0.01, 1.0])
    fit = fit_step_params(observed(truth, *one_node.T), prior=prior)

    assert fit.fixed == ("alpha_n", "beta_n")
    assert fit.params[2:4].tolist() == prior[2:4].tolist()


def test_refining_online_with_steps_at_new_sizes_moves_the_model_towards_them():
    truth = np.array([0.05, 0.004, 0.3, 0.01, 0.04, 0.002, 1.5])
    start = observed(truth, *GRID[GRID[:, 1] <= 2].T)  # the job has run on one and two GPUs
    first = fit_step_params(start)
    later = start.plus(observed(truth, *GRID[GRID[:, 1] > 2].T))  # then the scheduler gave it more
    refined = fit_step_params(later, prior=first.params)

    before = abs(step_time_s(first.params, 4, 16, 16) / step_time_s(truth, 4, 16, 16) - 1)
    after = abs(step_time_s(refined.params, 4, 16, 16) / step_time_s(truth, 4, 16, 16) - 1)
    assert after < 0.05 < before


def test_bad_observations_are_refused_with_a_reason():
    with pytest.raises(ValueError, match="no observations"):
        fit_step_params(observed(PARAMS, [], [], []))
    bad = StepObservations.of(nodes=[1], gpus=[1], local_batch=[8], step_time_s=[0.0], sync_time_s=[0.0])
    with pytest.raises(ValueError, match="positive step times"):
        fit_step_params(bad)
