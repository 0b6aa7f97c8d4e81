"""The roofline both perf models price kernels with: a GEMM's tiles and waves, its memory roof."""

import pytest

from apportion.perf.accelerators import accelerator, get_accelerator
from apportion.perf.roofline import (
    CUDA_CORE_TILES,
    MEMORY_EFFICIENCY,
    TENSOR_CORE_TILES,
    Gemm,
    gemm_time,
    gemm_utilisation,
    roofline,
)

# 128 SMs, 400 TFLOP/s bf16, 2 TB/s; its best GEMM reaches 0.75 of the peak
CHIP = accelerator("chip", fp32=25, bf16=400, memory_gb=64, bandwidth_gbs=2000, intra_gbs=100, inter_gbs=10,
                   price=None, gpus_per_node=8, sms=128, threads_per_sm=2048, boost_clock_mhz=1500,
                   gemm_ceiling=0.75, sources=("made up",))


def test_a_kernel_takes_its_compute_or_its_memory_time_whichever_is_longer():
    assert roofline(1e12, 1e9, 1e12, 1e12).seconds == 1.0 and roofline(1e12, 1e9, 1e12, 1e12).bound == "compute"
    assert roofline(1e9, 2e12, 1e12, 1e12).seconds == 2.0 and roofline(1e9, 2e12, 1e12, 1e12).bound == "memory"
    assert roofline(0, 0, 1e12, 1e12).seconds == 0.0


def test_a_large_gemm_that_fills_every_wave_runs_at_the_catalogs_ceiling():
    big = Gemm(8192, 8192, 8192)  # 2,048 tiles of 256 × 128: 16 full waves of 128 SMs

    timed = gemm_time(big, CHIP, "bf16")

    assert gemm_utilisation(big, CHIP, TENSOR_CORE_TILES) == 1.0
    assert timed.bound == "compute" and timed.seconds == pytest.approx(2 * 8192**3 / (0.75 * 400e12), rel=1e-12)


def test_a_last_partial_wave_leaves_sms_idle():
    # on the A100's 108 SMs the same 2,048 tiles take 19 waves, the last with 104 of 108 SMs busy
    a100 = get_accelerator("a100-80gb")
    assert gemm_utilisation(Gemm(8192, 8192, 8192), a100, TENSOR_CORE_TILES) == pytest.approx(2048 / (19 * 108))
    # the CPU's two cores take a tile each: three 128 × 128 tiles take two rounds, the second half idle
    assert gemm_utilisation(Gemm(128, 384, 4096), get_accelerator("cpu"), TENSOR_CORE_TILES) == pytest.approx(0.75)


def test_the_cuda_core_tiles_trade_a_smaller_tiles_rate_for_busy_sms():
    tiny = Gemm(128, 640, 64)  # five 128 × 128 tiles; 80 tiles of 32 × 32 fill a v100 at 1/2 the rate

    assert gemm_utilisation(tiny, get_accelerator("v100"), CUDA_CORE_TILES) == pytest.approx(0.5)
    # the large tensor-core tiles, no split-K: five 128 × 128 tiles keep 5 of 80 SMs busy
    assert gemm_utilisation(tiny, get_accelerator("v100"), TENSOR_CORE_TILES) == pytest.approx(5 / 80)


def test_a_skinny_batched_gemm_is_bound_by_its_operands_through_memory():
    scores = Gemm(2048, 2048, 64, batch=16)  # attention's QKᵀ: k is one head's 64
    nbytes = 2 * 16 * (2048 * 64 + 64 * 2048 + 2048 * 2048)

    timed = gemm_time(scores, CHIP, "bf16")

    assert timed.bound == "memory"
    assert timed.seconds == pytest.approx(nbytes / (MEMORY_EFFICIENCY * 2000e9), rel=1e-12)
    assert gemm_time(scores, CHIP, "bf16", memory_efficiency=0.45).seconds == pytest.approx(2 * timed.seconds)


def test_a_gemm_with_an_empty_side_takes_no_time():
    assert gemm_time(Gemm(0, 4096, 4096), CHIP).seconds == 0.0


def test_backward_products_are_the_input_and_weight_gradients_of_the_forwards_size():
    dgrad, wgrad = Gemm(4096, 1024, 512, name="fc1").backward()

    assert dgrad == Gemm(4096, 512, 1024, name="fc1.dgrad") and wgrad == Gemm(512, 1024, 4096, name="fc1.wgrad")
    assert dgrad.flops == wgrad.flops == Gemm(4096, 1024, 512).flops
