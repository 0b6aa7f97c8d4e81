"""Mixture-of-experts layers with expert parallelism, and FP8 products on H100/H200."""

from __future__ import annotations

from dataclasses import replace

import pytest

from apportion.perf import Layout, TransformerModel, get_accelerator, get_preset, predict
from apportion.perf.roofline import Gemm, gemm_time
from apportion.perf.memory import state_bytes_per_param
from apportion.perf.parallel import Group, NCCL_INTRA_EFFICIENCY, alltoall_time, layout_problems
from apportion.perf.transformer import (
    active_parameter_count,
    expert_parameters,
    expert_tokens,
    layer_forward_flops,
    parameter_count,
)

MIXTRAL = get_preset("mixtral-8x7b")
H100 = get_accelerator("h100")


def test_mixtral_has_its_published_total_and_active_parameters():
    # Jiang et al. 2024 (arXiv 2401.04088): 47B parameters, 13B active per token
    assert parameter_count(MIXTRAL) == pytest.approx(46.7e9, rel=0.005)
    assert active_parameter_count(MIXTRAL) == pytest.approx(12.9e9, rel=0.005)


def test_a_token_pays_for_its_top_k_experts_and_the_router():
    dense = TransformerModel("dense", layers=2, hidden=1024, heads=16, seq=512, vocab=1000)
    top1 = replace(dense, experts=8, top_k=1)
    top2 = replace(dense, experts=8, top_k=2)
    tokens, h = 4 * 512, 1024
    mlp = 2 * tokens * h * (4 * h + 4 * h)

    assert layer_forward_flops(top1, 4) - layer_forward_flops(dense, 4) == 2 * tokens * h * 8  # the router
    assert layer_forward_flops(top2, 4) - layer_forward_flops(top1, 4) == mlp


def test_each_expert_takes_its_share_of_the_token_slots():
    # 2 experts a token over 8 experts: a quarter of the slots each; on ep = 4 ranks sharing
    # them, four ranks' tokens; a capacity factor of 1.25 pads every expert by a quarter
    assert expert_tokens(MIXTRAL, 1) == 4096 * 2 // 8
    assert expert_tokens(MIXTRAL, 1, ep=4) == 4096 * 2 * 4 // 8
    assert expert_tokens(MIXTRAL, 1, ep=4, capacity_factor=1.25) == 4096 * 2 * 4 * 5 // (8 * 4)


def test_expert_parallelism_splits_the_experts_and_pays_an_all_to_all():
    base = Layout(tp=1, pp=1, dp=8, micro_batch=1, global_batch=64, recompute="full", zero=0, schedule="none")
    alone = predict(MIXTRAL, base, H100)
    shared = predict(MIXTRAL, replace(base, ep=8), H100)

    expert_bytes = MIXTRAL.layers * expert_parameters(MIXTRAL) * (8 - 1) * 2  # 7 of 8 experts' bf16 weights
    assert alone.memory.weights - shared.memory.weights == pytest.approx(expert_bytes)
    assert alone.breakdown_s["expert_parallel_comm"] == 0
    assert shared.breakdown_s["expert_parallel_comm"] > 0


def test_an_all_to_all_inside_one_node_by_hand():
    # 8 ranks in one node each send 8 MB, 1/8 to each rank: 7 MB over NVLink, 7 message latencies
    seconds = alltoall_time(8e6, Group(8, 8), H100)

    assert seconds == pytest.approx(7e6 / (NCCL_INTRA_EFFICIENCY * 450e9) + 7 * 5e-6)


def test_a_larger_capacity_costs_more_expert_compute():
    base = Layout(tp=1, pp=1, dp=8, micro_batch=1, global_batch=64, recompute="full", schedule="none", ep=8)

    times = [predict(MIXTRAL, replace(base, capacity_factor=c), H100).breakdown_s["compute"] for c in (1.0, 1.25, 2.0)]

    assert times[0] < times[1] < times[2]
    assert predict(MIXTRAL, base, H100).breakdown_s["compute"] == pytest.approx(times[0])  # dropless = 1.0


def test_expert_settings_that_cannot_run_name_the_constraint():
    dense = get_preset("gpt3-1.3b")

    def problems(model, dp=8, **kw):
        return " ".join(layout_problems(model, Layout(tp=1, pp=1, dp=dp, global_batch=64, schedule="none", **kw)))

    assert "not divisible by the expert-parallel size 3" in problems(MIXTRAL, ep=3)
    assert "expert-parallel size 8 must divide the data-parallel size 4" in problems(MIXTRAL, dp=4, ep=8)
    assert "needs a mixture-of-experts model" in problems(dense, ep=2)
    assert "capacity factor needs a mixture-of-experts model" in problems(dense, capacity_factor=1.25)
    assert "capacity factor must be positive" in problems(MIXTRAL, capacity_factor=0.0)


def test_fp8_products_run_at_twice_the_bf16_rate_on_h100():
    assert gemm_time(Gemm(8192, 8192, 8192), H100, "fp8").seconds == pytest.approx(
        gemm_time(Gemm(8192, 8192, 8192), H100, "bf16").seconds / 2)


def test_fp8_training_is_faster_and_keeps_fp8_copies_of_the_weights():
    layout = Layout(tp=1, pp=1, dp=64, micro_batch=1, global_batch=512, recompute="full", zero=1,
                    schedule="none", ep=8)
    bf16 = predict(MIXTRAL, layout, H100)
    fp8 = predict(MIXTRAL, replace(layout, precision="fp8"), H100)

    assert state_bytes_per_param("fp8") == (4, 2, 12)  # bf16 weights + an fp8 copy and its transpose
    assert fp8.memory.weights == pytest.approx(2 * bf16.memory.weights)
    assert fp8.memory.activations < bf16.memory.activations  # product inputs kept in fp8
    assert fp8.step_time_s < bf16.step_time_s


def test_fp8_on_a_gpu_without_fp8_units_is_refused_by_name():
    layout = Layout(tp=1, pp=1, dp=8, global_batch=64, schedule="none", precision="fp8")

    with pytest.raises(ValueError, match=r"fp8 needs FP8 tensor cores \(h100, h200\); the a100-80gb has none"):
        predict(get_preset("gpt3-1.3b"), layout, "a100-80gb")


def test_plan_searches_expert_parallel_layouts_of_a_moe_model():
    import json

    from typer.testing import CliRunner

    from apportion.cli import app

    runner = CliRunner()
    table = runner.invoke(app, ["plan", "--preset", "mixtral-8x7b", "--gpus", "64", "--gpu-type", "h100",
                                "--global-batch", "512", "--tp", "2", "--pp", "4", "--top", "2"])
    custom = runner.invoke(app, ["plan", "--preset", "gpt3-1.3b", "--experts", "4", "--top-k", "1", "--gpus", "8",
                                 "--gpu-type", "h100", "--global-batch", "64", "--tp", "1", "--pp", "1",
                                 "--micro-batch", "1", "--ep", "4", "--precision", "fp8", "--json"])

    assert table.exit_code == 0, table.output
    assert "12.9B active: 8 experts, top-2" in table.stdout and " ep" in table.stdout
    data = json.loads(custom.stdout)
    assert data["layout"]["ep"] == 4 and data["layout"]["precision"] == "fp8"
    assert data["time_breakdown_s"]["expert_parallel_comm"] > 0
