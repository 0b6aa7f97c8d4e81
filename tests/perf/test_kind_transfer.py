"""Gavel's job kinds as layer lists, and the Habitat-style transfer of a v100 measurement."""

import math

import pytest

from apportion.perf.kinds import (
    ARCHITECTURES,
    REFERENCE_GPU,
    build_step,
    fit_kernel_floor,
    ml20m_items_in_batch,
    predict_step_time,
    predict_steps_per_s,
    transfer_steps_per_s,
)
from apportion.perf.roofline import KERNEL_FLOOR_CYCLES
from apportion.workloads.catalog import builtin_throughputs


def gemm_flops(step):
    return sum(layer.gemm.flops for layer in step.layers if layer.gemm is not None)


def test_resnet50_forward_is_the_well_known_4_1_gmacs_per_image():
    """He et al. count ResNet-50 in multiply-adds; torchvision's resnet50 (stride on the 3 × 3
    convolution) is 4.09 G of them per 224 × 224 image. Here FLOPs = 2 × multiply-adds, so
    the convolutions and the classifier should come to about 8.2 GFLOP."""
    step = build_step("resnet50/bs1")

    assert gemm_flops(step) == pytest.approx(2 * 4.1e9, rel=0.05)
    assert sum(g.elements for g in step.params) == 25_557_032  # torchvision's parameter count


def test_resnet18_for_cifar_has_kuangliu_s_parameters_and_0_56_gmacs():
    step = build_step("resnet18/bs1")

    assert sum(g.elements for g in step.params) == 11_173_962
    assert gemm_flops(step) == pytest.approx(2 * 0.556e9, rel=0.02)


def test_batch_scales_the_work():
    assert gemm_flops(build_step("resnet50/bs64")) == pytest.approx(64 * gemm_flops(build_step("resnet50/bs1")))


def test_resnet50_gets_faster_with_each_newer_gpu():
    rates = {g: predict_steps_per_s("resnet50/bs64", g) for g in ("k80", "p100", "v100", "a100", "h100")}

    assert rates["h100"] > rates["a100"] > rates["v100"] > rates["p100"] > rates["k80"]
    assert predict_steps_per_s("resnet50/bs64", "t4") < rates["v100"]


def test_transfer_reproduces_the_measured_v100_number_at_v100():
    for kind in ("resnet50/bs64", "lm/bs20", "a3c"):
        assert transfer_steps_per_s(kind, 4.5257, REFERENCE_GPU, "v100") == 4.5257


def test_transfer_scales_by_the_models_time_ratio():
    kind = "transformer/bs64"
    expected = 8.21 * predict_step_time(kind, "v100") / predict_step_time(kind, "a100")

    assert transfer_steps_per_s(kind, 8.21, "v100", "a100") == pytest.approx(expected)
    assert math.isnan(transfer_steps_per_s(kind, float("nan"), "v100", "a100"))
    assert math.isnan(transfer_steps_per_s(kind, 0.0, "v100", "a100"))


def test_every_catalog_kind_has_a_layer_model_with_finite_times():
    for kind in builtin_throughputs().kinds:
        assert kind.split("/")[0] in ARCHITECTURES
        for gpu in ("k80", "v100", "t4", "a100", "h100"):
            seconds = predict_step_time(kind, gpu)
            assert math.isfinite(seconds) and seconds > 0


def test_an_unknown_kind_is_an_error_that_names_the_known_ones():
    with pytest.raises(ValueError, match="resnet50"):
        build_step("vgg16/bs32")


def test_recommendation_batches_widen_with_their_users_items_up_to_all_items():
    widths = [ml20m_items_in_batch(b) for b in (512, 1024, 2048, 8192)]

    assert widths == sorted(widths) and widths[-1] == 20_108 and widths[0] > 10_000


def _rates_with_floor(kinds, floor_cycles):
    return {kind: {gpu: 1.0 / predict_step_time(kind, gpu, floor_cycles=floor_cycles)
                   for gpu in ("k80", "p100", "v100")} for kind in kinds}


def test_the_floor_fit_recovers_the_floor_that_made_the_numbers():
    kinds = ("lm/bs5", "resnet18/bs16", "resnet50/bs64", "a3c")
    assert fit_kernel_floor(_rates_with_floor(kinds, 7_000), ["k80"]) == 7_000
    assert fit_kernel_floor(_rates_with_floor(kinds, 20_000), ["p100"]) == 20_000


def test_the_floor_fit_never_looks_at_a_gpu_it_is_not_given():
    kinds = ("lm/bs5", "resnet18/bs16", "a3c")
    rates = _rates_with_floor(kinds, 7_000)
    for kind in kinds:
        rates[kind]["k80"] *= 10.0  # nonsense on the held-out GPU changes nothing
    assert fit_kernel_floor(rates, ["p100"]) == 7_000
    with pytest.raises(ValueError, match="no kind has measured steps/s"):
        fit_kernel_floor({"a3c": {"v100": 1.0}}, ["t4"])


def test_the_shipped_floor_is_the_one_fitted_on_every_measured_gpu():
    table = builtin_throughputs()
    rates = {kind: {gpu: float(table.steps_per_s[i, table.gpu_types.index(gpu), 0])
                    for gpu in ("k80", "p100", "v100")} for i, kind in enumerate(table.kinds)}
    assert fit_kernel_floor(rates, ["k80", "p100"]) == KERNEL_FLOOR_CYCLES
