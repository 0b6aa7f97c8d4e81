"""Layouts that cannot be split name the constraint; communication times by hand."""

from __future__ import annotations

import pytest

from apportion.perf import Layout, check_layout, get_accelerator, get_preset, predict
from apportion.perf.parallel import Group, allreduce_time, bubble_fraction, dp_group, tp_group

GPT = get_preset("gpt3-175b")  # 96 layers, 96 heads


def test_heads_not_divisible_by_tensor_parallel_size():
    with pytest.raises(ValueError, match="heads") as err:
        check_layout(GPT, Layout(tp=7, pp=1, dp=1, global_batch=8))
    assert "tensor-parallel" in str(err.value)


def test_layers_not_divisible_by_pipeline_stages():
    check_layout(GPT, Layout(tp=8, pp=7, dp=1, global_batch=8))  # an uneven split: allowed
    with pytest.raises(ValueError, match=r"layers \(96\) are fewer than the pipeline stages \(97\)"):
        check_layout(GPT, Layout(tp=1, pp=97, dp=1, global_batch=8))
    with pytest.raises(ValueError, match="virtual stages"):
        check_layout(GPT, Layout(tp=8, pp=8, dp=1, global_batch=64, schedule="interleaved", virtual_stages=5))


def test_batch_not_divisible_by_micro_batch_times_data_parallel_size():
    with pytest.raises(ValueError, match=r"micro-batch × data-parallel size \(3 × 4 = 12\)"):
        check_layout(GPT, Layout(tp=8, pp=1, dp=4, micro_batch=3, global_batch=64))


def test_zero_2_with_pipelines_and_offload_without_zero_are_refused():
    with pytest.raises(ValueError, match="pipeline"):
        check_layout(GPT, Layout(tp=8, pp=2, dp=2, global_batch=64, zero=2))
    with pytest.raises(ValueError, match="ZeRO"):
        check_layout(GPT, Layout(tp=8, pp=1, dp=2, global_batch=64, offload=True))


def test_unknown_gpu_type_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown GPU type 'tpu-v9'.*a100-80gb.*h100"):
        predict(GPT, Layout(tp=8, pp=8, dp=1, global_batch=8), "tpu-v9")


def test_groups_lie_where_megatron_puts_them():
    acc = get_accelerator("a100-80gb")
    layout = Layout(tp=2, pp=2, dp=8, global_batch=64)

    assert tp_group(layout, acc) == Group(2, 2)
    assert dp_group(layout, acc) == Group(8, 4)  # 8/2 = 4 data-parallel ranks per node, 2 nodes
    assert dp_group(Layout(tp=8, dp=4, global_batch=8), acc) == Group(4, 1)


def test_ring_allreduce_inside_a_node_by_hand():
    from apportion.perf.parallel import ALPHA_INTRA_S, NCCL_INTRA_EFFICIENCY

    acc = get_accelerator("a100-80gb")
    nbytes = 1e9

    expected = 2 * 7 / 8 * nbytes / (NCCL_INTRA_EFFICIENCY * acc.intra_node_bandwidth) + 14 * ALPHA_INTRA_S
    assert allreduce_time(nbytes, Group(8, 8), acc) == pytest.approx(expected)
    assert allreduce_time(nbytes, Group(1, 1), acc) == 0


def test_bubble_fractions():
    assert bubble_fraction("1f1b", 8, 64) == pytest.approx(7 / 64)
    assert bubble_fraction("gpipe", 8, 64) == pytest.approx(7 / 64)
    assert bubble_fraction("interleaved", 8, 64, 4) == pytest.approx(7 / 256)
    assert bubble_fraction("none", 1, 64) == 0


def test_interleaving_shortens_the_bubble_and_more_recompute_costs_time():
    base = dict(tp=8, pp=8, dp=1, micro_batch=1, global_batch=16, recompute="full")
    plain = predict(GPT, Layout(**base, schedule="1f1b"), "a100-80gb")
    interleaved = predict(GPT, Layout(**base, schedule="interleaved", virtual_stages=4), "a100-80gb")
    selective = predict(GPT, Layout(**{**base, "recompute": "selective"}, schedule="1f1b"), "a100-80gb")

    assert interleaved.breakdown_s["pipeline_bubble"] < plain.breakdown_s["pipeline_bubble"]
    assert selective.step_time_s < plain.step_time_s
    assert selective.memory.activations > plain.memory.activations
