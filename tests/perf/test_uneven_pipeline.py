"""Pipelines whose stages hold different numbers of layers, as BLOOM-176B and Llama 3 405B ran."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from apportion.cli import app
from apportion.perf import Layout, get_accelerator, get_preset, plan, predict
from apportion.perf.parallel import format_stage_layers, layout_problems, parse_stage_layers
from apportion.perf.step import balanced_stage_layers, layer_cost


def test_the_balanced_split_takes_layers_off_the_heavier_end_stage():
    # a layer takes 1 s; the embedding adds 0.2 s to the first stage, the loss 1.5 s to the last:
    # [4, 4, 2] runs its slowest stage in 4.2 s where [3, 4, 3] would need 4.5 s
    assert balanced_stage_layers(10, 3, 1.0, 0.2, 1.5) == (4, 4, 2)
    # no extras: as even as the count allows, the spare layers away from the first stage
    assert balanced_stage_layers(10, 4, 1.0, 0.0, 0.0) == (2, 3, 3, 2)
    with pytest.raises(ValueError, match="fewer than the pipeline stages"):
        balanced_stage_layers(3, 4, 1.0, 0.0, 0.0)


def test_llama3_405b_on_16_stages_takes_one_layer_off_each_end_stage():
    # "The Llama 3 Herd of Models" (2024), §3.3.2: one layer fewer on the first and the last stage
    model = get_preset("llama3-405b-like")
    layout = Layout(tp=8, pp=16, dp=128, micro_batch=1, global_batch=2048, recompute="full",
                    sequence_parallel=True, zero=1)

    one = predict(model, layout, "h100")

    assert one.layout.stage_layers == (7,) + (8,) * 14 + (7,)


def test_bloom_176b_plans_70_layers_on_12_stages():
    result = plan(get_preset("bloom-176b"), gpus=384, accelerator="a100-80gb", global_batch=2048, tp=8, pp=12,
                  top=3)

    assert result.best, result.rejection_summary()
    for p in result.best:
        counts = p.layout.stage_layers
        assert len(counts) == 12 and sum(counts) == 70
        # the last stage also runs the 250,880-word output layer and the loss: it gets the fewest layers
        assert counts[-1] == min(counts) < max(counts[1:-1])


def test_the_slowest_stage_sets_the_pace():
    model, acc = get_preset("gpt3-1.3b"), get_accelerator("a100-80gb")
    base = dict(tp=1, pp=4, dp=2, micro_batch=2, global_batch=64)
    m = 64 // (2 * 2)
    per_layer = layer_cost(model, acc, 2, 1, False, "bf16")
    c = per_layer.forward + per_layer.backward

    even = predict(model, Layout(**base), acc)
    heavy_second = predict(model, Layout(**base, stage_layers=(5, 9, 5, 5)), acc)
    heavy_third = predict(model, Layout(**base, stage_layers=(5, 5, 9, 5)), acc)

    # m micro-batches through a stage of 9 layers, nothing else in the compute (the last stage's
    # output layer and loss weigh about two layers here: 5 + 2 < 9)
    assert heavy_second.breakdown_s["compute"] == pytest.approx(m * 9 * c)
    assert heavy_second.step_time_s > even.step_time_s
    assert heavy_second.step_time_s == pytest.approx(heavy_third.step_time_s)
    # the same 9 layers earlier in a 1F1B pipeline hold one more micro-batch in flight
    assert heavy_second.memory.activations > heavy_third.memory.activations


def test_more_layers_on_the_first_stage_need_more_memory():
    model = get_preset("gpt3-1.3b")
    base = dict(tp=1, pp=4, dp=2, micro_batch=2, global_batch=64)

    front = predict(model, Layout(**base, stage_layers=(8, 6, 5, 5)), "a100-80gb")
    back = predict(model, Layout(**base, stage_layers=(5, 5, 6, 8)), "a100-80gb")

    assert front.memory.total > back.memory.total


def test_a_split_must_match_the_pipeline_and_the_model():
    model = get_preset("gpt3-1.3b")  # 24 layers

    def problems(**kw):
        return " ".join(layout_problems(model, Layout(tp=1, dp=2, global_batch=64, **kw)))

    assert "name 3 stages for a pipeline of 4" in problems(pp=4, stage_layers=(8, 8, 8))
    assert "add up to 23, not the model's 24 layers" in problems(pp=4, stage_layers=(6, 6, 6, 5))
    assert "at least one layer" in problems(pp=4, stage_layers=(12, 12, 0, 0))
    assert "divisible by 2" in problems(pp=4, schedule="interleaved", virtual_stages=2,
                                        stage_layers=(5, 7, 6, 6))
    assert problems(pp=5) == ""  # 24 layers on 5 stages: a balanced split, no refusal
    assert "fewer than the pipeline stages" in problems(pp=32)


def test_stage_layers_are_written_and_read_as_runs():
    assert format_stage_layers((7,) + (8,) * 14 + (7,)) == "7,8x14,7"
    assert parse_stage_layers("7,8x14,7") == (7,) + (8,) * 14 + (7,)
    with pytest.raises(ValueError, match="'8y2'"):
        parse_stage_layers("7,8y2")


def test_plan_takes_a_split_and_shows_the_one_it_chose():
    runner = CliRunner()
    shown = runner.invoke(app, ["plan", "--preset", "bloom-176b", "--gpus", "384", "--global-batch", "2048",
                                "--tp", "8", "--pp", "12", "--micro-batch", "2", "--recompute", "selective",
                                "--sequence-parallel", "--zero", "1"])
    pinned = runner.invoke(app, ["plan", "--preset", "bloom-176b", "--gpus", "384", "--global-batch", "2048",
                                 "--tp", "8", "--stage-layers", "5,6x10,5", "--micro-batch", "2", "--json"])
    bad = runner.invoke(app, ["plan", "--preset", "bloom-176b", "--gpus", "384", "--stage-layers", "5,six"])

    assert shown.exit_code == 0, shown.output
    assert "stages=6x11,4" in shown.stdout
    assert pinned.exit_code == 0, pinned.output
    assert '"stage_layers": [\n      5,' in pinned.stdout
    assert bad.exit_code == 2 and "--stage-layers" in bad.output and "'six'" in bad.output
