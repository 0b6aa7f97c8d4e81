"""What the fidelity files and benchmarks print is standard JSON, whatever a short run could not measure."""

from __future__ import annotations

import json

import numpy as np

from apportion.fidelity.outputs import strict_json


def test_a_figure_a_run_could_not_give_is_null_not_nan():
    line = {"jobs": 3, "median_error": float("nan"), "p90": [np.float64("inf"), 0.25], "by_kind": {"cnn": -np.inf}}
    text = strict_json(line)
    assert text == '{"jobs": 3, "median_error": null, "p90": [null, 0.25], "by_kind": {"cnn": null}}'
    assert json.loads(text, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))["jobs"] == 3
