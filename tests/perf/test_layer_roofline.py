"""The per-layer roofline: one layer's time by hand, utilisation, backward and optimizer costs."""

import math

import pytest

from apportion.perf.accelerators import get_accelerator
from apportion.perf.layers import (
    OPTIMIZERS,
    Net,
    ParamGroup,
    TrainingStep,
    layer_backward_time,
    layer_forward_time,
    optimizer_time,
    step_time,
)
from apportion.perf.roofline import (
    KERNEL_FLOOR_CYCLES,
    KERNEL_LAUNCH_S,
    Gemm,
    gemm_utilisation,
    kernel_cost_s,
    sustained_peak,
    thread_utilisation,
)

V100 = get_accelerator("v100")  # 15.7 TFLOP/s FP32, 900 GB/s, 80 SMs, 1,530 MHz
PER_KERNEL = KERNEL_LAUNCH_S + KERNEL_FLOOR_CYCLES / 1.53e9  # a kernel's fixed cost on the v100


def one_linear(rows, fin, fout, bias=False):
    net = Net("one", optimizer="sgd")
    net.linear("fc", rows, fin, fout, bias=bias)
    return net.layers[0]


def test_a_big_gemm_is_compute_bound_and_costs_its_flops_at_peak_times_wave_utilisation():
    layer = one_linear(4096, 4096, 4096)
    flops = 2 * 4096**3
    nbytes = 4 * 3 * 4096 * 4096
    tiles = 32 * 32  # 128 × 128 tiles of the 4096 × 4096 output
    waves = math.ceil(tiles / 80)  # 13 waves of 80 SMs, the last one 64/80 full
    utilisation = tiles / (waves * 80)

    assert layer.flops == flops and layer.bytes == nbytes
    assert flops / (15.7e12 * utilisation) > nbytes / 900e9  # compute-bound
    assert layer_forward_time(layer, "v100") == pytest.approx(
        flops / (15.7e12 * utilisation) + PER_KERNEL, rel=1e-12)


def test_a_skinny_gemm_is_memory_bound_and_costs_its_bytes_at_bandwidth():
    layer = one_linear(16, 8192, 8192)  # 16 rows times a 256 MiB weight matrix
    nbytes = 4 * (8192 * 8192 + 2 * 16 * 8192)
    flops = 2 * 16 * 8192 * 8192
    utilisation = 64 / 80  # 64 tiles, no split-K (80 // 64 = 1): one wave, 64 of 80 SMs busy

    assert flops / (15.7e12 * utilisation) < nbytes / 900e9  # memory-bound
    assert layer_forward_time(layer, "v100") == pytest.approx(nbytes / 900e9 + PER_KERNEL, rel=1e-12)


def test_an_elementwise_layer_costs_its_bytes_once_it_fills_the_gpu():
    net = Net("ew")
    net.elementwise("relu", 100e6, reads=1, writes=1)

    assert layer_forward_time(net.layers[0], "v100") == pytest.approx(8e8 / 900e9 + PER_KERNEL)


def test_work_too_small_to_fill_the_sms_runs_proportionally_slower():
    # 5 output tiles of 128 × 128 and K too short to split: 5 of 80 SMs busy. Cut into 32 × 32
    # tiles it is 80 blocks, a full wave, each at (32·32 / 128·128) ** 0.25 = 1/2 the rate
    tiny = Gemm(128, 128 * 5, 64)
    assert gemm_utilisation(tiny, get_accelerator("v100")) == pytest.approx(0.5)
    # the K80 die's 13 SMs: 10 tiles of 128 × 64 (rate 0.5 ** 0.25) keep 10 of them busy
    assert gemm_utilisation(tiny, get_accelerator("k80")) == pytest.approx(10 / 13 * 0.5 ** 0.25)
    # 132 SMs: 80 tiles of 32 × 32 leave 52 idle
    assert gemm_utilisation(tiny, get_accelerator("h100")) == pytest.approx(80 / 132 * 0.5)
    # a long reduction is split across idle SMs (split-K): 5 tiles × 16 slices of K = 80 blocks
    assert gemm_utilisation(Gemm(128, 128 * 5, 128 * 100), get_accelerator("v100")) == pytest.approx(1.0)
    # a half-empty last wave: 100 tiles of 128 × 128 on 80 SMs take two waves (100/160 busy);
    # 400 tiles of 64 × 64 fill five waves exactly, at 0.5 ** 0.5 the rate: the better choice
    assert gemm_utilisation(Gemm(128 * 10, 128 * 10, 4096), get_accelerator("v100")) == pytest.approx(0.5 ** 0.5)
    # a partial tile computes zeros: 16 rows use 1/8 of a 128-row tile; 16 × 128 tiles, 80 of
    # them, fill the SMs at (16·128 / 128²) ** 0.25 the rate
    assert gemm_utilisation(Gemm(16, 128 * 80, 4096), get_accelerator("v100")) == pytest.approx(0.125 ** 0.25)
    # element-wise: one thread per element, full at 80 SMs × 2,048 threads
    assert thread_utilisation(80 * 2048 / 4, get_accelerator("v100")) == pytest.approx(0.25)
    assert thread_utilisation(1e9, get_accelerator("v100")) == 1.0
    assert thread_utilisation(1e3, get_accelerator("cpu")) == 1.0  # the CPU has no threads to fill


def test_a_kernels_fixed_cycles_cost_more_time_at_a_lower_clock():
    # the launch is the same everywhere; the floor's cycles run at the SMs' clock (the K80 at base)
    assert kernel_cost_s("v100", floor_cycles=15_300) == pytest.approx(5e-6 + 10e-6)
    assert kernel_cost_s("k80", floor_cycles=5_620) == pytest.approx(5e-6 + 10e-6)
    assert kernel_cost_s("k80", sustained=False, floor_cycles=8_750) == pytest.approx(5e-6 + 10e-6)
    assert kernel_cost_s("cpu", floor_cycles=15_300) == KERNEL_LAUNCH_S  # no SMs, no floor
    tiny = one_linear(1, 8, 8)
    assert (layer_forward_time(tiny, "k80", floor_cycles=0)
            == pytest.approx(layer_forward_time(tiny, "v100", floor_cycles=0), rel=0.05))
    assert layer_forward_time(tiny, "k80") > 2 * layer_forward_time(tiny, "v100") - 2 * KERNEL_LAUNCH_S


def test_backward_of_a_big_gemm_is_two_products_of_the_forwards_size():
    layer = one_linear(4096, 4096, 4096)
    forward = layer_forward_time(layer, "v100") - PER_KERNEL

    assert layer_backward_time(layer, "v100") == pytest.approx(2 * forward + 2 * PER_KERNEL, rel=1e-9)


def test_a_layer_whose_input_needs_no_gradient_runs_only_the_weight_gradient():
    net = Net("stem")
    net.conv2d("conv1", (64, 3, 224, 224), 64, 7, 2, 3, bias=False, input_grad=False)
    net.conv2d("conv2", (64, 3, 224, 224), 64, 7, 2, 3, bias=False)
    first, second = net.layers

    assert first.gemm == second.gemm == Gemm(64 * 112 * 112, 64, 3 * 7 * 7)
    # the second also runs the input's gradient, dX = dY·Wᵀ: an M × K output reducing over N
    input_grad = Gemm(64 * 112 * 112, 3 * 7 * 7, 64)
    extra = max(first.flops / (15.7e12 * gemm_utilisation(input_grad, get_accelerator("v100"))), first.bytes / 900e9)
    assert layer_backward_time(second, "v100") - layer_backward_time(first, "v100") == pytest.approx(
        extra + PER_KERNEL)


def test_optimizer_update_is_its_memory_sweeps_plus_launches_per_tensor():
    group = ParamGroup(elements=10_000_000, tensors=10, optimizer="adam")
    cost = OPTIMIZERS["adam"]

    expected = cost.accesses_per_element * 4 * 1e7 / 900e9 + cost.kernels_per_tensor * 10 * PER_KERNEL
    assert optimizer_time(group, "v100") == pytest.approx(expected)
    assert optimizer_time(ParamGroup(1000, 1, "none"), "v100") == 0.0


def test_step_time_adds_forward_backward_optimizer_and_counts_every_launch():
    net = Net("mlp", optimizer="sgd")
    net.linear("fc1", 512, 1024, 1024)
    net.relu("relu", (512, 1024))
    net.linear("fc2", 512, 1024, 10)
    net.extra_kernels = 3
    step = net.build()
    t = step_time(step, "v100")

    forward = sum(layer_forward_time(layer, "v100") for layer in step.layers) + 3 * PER_KERNEL
    backward = sum(layer_backward_time(layer, "v100") for layer in step.layers)
    assert t.forward == pytest.approx(forward) and t.backward == pytest.approx(backward)
    assert t.total == pytest.approx(t.forward + t.backward + t.optimizer)
    # forward 2 + 1 + 2, backward 4 + 1 + 4, SGD 2 per tensor × 4 tensors, 3 extra
    assert t.kernels == 5 + 9 + 8 + 3
    assert step.params == (ParamGroup(1024 * 1024 + 1024 + 1024 * 10 + 10, 4, "sgd"),)


def test_a_module_used_twice_counts_its_parameters_once():
    net = Net("shared", optimizer="adam")
    for _ in range(3):
        net.linear("fc", 8, 16, 16, module="fc")

    assert len(net.build().layers) == 3
    assert net.build().params == (ParamGroup(16 * 16 + 16, 2, "adam"),)


def test_faster_hardware_never_makes_a_step_slower():
    net = Net("conv", optimizer="sgd_momentum_wd")
    x = net.conv2d("c1", (32, 64, 56, 56), 64, 3, 1, 1)
    net.batchnorm("bn", x)
    step = net.build()

    times = [step_time(step, g).total for g in ("k80", "p100", "v100", "a100", "h100")]
    assert times == sorted(times, reverse=True)


def test_every_gpu_in_the_catalog_states_its_sms_threads_and_clock_with_a_source():
    for name in ("k80", "p100", "v100", "t4", "a100-40gb", "a100-80gb", "h100", "h200"):
        acc = get_accelerator(name)
        assert acc.sms > 0 and acc.threads_per_sm in (1024, 2048) and acc.boost_clock_mhz > 0 and acc.sm_source
    assert step_time(TrainingStep("empty", ()), "cpu").total == 0.0


def test_a_kepler_sm_fills_two_thirds_of_its_lanes_at_the_k80s_base_clock():
    k80 = get_accelerator("k80")
    # 4.37 TFLOP/s per die at 875 MHz on 192 lanes; 128 lanes issued a clock, at 562 MHz
    assert sustained_peak(k80, "fp32") == pytest.approx(4.37e12 * 128 / 192 * 562 / 875)
    assert sustained_peak(k80, "fp32", sustained=False) == k80.peak("fp32")
    assert sustained_peak(V100, "fp32") == V100.peak("fp32")  # one issue a clock fills Volta


def test_a_compute_bound_layer_takes_longer_on_a_kepler_die_by_exactly_that():
    layer = one_linear(4096, 4096, 4096)
    k80 = get_accelerator("k80")

    sustained = layer_forward_time(layer, k80) - layer.kernels * kernel_cost_s(k80)
    datasheet = layer_forward_time(layer, k80, sustained=False) - layer.kernels * kernel_cost_s(k80, sustained=False)

    assert sustained == pytest.approx(datasheet * 192 / 128 * 875 / 562)
