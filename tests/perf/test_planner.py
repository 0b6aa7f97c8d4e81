"""The planner returns the fastest layouts that fit, and says why the others were turned away."""

from __future__ import annotations

import pytest

from apportion.perf import fixed_layout, gemm_efficiency, get_accelerator, get_preset, list_price, list_prices, plan
from apportion.perf.roofline import Gemm


def test_best_layouts_are_sorted_by_step_time_and_all_fit():
    result = plan(get_preset("gpt3-1.3b"), gpus=8, accelerator="a100-40gb", global_batch=64, top=4)

    times = [p.step_time_s for p in result.best]
    assert len(result.best) == 4
    assert times == sorted(times)
    assert all(p.fits and p.memory.total <= 40e9 for p in result.best)
    assert all(p.layout.gpus == 8 for p in result.best)
    assert result.considered > len(result.best)


def test_pinned_options_are_kept():
    result = plan(get_preset("gpt3-1.3b"), gpus=8, accelerator="a100-40gb", global_batch=64, tp=2, recompute="full")

    assert result.best
    assert all(p.layout.tp == 2 and p.layout.recompute == "full" for p in result.best)


def test_a_gpu_too_small_rejects_every_layout_with_the_reason():
    result = plan(get_preset("gpt3-175b"), gpus=8, accelerator="t4", global_batch=8)

    assert result.best == []
    misses = result.closest_misses()
    assert misses and all("needs" in m.reasons[0] and "GB" in m.reasons[0] for m in misses)
    assert any("does not fit in memory" in line for line in result.rejection_summary())


def test_small_gemms_do_not_reach_the_ceiling():
    acc = get_accelerator("a100-80gb")
    ceiling = acc.gemm_ceiling

    large = gemm_efficiency(Gemm(8192, 8192, 8192), acc)
    skinny = gemm_efficiency(Gemm(2048, 2048, 64, batch=16), acc)
    tiny = gemm_efficiency(Gemm(64, 64, 64), acc)

    assert large <= ceiling + 1e-9 and large > 0.95 * ceiling
    assert skinny < large and tiny < 0.05


def test_a_fixed_layout_fills_in_the_defaults():
    no_pipeline = fixed_layout(16, "a100-80gb", 64, tp=8, pp=1, micro_batch=2)
    interleaved = fixed_layout(16, "a100-80gb", 64, tp=2, pp=4, micro_batch=1, virtual_stages=2)

    assert (no_pipeline.dp, no_pipeline.schedule, no_pipeline.recompute, no_pipeline.zero) == (2, "none", "none", 0)
    assert no_pipeline.precision == "bf16"
    assert (interleaved.dp, interleaved.schedule, interleaved.virtual_stages) == (2, "interleaved", 2)
    assert fixed_layout(8, "v100", 8, tp=1, pp=2, micro_batch=1).schedule == "1f1b"
    assert fixed_layout(8, "v100", 8, tp=1, pp=2, micro_batch=1).precision == "fp16"


def test_a_fixed_layout_must_divide_the_gpus():
    with pytest.raises(ValueError, match="not divisible"):
        fixed_layout(12, "a100-80gb", 64, tp=8, pp=1, micro_batch=1)


def test_list_prices_name_only_the_priced_types():
    prices = list_prices(["v100", "a100", "cpu", "nonesuch"])

    assert set(prices) == {"v100", "a100"}
    assert prices["a100"] == list_price("a100-40gb") > 0
