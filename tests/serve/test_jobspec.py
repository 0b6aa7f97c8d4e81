"""Job files: what is accepted, and a malformed one named by file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from apportion.core.errors import InputError
from apportion.serve.jobs.jobspec import load_job_file, spec_from_mapping

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def write(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_full_job_file(tmp_path):
    path = write(tmp_path, """\
name: resnet
command: python train.py --lr 0.1
gpus: 2
gpu_types: [V100, a100]
total_steps: 500
priority: 2
queue: research
user: ann
checkpoint_dir: ckpt
env: {LR: 0.1, DEBUG: true}
kind: resnet50/bs64
""")
    spec = load_job_file(path, cwd=tmp_path)
    assert spec.name == "resnet" and spec.command == "python train.py --lr 0.1"
    assert spec.gpus == 2 and spec.gpu_types == ("v100", "a100") and spec.total_steps == 500
    assert spec.priority == 2.0 and spec.queue == "research" and spec.user == "ann"
    assert spec.env == {"LR": "0.1", "DEBUG": "1"}
    assert spec.throughput_kind == "resnet50/bs64"
    assert spec.workdir == str(tmp_path.resolve())
    assert spec.checkpoint_dir == str(tmp_path.resolve() / "ckpt")


def test_defaults_and_epochs(tmp_path):
    spec = load_job_file(write(tmp_path, "name: small\ncommand: [python, t.py]\nepochs: 3\nsteps_per_epoch: 40\n"),
                         cwd="/somewhere")
    assert spec.total_steps == 120 and spec.gpus == 1 and spec.gpu_types is None and spec.priority == 1.0
    assert spec.command == ["python", "t.py"] and spec.throughput_kind == "small"
    assert spec.workdir == "/somewhere" and spec.checkpoint_dir is None and spec.user is None


@pytest.mark.parametrize("example", ["cnn.yaml", "lm.yaml"])
def test_the_examples_are_valid(example):
    spec = load_job_file(EXAMPLES / example)
    assert spec.total_steps > 0 and spec.gpus == 1 and "cpu" in spec.gpu_types
    assert spec.workdir == str(EXAMPLES.parent)  # `workdir: ..`: the repository root, wherever submit runs


@pytest.mark.parametrize(
    "text, field, line, words",
    [
        ("command: python t.py\ntotal_steps: 10\n", "name", None, "is required"),
        ("name: a\ntotal_steps: 10\n", "command", None, "is required"),
        ("name: a\ncommand: x\n", "total_steps", None, "is required"),
        ("name: a\ncommand: x\ntotal_steps: 10\ngpus: 0\n", "gpus", 4, "must be a whole number from 1 to 1,048,576, got 0"),
        ("name: a\ncommand: x\ntotal_steps: ten\n", "total_steps", 3, "must be a whole number from 1 to 9,007,199,254,740,992, got 'ten' (a string)"),
        ("name: a\ncommand: x\ntotal_steps: 10\ngpus: 1.0e+23\n", "gpus", 4, "must be a whole number from 1 to 1,048,576, got 1e+23"),
        ("name: a\ncommand: x\ntotal_steps: 10\ngpus: 2000000\n", "gpus", 4, "must be a whole number from 1 to 1,048,576, got 2000000"),
        ("name: a\ncommand: x\ntotal_steps: 1.0e+16\n", "total_steps", 3, "from 1 to 9,007,199,254,740,992, got 1e+16"),
        ("name: a\ncommand: x\ntotal_steps: .nan\n", "total_steps", 3, "from 1 to 9,007,199,254,740,992, got nan"),
        ("name: a\ncommand: x\nepochs: 100000000\nsteps_per_epoch: 100000000\n", "steps_per_epoch", 4,
         "epochs × steps_per_epoch is 1e+16, more than 9,007,199,254,740,992 (2**53) steps"),
        ("name: a\ncommand: x\ntotal_steps: 10\nepochs: 2\n", "total_steps", 3, "not both"),
        ("name: a\ncommand: x\nepochs: 2\n", "steps_per_epoch", None, "is required with epochs"),
        ("name: a\ncommand: x\ntotal_steps: 10\npriority: -1\n", "priority", 4, "must be a number from 0 to 1000, got -1"),
        ("name: a\ncommand: x\ntotal_steps: 10\ngpu: 2\n", "gpu", 4, "unknown field"),
        ("name: a\ncommand: x\ntotal_steps: 10\nenv:\n  OK: 1\n  APPORTION_JOB_ID: 3\n", "env.APPORTION_JOB_ID", 6, "set by the server"),
        ("name: a\ncommand: [python, {x: 1}]\ntotal_steps: 10\n", "command[1]", 2, "must be a string"),
        ("name: a\ncommand: x\ntotal_steps: 10\ngpu_types: 7\n", "gpu_types", 4, "list of GPU types"),
        ("name: a\ncommand: x\ntotal_steps: 1e300\n", "total_steps", 3, "from 1 to 9,007,199,254,740,992, got 1e+300"),
        ("name: a\ncommand: x\ntotal_steps: 10\npriority: 1e9\n", "priority", 4, "from 0 to 1000, got 1e+09"),
        ("name: a\ncommand: x\ntotal_steps: 10\nuser: " + "u" * 300 + "\n", "user", 4,
         "must be at most 256 characters, got 300"),
        ("name: \"a\\u001b[2Jb\"\ncommand: x\ntotal_steps: 10\n", "name", 1, "without control characters, got '\\x1b'"),
        ("name: a\ncommand: \"x\\0y\"\ntotal_steps: 10\n", "command", 2, "must not contain a NUL"),
        ("name: a\ncommand: [" + ", ".join(["x"] * 1025) + "]\ntotal_steps: 10\n", "command", 2,
         "at most 1,024 arguments, got 1,025"),
        ("name: a\ncommand: x\ntotal_steps: 10\nenv: {A: " + "v" * 20000 + "}\n", "env.A", 4,
         "at most 16,384 characters, got 20,000"),
        ("name: a\ncommand: x\ntotal_steps: 10\nwarm_start: maybe\n", "warm_start", 4,
         "must be true or false, got 'maybe'"),
        ("name: a\ncommand: x\ntotal_steps: 10\ncpu_speed: 1-0.3 4:1\n", "cpu_speed", 4,
         "'1-0.3' is not CORES:SPEED (e.g. '1:0.3 2:0.66 4:1')"),
        ("name: a\ncommand: x\ntotal_steps: 10\ncpu_speed: {1: 0, 4: 0}\n", "cpu_speed", 4,
         "the speed is 0 at every core count"),
        ("name: a\ncommand: x\ntotal_steps: 10\ncpu_speed: {0: 1}\n", "cpu_speed", 4,
         "cores per GPU must be a number > 0"),
        ("name: a\ncommand: x\ntotal_steps: 10\ncpu_speed: [1, 2]\n", "cpu_speed", 4,
         "must be CORES:SPEED pairs such as '1:0.3 2:0.66 4:1'"),
    ],
)
def test_a_malformed_file_names_its_field_and_line(tmp_path, text, field, line, words):
    path = write(tmp_path, text)
    with pytest.raises(InputError) as err:
        load_job_file(path)
    assert err.value.field == field
    assert err.value.line == line
    assert words in str(err.value)
    assert str(err.value).startswith(str(path))


def test_yaml_syntax_errors_and_missing_files(tmp_path):
    with pytest.raises(InputError, match=r"job.yaml:3: YAML syntax error"):
        load_job_file(write(tmp_path, "name: a\ncommand: [unclosed\n"))
    with pytest.raises(InputError, match="no such job file"):
        load_job_file(tmp_path / "nope.yaml")
    with pytest.raises(InputError, match="must be a mapping"):
        load_job_file(write(tmp_path, "- a\n- b\n", "list.yaml"))


def test_a_request_body_is_checked_the_same_way():
    with pytest.raises(InputError) as err:
        spec_from_mapping({"name": "a", "command": "x", "total_steps": 0}, "request")
    assert str(err.value) == "request: field 'total_steps': must be a whole number from 1 to 9,007,199,254,740,992, got 0"


def test_numbers_in_yaml_are_read_as_yaml_1_2_reads_them(tmp_path):
    spec = load_job_file(write(tmp_path, "name: a\ncommand: x\ntotal_steps: 1e3\npriority: 2.5e-1\n"))
    assert spec.total_steps == 1000 and spec.priority == 0.25


def test_booleans_in_yaml_are_only_true_and_false_as_in_yaml_1_2(tmp_path):
    spec = load_job_file(write(tmp_path, "name: yes\ncommand: [echo, on, n]\ntotal_steps: 3\nqueue: off\n"
                                         "user: No\nenv: {DEBUG: yes}\nwarm_start: false\ncheckpoint_every: off\n"))
    assert (spec.name, spec.command, spec.queue, spec.user) == ("yes", ["echo", "on", "n"], "off", "No")
    assert spec.env == {"DEBUG": "yes"} and spec.warm_start is False and spec.checkpoint_every == "off"
    with pytest.raises(InputError, match="must be true or false, got 'yes'") as err:
        load_job_file(write(tmp_path, "name: a\ncommand: x\ntotal_steps: 3\nwarm_start: yes\n"))
    assert (err.value.field, err.value.line) == ("warm_start", 4)


@pytest.mark.parametrize("text, line, key, first", [
    ("name: a\ncommand: x\ntotal_steps: 3\nname: b\n", 4, "name", 1),
    ("name: a\ncommand: x\ntotal_steps: 3\nenv:\n  LR: '0.1'\n  BATCH: '8'\n  LR: '0.2'\n", 7, "LR", 5),
    ("name: a\ncommand: x\ntotal_steps: 3\nlayout: {tp: 1, tp: 2}\n", 4, "tp", 4),
])
def test_a_key_given_twice_is_refused_naming_the_file_line_and_key(tmp_path, text, line, key, first):
    path = write(tmp_path, text)
    with pytest.raises(InputError) as err:
        load_job_file(path)
    assert str(err.value) == f"{path}:{line}: duplicate key '{key}' (first on line {first})"


def test_rich_markup_in_names_is_kept_as_text(tmp_path):
    spec = load_job_file(write(tmp_path, "name: '[blink]cnn[/blink]'\ncommand: x\ntotal_steps: 3\nuser: '[red]root'\n"))
    assert spec.name == "[blink]cnn[/blink]" and spec.user == "[red]root"  # escaped where printed


MODEL_JOB = "name: gpt\ncommand: python train_gpt.py\ntotal_steps: 100\nmodel: gpt3-1.3b\nglobal_batch: 64\n"


def test_a_job_may_name_a_model_and_layout_instead_of_a_kind(tmp_path):
    as_text = load_job_file(write(tmp_path, MODEL_JOB + "gpus: 2\nlayout: tp=2 pp=1 mb=4\n", "text.yaml"))
    as_mapping = load_job_file(write(tmp_path, MODEL_JOB + "gpus: 2\nlayout: {mb: 4, tp: 2, pp: 1}\n", "map.yaml"))
    planned = load_job_file(write(tmp_path, MODEL_JOB, "auto.yaml"))

    assert as_text.throughput_kind == as_mapping.throughput_kind == "gpt3-1.3b gb=64 tp=2 pp=1 mb=4"
    assert as_text.layout == "tp=2 pp=1 mb=4" and as_text.global_batch == 64
    assert planned.throughput_kind == "gpt3-1.3b gb=64 auto"
    assert spec_from_mapping(as_text.to_dict(), "request") == as_text  # the body submit sends reads back the same


@pytest.mark.parametrize("extra, field, line, words", [
    ("layout: tp=2 pq=1\n", "layout", 6, "unknown layout key 'pq'"),
    ("layout: tp=two\n", "layout", 6, "invalid literal"),
    ("layout: [tp, 2]\n", "layout", 6, "must be text such as 'tp=2 pp=1 mb=4' or a mapping"),
    ("kind: resnet50/bs64\n", "model", 4, "either a kind or a model, not both"),
    ("layout: tp=0 pp=-1\n", "layout", 6, "tensor-parallel size must be a positive integer, got 0"),
    ("layout: {tp: 1, mb: 0}\n", "layout", 6, "micro-batch size must be a positive integer, got 0"),
    ("layout: tp=2\n", "layout", 6, "tp × pp = 2 does not divide the job's 1 GPU(s)"),
    ("layout: tp=3\ngpus: 3\n", "layout", 6, "attention heads (16) are not divisible by the tensor-parallel size 3"),
    ("layout: mb=3\n", "layout", 6, "global batch 64 is not divisible by micro-batch × data-parallel size"),
    ("layout: pp=2 schedule=gpipe v=2\ngpus: 2\n", "layout", 6, "virtual stages > 1 need the interleaved"),
])
def test_a_bad_model_job_names_its_field_and_line(tmp_path, extra, field, line, words):
    with pytest.raises(InputError) as err:
        load_job_file(write(tmp_path, MODEL_JOB + extra))
    assert (err.value.field, err.value.line) == (field, line) and words in str(err.value)


def test_a_model_job_needs_a_known_preset_and_a_batch(tmp_path):
    with pytest.raises(InputError, match="unknown model preset 'gpt5'") as err:
        load_job_file(write(tmp_path, MODEL_JOB.replace("gpt3-1.3b", "gpt5")))
    assert err.value.field == "model" and err.value.line == 4
    with pytest.raises(InputError, match="is required with model") as err:
        load_job_file(write(tmp_path, MODEL_JOB.replace("global_batch: 64\n", "")))
    assert err.value.field == "global_batch"
    with pytest.raises(InputError, match="give the model too") as err:
        load_job_file(write(tmp_path, "name: a\ncommand: x\ntotal_steps: 10\nlayout: tp=2\n"))
    assert err.value.field == "layout" and err.value.line == 4


@pytest.mark.parametrize("elastic, field, message", [
    ({"max_gpus": 2}, "elastic.batch_size", "is required for an elastic job"),
    ({"batch_size": 32}, "elastic.max_gpus", "is required for an elastic job"),
    ({"min_gpus": 4, "max_gpus": 2, "batch_size": 32}, "elastic.max_gpus", r"must be at least min_gpus \(4\)"),
    ({"max_gpus": 8, "batch_size": 4}, "elastic.max_gpus", "a batch of 4 cannot give 8 replicas"),
    ({"max_gpus": 2, "batch_size": 32, "init_batch_size": 64}, "elastic.init_batch_size", "M0 must be at most"),
    ({"max_gpus": 2, "batch_size": 32, "lr_rule": "linear"}, "elastic.lr_rule", "must be one of sqrt, adascale, none"),
    ({"max_gpus": 2, "batch_size": 32, "model": "gpt9"}, "elastic.model", "must be a built-in elastic kind"),
    ({"max_gpus": 2, "batch_size": 32, "min_local_batch": 8, "max_local_batch": 4}, "elastic.max_local_batch",
     r"must be at least min_local_batch \(8\)"),
    ({"max_gpus": 2, "batch_size": 32, "replicas": 2}, "elastic.replicas", "unknown field"),
    ([2, 32], "elastic", "must be a mapping"),
])
def test_a_bad_elastic_field_is_named_with_its_line(tmp_path, elastic, field, message):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"name": "e", "command": "python t.py", "total_steps": 10, "elastic": elastic},
                                   sort_keys=False))
    with pytest.raises(InputError, match=message) as caught:
        load_job_file(path)
    assert caught.value.field == field
    assert caught.value.line is not None


def test_an_elastic_jobs_own_size_lies_within_its_limits():
    with pytest.raises(InputError, match="own size must lie within") as caught:
        spec_from_mapping({"name": "e", "command": "x", "total_steps": 5, "gpus": 4,
                           "elastic": {"min_gpus": 1, "max_gpus": 2, "batch_size": 8}}, "job.yaml")
    assert caught.value.field == "gpus"
    spec = spec_from_mapping({"name": "e", "command": "x", "total_steps": 5,
                              "elastic": {"min_gpus": 2, "max_gpus": 4, "batch_size": 8}}, "job.yaml")
    assert spec.gpus == 2 and spec.elastic.m0 == 8  # by default its own size is its fewest, M0 its batch


def test_the_example_elastic_job_file_reads():
    spec = load_job_file(Path(__file__).resolve().parents[2] / "examples" / "elastic.yaml")
    assert (spec.elastic.min_gpus, spec.elastic.max_gpus, spec.elastic.batch_size) == (1, 2, 32)


def test_a_job_may_ask_for_a_cold_start(tmp_path):
    cold = load_job_file(write(tmp_path, "name: a\ncommand: python t.py\ntotal_steps: 10\nwarm_start: false\n"))
    default = load_job_file(write(tmp_path, "name: a\ncommand: python t.py\ntotal_steps: 10\n", "b.yaml"))
    assert cold.warm_start is False and cold.to_dict()["warm_start"] is False
    assert default.warm_start is None and "warm_start" not in default.to_dict()  # the server's setting


def test_a_jobs_cpu_speed_is_read_as_a_traces_column_or_a_mapping(tmp_path):
    """``cpu_speed``: the job's speed at a few cores per GPU (only the ratios count), as the trace's column
    writes it or as a mapping; stored as the column's text, its core counts ascending."""
    text = "name: a\ncommand: x\ntotal_steps: 10\ncpu_speed: {4: 1, 1: 0.3, 2: 0.66}\n"
    assert load_job_file(write(tmp_path, text)).cpu_speed == "1:0.3 2:0.66 4:1"
    assert spec_from_mapping({"name": "a", "command": "x", "total_steps": 10, "cpu_speed": "2:1 1:0.5"},
                             "body").cpu_speed == "1:0.5 2:1"
