"""The built-in elastic job kinds: provenance, fit quality, how they move to other GPU types,
and (where ../shared is present) that they still describe the measurements they came from."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from apportion.core.errors import InputError
from apportion.core.elastic import goodput_table
from apportion.core.goodput import step_time_s
from apportion.workloads.elastic_kinds import builtin_elastic_kinds, elastic_kinds_document

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / ".." / "shared" / "profiles" / "pollux"
SIX = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")


def test_six_kinds_ship_with_their_source_licence_and_fit_error():
    document = elastic_kinds_document()

    assert "Pollux" in document["source"] and "petuum/adaptdl" in document["source"]
    assert document["licence"] == "Apache-2.0"
    assert document["measured_on"] == "t4"
    assert tuple(document["kinds"]) == SIX
    for kind in document["kinds"].values():
        assert kind["fit"]["observations"] > 100
        assert kind["fit"]["rmsle"] < 0.15  # step times within about 15% in the log, all measurements
        assert kind["init_batch"] < kind["max_batch"]


def test_the_shipped_file_is_the_one_the_package_reads():
    shipped = json.loads((ROOT / "apportion" / "workloads" / "data" / "elastic_kinds.json").read_text())
    assert shipped == elastic_kinds_document()


def test_every_kind_trains_faster_on_a_v100_than_on_a_t4_and_slower_on_a_k80():
    kinds = builtin_elastic_kinds(("k80", "t4", "v100"))
    rows = np.arange(len(kinds.names))
    value, _ = goodput_table(kinds, rows, np.ones((len(rows), 1)), np.full(len(rows), 1e3), np.array([4, 4, 4]))
    k80, t4, v100 = value[:, 0, 0], value[:, 1, 0], value[:, 2, 0]
    assert np.all(k80 < t4) and np.all(t4 < v100)


def test_the_gradient_noise_scale_grows_as_training_goes_on():
    kinds = builtin_elastic_kinds()
    for k in range(len(kinds.names)):
        start, end = kinds.noise_scale_at(np.array([k, k]), np.array([0.0, 1.0]))
        assert end > start, kinds.names[k]


def test_a_gpu_type_with_no_model_is_named():
    with pytest.raises(InputError, match="no elastic job model for GPU type 'tpu-v9'"):
        builtin_elastic_kinds(("t4", "tpu-v9"))


def measurements(name: str):
    """(nodes, GPUs, micro-batch, step time) of every measured step of one model."""
    rows = []
    with (PROFILES / name / "placements.csv").open() as handle:
        for row in csv.DictReader(handle):
            p = row["placement"]
            rows.append((len(p), sum(int(c) for c in p), float(row["local_bsz"]), float(row["step_time"])))
    with (PROFILES / name / "scalability.csv").open() as handle:
        for row in csv.DictReader(handle):
            rows.append((int(row["num_nodes"]), int(row["num_replicas"]), float(row["local_bsz"]),
                         float(row["step_time"])))
    return np.array(rows).T


@pytest.mark.skipif(not PROFILES.is_dir(), reason="../shared/profiles/pollux is not here")
@pytest.mark.parametrize("name", SIX)
def test_the_fitted_model_predicts_the_measured_steps(name):
    kinds = builtin_elastic_kinds(("t4",))
    nodes, gpus, local, measured = measurements(name)
    predicted = step_time_s(kinds.step_params[kinds.index(name), 0], nodes, gpus, local)
    error = np.abs(predicted / measured - 1)

    assert np.median(error) < 0.10
    assert np.percentile(error, 90) < 0.30
