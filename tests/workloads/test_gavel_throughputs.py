"""Reading Gavel's throughput files: tuple keys, plain keys, pairs, and clear errors."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from apportion.core.errors import InputError
from apportion.workloads.gavel_throughputs import (
    gavel_kind_name,
    parse_gavel_throughputs,
    read_gavel_throughputs,
)

# A tiny file in Gavel's format: tuple keys ("(job type, GPUs)") and a plain key (one GPU).
SMALL = {
    "v100": {
        "('ResNet-50 (batch size 64)', 1)": {
            "null": 4.5,
            "('A3C', 1)": [2.9, 1.7],
            "('ResNet-50 (batch size 64)', 1)": [0.0, 0.0],
        },
        "('ResNet-50 (batch size 64)', 4)": {"null": 16.0},
        "A3C": {"null": 7.5, "('ResNet-50 (batch size 64)', 1)": [1.7, 2.9]},
    },
    "K80": {
        "('ResNet-50 (batch size 64)', 1)": {"null": 0.75},
        "('ResNet-50 (batch size 128)', 1)": {"null": 0.0},
    },
}


def write(tmp_path: Path, content) -> str:
    path = tmp_path / "throughputs.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def test_small_file_reads_into_a_table(tmp_path):
    table = read_gavel_throughputs(write(tmp_path, SMALL))

    assert table.kinds == ("resnet50/bs64", "a3c", "resnet50/bs128")
    assert table.gpu_types == ("v100", "k80")  # names are lowercased
    assert table.scales == (1, 4)
    v100, k80 = 0, 1
    assert table.steps_per_s[0, v100].tolist() == [4.5, 16.0]
    assert table.steps_per_s[1, v100, 0] == 7.5
    assert math.isnan(table.steps_per_s[1, v100, 1])  # A3C was not measured on 4 GPUs
    assert table.steps_per_s[0, k80, 0] == 0.75
    assert math.isnan(table.steps_per_s[2, k80, 0])  # 0.0 alone: does not fit on a K80
    assert "throughputs.json" in table.sources["a3c"]


def test_pairs_keep_both_rates_and_zero_means_does_not_fit():
    table = parse_gavel_throughputs(SMALL, "small")

    assert table.pair_steps_per_s == {
        ("resnet50/bs64", "a3c", "v100"): (2.9, 1.7),
        ("resnet50/bs64", "resnet50/bs64", "v100"): (0.0, 0.0),
        ("a3c", "resnet50/bs64", "v100"): (1.7, 2.9),
    }


def test_multi_gpu_pair_entries_are_skipped():
    data = {"p100": {"('LM (batch size 5)', 2)": {"null": 76.9, "('LM (batch size 10)', 2)": [0.0, 0.0]}}}

    table = parse_gavel_throughputs(data, "x")

    assert table.scales == (2,)
    assert table.pair_steps_per_s == {}


@pytest.mark.parametrize(
    ("job_type", "kind"),
    [
        ("ResNet-50 (batch size 64)", "resnet50/bs64"),
        ("ResNet-18 (batch size 16)", "resnet18/bs16"),
        ("Transformer (batch size 16)", "transformer/bs16"),
        ("LM (batch size 5)", "lm/bs5"),
        ("Recommendation (batch size 512)", "recommendation/bs512"),
        ("A3C", "a3c"),
        ("CycleGAN", "cyclegan"),
        ("BERT-Large (batch size 8)", "bertlarge/bs8"),
        ("GPT 2", "gpt2"),
    ],
)
def test_gavel_kind_name(job_type, kind):
    assert gavel_kind_name(job_type) == kind


def test_kind_name_needs_a_letter_or_digit():
    with pytest.raises(ValueError):
        gavel_kind_name("(batch size 4)")


def test_not_json_names_the_file_and_line(tmp_path):
    path = write(tmp_path, '{"v100": {\n  "A3C": {"null": 7.5,}\n}}')

    with pytest.raises(InputError) as err:
        read_gavel_throughputs(path)

    assert err.value.source == path and err.value.line == 2
    assert str(err.value).startswith(f"{path}:2: not valid JSON")


def test_a_string_throughput_names_the_key_path(tmp_path):
    data = {"v100": {"('ResNet-50 (batch size 64)', 1)": {"null": "fast"}}}

    with pytest.raises(InputError) as err:
        read_gavel_throughputs(write(tmp_path, data))

    assert err.value.field == "v100 → ('ResNet-50 (batch size 64)', 1) → null"
    assert 'expected a number of steps/s, got "fast"' in str(err.value)


@pytest.mark.parametrize(
    "key",
    [
        "('ResNet-50 (batch size 64)', )",
        "('ResNet-50 (batch size 64)', 0)",
        "('ResNet-50 (batch size 64)', 'two')",
        "('ResNet-50 (batch size 64)', __import__('os'))",
        "(",
    ],
)
def test_a_bad_tuple_key_is_an_input_error(key):
    with pytest.raises(InputError) as err:
        parse_gavel_throughputs({"v100": {key: {"null": 1.0}}}, "bad.json")

    assert err.value.source == "bad.json"
    assert err.value.field == f"v100 → {key}"
    assert "cannot read job key" in err.value.message


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ([1, 2], None, "expected a JSON object of GPU types"),
        ({"v100": [1]}, "v100", "expected an object of jobs"),
        ({"v100": {"A3C": 3.0}}, "v100 → A3C", "expected an object"),
        ({"v100": {"A3C": {"null": -1}}}, "v100 → A3C → null", "finite number >= 0"),
        ({"v100": {"A3C": {"null": True}}}, "v100 → A3C → null", "expected a number"),
        ({"v100": {"A3C": {"CycleGAN": [1.0]}}}, "v100 → A3C → CycleGAN", "expected [this, other]"),
        ({"v100": {"A3C": {"null": 1}, "('A3C', 1)": {"null": 2}}}, "v100 → ('A3C', 1)", "appears twice"),
        ({"v100": {}, "V100": {}}, "V100", "appears twice"),
        ({}, None, "no throughputs"),
    ],
)
def test_other_malformed_input(data, field, message):
    with pytest.raises(InputError) as err:
        parse_gavel_throughputs(data, "t.json")

    assert err.value.field == field
    assert message in err.value.message


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="no such throughput file"):
        read_gavel_throughputs(tmp_path / "absent.json")


def test_shipped_measurements_are_gavel_format():
    """The raw data the catalog is built from parses with this reader (as a user's file would)."""
    data = Path(__file__).resolve().parents[2] / "apportion" / "workloads" / "data" / "gavel_measured.json"
    table = parse_gavel_throughputs(json.loads(data.read_text())["throughputs"], str(data))

    assert table.gpu_types == ("k80", "p100", "v100")
    assert table.scales == (1, 2, 4, 8)
    assert len(table.kinds) == 26
    assert len(table.pair_steps_per_s) == 26 * 26 * 3
    rate = table.steps_per_s[table.kind_index("resnet50/bs64"), 2, 0]
    np.testing.assert_allclose(rate, 4.525762041224065)
