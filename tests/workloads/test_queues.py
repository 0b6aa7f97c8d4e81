"""Queues YAML files for hierarchical fairness: what loads, and errors naming line and field."""

from pathlib import Path

import numpy as np
import pytest

from apportion.core.errors import InputError
from apportion.core.queues import DEFAULT_QUEUE, Queue
from apportion.workloads.queues import load_queues

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "queues.yaml"


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "queues.yaml"
    path.write_text(text)
    return str(path)


def test_a_full_file_loads_with_defaults_filled_in(tmp_path):
    path = write(tmp_path, """\
queues:
  - name: research
    weight: 2
    policy: fair
    nominal: {V100: 8, k80: 4}
    borrowing: true
  - name: prod
    weight: 0.5
    policy: fifo
    borrowing: false
  - name: scratch
""")
    config = load_queues(path)

    assert config.queues == (
        Queue("research", 2.0, "fair", {"v100": 8.0, "k80": 4.0}, True),
        Queue("prod", 0.5, "fifo", {}, False),
        Queue("scratch", 1.0, "fair", {}, True),
    )
    assert config.source == path
    assert config.queue("prod").policy == "fifo"
    assert config.queue("not-listed") is DEFAULT_QUEUE and DEFAULT_QUEUE.name == ""
    np.testing.assert_allclose(
        config.nominal_matrix(list(config.queues), ("k80", "v100")), [[4.0, 8.0], [0.0, 0.0], [0.0, 0.0]]
    )


def test_the_shipped_example_loads_and_fits_the_default_cluster():
    config = load_queues(EXAMPLE)

    assert len(config.queues) >= 2
    config.check_cluster(("v100", "p100", "k80"), np.array([8, 8, 8]))


@pytest.mark.parametrize(
    "text, line, field, message",
    [
        ("queues:\n  - name: a\n    wieght: 2\n", 3, "queues[0].wieght", "unknown key 'wieght'"),
        ("queues:\n  - name: a\n  - name: b\n    weight: 0\n", 4, "queues[1].weight", "must be a number > 0, got 0"),
        ("queues:\n  - name: a\n    weight: -1\n", 3, "queues[0].weight", "must be a number > 0, got -1"),
        ("queues:\n  - name: a\n    policy: lifo\n", 3, "queues[0].policy", "must be one of fair, fifo, got 'lifo'"),
        ("queues:\n  - name: a\n    nominal:\n      v100: 4\n      k80: -2\n", 5, "queues[0].nominal.k80",
         "must be a number of GPUs >= 0, got -2"),
        ("queues:\n  - name: a\n    nominal: 8\n", 3, "queues[0].nominal", "must be a mapping of GPU type to GPUs"),
        ("queues:\n  - name: a\n    borrowing: maybe\n", 3, "queues[0].borrowing", "must be true or false"),
        ("queues:\n  - name: a\n  - name: a\n", 3, "queues[1].name", "queue 'a' is listed twice"),
        ("queues:\n  - weight: 2\n", 2, "queues[0].name", "must be a non-empty queue name"),
        ("queues: []\n", 1, "queues", "must be a non-empty list"),
        ("queue:\n  - name: a\n", 1, "queues", "expected a mapping with a 'queues' list"),
    ],
)
def test_bad_input_names_file_line_and_field(tmp_path, text, line, field, message):
    path = write(tmp_path, text)

    with pytest.raises(InputError) as caught:
        load_queues(path)

    err = caught.value
    assert (err.source, err.line, err.field) == (path, line, field)
    assert message in err.message
    assert str(err).startswith(f"{path}:{line}: field '{field}': ")


def test_a_yaml_syntax_error_names_its_line(tmp_path):
    path = write(tmp_path, "queues:\n  - name: a\n    weight: [2\n")

    with pytest.raises(InputError, match=r"YAML syntax error") as caught:
        load_queues(path)
    assert caught.value.line is not None


def test_a_field_given_twice_is_refused_with_its_line(tmp_path):
    path = write(tmp_path, "queues:\n  - name: a\n    weight: 2\n    weight: 5\n")

    with pytest.raises(InputError) as caught:
        load_queues(path)
    assert str(caught.value) == f"{path}:4: duplicate key 'weight' (first on line 3)"


def test_booleans_are_yaml_1_2s_true_and_false(tmp_path):
    named = load_queues(write(tmp_path, "queues:\n  - name: on\n    borrowing: false\n"))
    assert named.queues[0].name == "on" and named.queues[0].borrowing is False
    with pytest.raises(InputError, match="must be true or false, got 'no'") as caught:
        load_queues(write(tmp_path, "queues:\n  - name: a\n    borrowing: no\n"))
    assert caught.value.line == 3


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(InputError, match="no such queues file"):
        load_queues(tmp_path / "nope.yaml")


def test_a_nominal_gpu_type_the_cluster_lacks_is_named_with_its_line(tmp_path):
    path = write(tmp_path, "queues:\n  - name: a\n    nominal:\n      V100: 2\n      a100: 1\n")
    config = load_queues(path)

    with pytest.raises(InputError) as caught:
        config.check_cluster(("v100", "k80"), np.array([4, 4]))
    assert str(caught.value) == (
        f"{path}:5: field 'queues[0].nominal.a100': queue 'a' has a nominal quota of GPU type 'a100',"
        " which the cluster does not have (cluster: v100, k80)"
    )


def test_nominal_quotas_that_oversubscribe_a_type_are_named(tmp_path):
    path = write(tmp_path, "queues:\n  - name: a\n    nominal: {v100: 3}\n  - name: b\n    nominal: {v100: 2}\n")
    config = load_queues(path)

    with pytest.raises(InputError, match=rf"{path}:5: field 'queues\[1\].nominal.v100': nominal quotas of 'v100'"
                                         " add up to 5 GPUs but the cluster has 4"):
        config.check_cluster(("v100",), np.array([4]))
