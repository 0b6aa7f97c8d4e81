"""Model-state bytes by precision and ZeRO stage; activation bytes per Korthikanti et al. (Table 2)."""

from __future__ import annotations

import pytest

from apportion.perf import Layout, TransformerModel, in_flight_microbatches, layer_activation_bytes, model_state_bytes, predict

P = 1_000_000


def test_mixed_precision_adam_is_16_bytes_per_parameter_without_zero():
    states = model_state_bytes(P, "bf16")

    assert (states.weights, states.gradients, states.optimizer) == (2 * P, 2 * P, 12 * P)
    assert states.total == 16 * P
    assert model_state_bytes(P, "fp32").total == 16 * P


@pytest.mark.parametrize("zero,expected", [
    (1, (2 * P, 2 * P, 12 * P / 8)),
    (2, (2 * P, 2 * P / 8, 12 * P / 8)),
    (3, (2 * P / 8, 2 * P / 8, 12 * P / 8)),
])
def test_zero_stages_partition_over_the_data_parallel_size(zero, expected):
    states = model_state_bytes(P, "fp16", zero=zero, dp=8)

    assert (states.weights, states.gradients, states.optimizer) == pytest.approx(expected)


def test_offload_moves_the_optimizer_state_to_the_host():
    states = model_state_bytes(P, "bf16", zero=2, dp=4, offload=True)

    assert states.optimizer == 0 and states.gradients == 0 and states.weights == 2 * P


# a GPT-3 175B-like layer: s = 2048, b = 1, h = 12288, a = 96, t = 8
GPT = TransformerModel("g", layers=96, hidden=12288, heads=96, seq=2048, vocab=51200)
s, b, h, a, t = 2048, 1, 12288, 96, 8
sbh = s * b * h


def test_activation_bytes_follow_korthikanti_table_2():
    assert layer_activation_bytes(GPT, b, 1) == pytest.approx(sbh * (34 + 5 * a * s / h))
    assert layer_activation_bytes(GPT, b, t) == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    assert layer_activation_bytes(GPT, b, t, sequence_parallel=True) == pytest.approx(
        sbh * (34 / t + 5 * a * s / (h * t)))
    assert layer_activation_bytes(GPT, b, t, recompute="selective") == pytest.approx(sbh * (10 + 24 / t))
    assert layer_activation_bytes(GPT, b, t, recompute="selective", sequence_parallel=True) == pytest.approx(
        sbh * 34 / t)
    assert layer_activation_bytes(GPT, b, t, recompute="full") == 2 * sbh


def test_the_korthikanti_example_by_hand():
    # sbh(10 + 24/8 + 5·96·2048/(12288·8)) = 25,165,824 · (13 + 10) bytes
    assert layer_activation_bytes(GPT, 1, 8) == 25_165_824 * 23


def test_in_flight_micro_batches_per_schedule():
    assert in_flight_microbatches("1f1b", pp=8, microbatches=64) == 8
    assert in_flight_microbatches("gpipe", pp=8, microbatches=64) == 64
    assert in_flight_microbatches("interleaved", pp=8, microbatches=64, virtual_stages=2) == pytest.approx(
        8 * (1 + 7 / 16))
    assert in_flight_microbatches("1f1b", pp=1, microbatches=64) == 1


def test_prediction_reports_the_parts_of_a_small_model_by_hand():
    model = TransformerModel("tiny", layers=4, hidden=256, heads=4, seq=128, vocab=1024)
    params = 4 * (12 * 256 * 256 + 13 * 256) + (1024 + 128) * 256
    layout = Layout(tp=1, pp=1, dp=2, micro_batch=2, global_batch=8, recompute="full", zero=1, precision="bf16")

    memory = predict(model, layout, "a100-40gb").memory

    assert memory.weights == 2 * params
    assert memory.gradients == 2 * params
    assert memory.optimizer == 12 * params / 2
    assert memory.activations > 4 * 2 * 128 * 2 * 256  # at least the stored layer inputs
