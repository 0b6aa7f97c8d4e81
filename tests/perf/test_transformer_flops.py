"""Parameter counts and FLOPs per iteration equal Narayanan et al. 2021's Eq. 2 and Eq. 3 exactly."""

from __future__ import annotations

from fractions import Fraction

import pytest

from apportion.perf import TransformerModel, get_preset, iteration_flops, model_flops, parameter_count
from apportion.perf.transformer import (
    attention_core_forward_flops,
    build_model,
    layer_forward_flops,
    layer_gemms,
    logits_gemm,
    paper_iteration_flops,
    paper_parameter_count,
)

# Table 1 rows: (layers, hidden, heads, global batch)
ROW_1_7B = (24, 2304, 24, 512)
ROW_1T = (128, 25600, 160, 3072)


@pytest.mark.parametrize("layers,hidden,heads,batch", [ROW_1_7B, ROW_1T])
def test_parameter_count_is_eq_2_exactly(layers, hidden, heads, batch):
    model = TransformerModel("row", layers=layers, hidden=hidden, heads=heads, seq=2048, vocab=51200)

    count = parameter_count(model)

    assert isinstance(count, int)
    assert Fraction(count) == paper_parameter_count(layers, hidden, 51200, 2048)


@pytest.mark.parametrize("layers,hidden,heads,batch", [ROW_1_7B, ROW_1T])
def test_full_recompute_flops_are_eq_3_exactly(layers, hidden, heads, batch):
    model = TransformerModel("row", layers=layers, hidden=hidden, heads=heads, seq=2048, vocab=51200)

    assert Fraction(iteration_flops(model, batch, "full")) == paper_iteration_flops(batch, 2048, layers, hidden, 51200)


@pytest.mark.parametrize("layers,hidden,heads,batch", [ROW_1_7B, ROW_1T])
def test_without_recompute_the_factor_is_72(layers, hidden, heads, batch):
    model = TransformerModel("row", layers=layers, hidden=hidden, heads=heads, seq=2048, vocab=51200)
    expected = paper_iteration_flops(batch, 2048, layers, hidden, 51200, recompute=False)

    assert Fraction(iteration_flops(model, batch, "none")) == expected
    assert model_flops(model, batch) == iteration_flops(model, batch, "none")


def test_selective_recompute_adds_the_attention_core_once():
    model = TransformerModel("row", layers=24, hidden=2304, heads=24, seq=2048, vocab=51200)
    extra = iteration_flops(model, 8, "selective") - iteration_flops(model, 8, "none")

    assert extra == 24 * 4 * 8 * 2048 * 2048 * 2304 == model.layers * attention_core_forward_flops(model, 8)


def test_the_1_7b_and_1t_rows_round_to_the_published_sizes():
    small = TransformerModel("r", layers=24, hidden=2304, heads=24, seq=2048, vocab=51200)
    large = TransformerModel("r", layers=128, hidden=25600, heads=160, seq=2048, vocab=51200)

    assert round(parameter_count(small) / 1e9, 1) == 1.7
    assert round(parameter_count(large) / 1e9) == 1008


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_per_rank_gemms_add_up_to_the_layer_flops(tp):
    model = get_preset("gpt3-175b")

    per_rank = sum(g.flops for g in layer_gemms(model, micro_batch=2, tp=tp))

    assert per_rank * tp == layer_forward_flops(model, 2)
    assert logits_gemm(model, 2, tp).flops * tp == 2 * 2 * 2048 * 12288 * 51200


def test_backward_gemms_cost_twice_the_forward():
    for gemm in layer_gemms(get_preset("gpt3-6.7b"), 1, 2):
        dgrad, wgrad = gemm.backward()
        assert dgrad.flops + wgrad.flops == 2 * gemm.flops


def test_presets_have_their_published_sizes():
    assert parameter_count(get_preset("gpt3-175b")) == pytest.approx(174.6e9, rel=1e-3)
    assert parameter_count(get_preset("llama-7b-like")) == pytest.approx(6.738e9, rel=1e-3)
    assert parameter_count(get_preset("llama-70b-like")) == pytest.approx(68.98e9, rel=1e-3)
    assert parameter_count(get_preset("bert-large")) == pytest.approx(335e6, rel=0.01)


def test_explicit_sizes_override_a_preset_and_unknown_presets_list_the_known():
    model = build_model(preset="gpt3-175b", layers=48)
    assert model.layers == 48 and model.hidden == 12288

    with pytest.raises(ValueError, match="known: .*gpt3-175b"):
        build_model(preset="gpt-5")
    with pytest.raises(ValueError, match="--layers"):
        build_model("gpt", hidden=1024)
