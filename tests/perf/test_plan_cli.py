"""`apportion plan`: a table of the best layouts, one layout's numbers as JSON, one-line errors."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from apportion.cli import app

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, ["plan", *args])


def test_fixed_layout_json_has_the_numbers():
    result = run("--preset", "gpt3-175b", "--gpus", "1024", "--global-batch", "1536", "--tp", "8", "--pp", "8",
                 "--micro-batch", "1", "--recompute", "full", "--schedule", "interleaved", "--virtual-stages", "2",
                 "--json")

    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    for key in ("step_time_s", "tflops_per_gpu", "memory_gb_per_gpu", "fits", "cost_usd", "training_time_s"):
        assert key in data
    assert set(data["memory_gb_per_gpu"]) >= {"weights", "gradients", "optimizer", "activations", "total"}
    assert data["fits"] is True
    assert data["layout"]["dp"] == 16 and data["layout"]["recompute"] == "full"
    assert 0 < data["tflops_per_gpu"] < 312


def test_search_prints_a_table_of_the_best_layouts():
    result = run("--preset", "gpt3-1.3b", "--gpus", "8", "--gpu-type", "a100-40gb", "--global-batch", "64",
                 "--top", "3")

    assert result.exit_code == 0, result.output
    assert "best 3 of" in result.stdout and "TFLOP/s" in result.stdout


def test_search_json_lists_layouts_fastest_first():
    result = run("--model", "gpt", "--layers", "24", "--hidden", "2048", "--heads", "16", "--gpus", "8",
                 "--global-batch", "64", "--top", "2", "--json")

    assert result.exit_code == 0, result.output
    layouts = json.loads(result.stdout)["layouts"]
    assert len(layouts) == 2 and layouts[0]["step_time_s"] <= layouts[1]["step_time_s"]


def _one_line_error(result, *fragments):
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    for fragment in fragments:
        assert fragment in result.output


def test_heads_not_divisible_is_one_line_naming_the_constraint():
    result = run("--preset", "gpt3-175b", "--gpus", "56", "--tp", "7", "--pp", "1", "--micro-batch", "1",
                 "--global-batch", "56")
    _one_line_error(result, "heads", "tensor-parallel")


def test_searching_with_an_impossible_pin_is_one_line_too():
    result = run("--preset", "gpt3-175b", "--gpus", "56", "--tp", "7", "--global-batch", "56")
    _one_line_error(result, "heads", "tensor-parallel")


def test_unknown_gpu_type_lists_the_known_ones():
    result = run("--preset", "gpt3-175b", "--gpu-type", "tpu-v9")
    _one_line_error(result, "unknown GPU type 'tpu-v9'", "a100-80gb", "h100")


def test_batch_not_divisible_and_unknown_preset():
    _one_line_error(run("--preset", "gpt3-175b", "--gpus", "64", "--tp", "8", "--pp", "1", "--micro-batch", "3",
                        "--global-batch", "64"), "micro-batch × data-parallel")
    _one_line_error(run("--preset", "gpt-5"), "unknown model preset", "gpt3-175b")


def test_the_rejected_line_accounts_for_every_rejected_layout():
    result = run("--preset", "gpt3-175b", "--gpus", "64", "--top", "1")

    assert result.exit_code == 0, result.output
    line = next(line for line in result.stdout.splitlines() if line.startswith("rejected "))
    total = int(line.split(":")[0].removeprefix("rejected "))
    shown = [int(part.split(" × ")[0]) for part in line.split(": ", 1)[1].split("; ") if " × " in part]
    more = int(line.split("… and ")[1].split(" more")[0])
    assert len(shown) == 3 and sum(shown) + more == total
    assert line.endswith("other reasons)")
