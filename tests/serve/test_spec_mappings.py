"""Every spec file checks its mappings and its lists' sizes through one pair of helpers (serve/base/bounds.py):
the same words, the field named, whichever part of a job file is wrong."""

import pytest

from apportion.core.errors import InputError
from apportion.serve.base.bounds import MAX_AFTER, MAX_ARRAY_TASKS, MAX_ENV, MAX_GPU_TYPES, check_count, check_fields
from apportion.serve.jobs.elastic_spec import elastic_from_mapping
from apportion.serve.jobs.job_array import array_text
from apportion.serve.jobs.jobspec import spec_from_mapping
from apportion.serve.jobs.privacy_spec import MAX_CLAIM_BLOCKS, MAX_ORDERS, claim_from_mapping

JOB = {"name": "a", "command": "python t.py", "total_steps": 10}


def refused(check, *args):
    with pytest.raises(InputError) as err:
        check(*args, "job.yaml")
    return err.value


@pytest.mark.parametrize("check, value, field", [
    (spec_from_mapping, {**JOB, "gpu": 2}, "gpu"),
    (elastic_from_mapping, {"min_gpus": 1, "max_gpu": 4}, "elastic.max_gpu"),
    (claim_from_mapping, {"blocks": ["mon"], "epsilon": 0.1, "delta": 1e-7, "eps": 1}, "privacy.eps"),
])
def test_an_unknown_key_in_any_part_of_a_job_file_is_named_with_the_known_ones(check, value, field):
    error = refused(check, value)
    assert error.field == field
    assert "unknown field (known: " in str(error)


@pytest.mark.parametrize("check, value, field", [
    (spec_from_mapping, ["not", "a", "mapping"], None),
    (elastic_from_mapping, [1, 2], "elastic"),
    (claim_from_mapping, "mon", "privacy"),
])
def test_a_part_that_is_not_a_mapping_says_what_it_should_be(check, value, field):
    error = refused(check, value)
    assert error.field == field
    assert "mapping" in str(error)


@pytest.mark.parametrize("check, value, field, words", [
    (spec_from_mapping, {**JOB, "after": list(range(1, MAX_AFTER + 2))}, "after",
     f"must name at most {MAX_AFTER} jobs, got {MAX_AFTER + 1}"),
    (spec_from_mapping, {**JOB, "gpu_types": ["t4"] * (MAX_GPU_TYPES + 1)}, "gpu_types",
     f"must list at most {MAX_GPU_TYPES} types, got {MAX_GPU_TYPES + 1}"),
    (spec_from_mapping, {**JOB, "env": {f"V{i}": "1" for i in range(MAX_ENV + 1)}}, "env",
     f"must set at most {MAX_ENV} variables, got {MAX_ENV + 1}"),
    (claim_from_mapping, {"blocks": [f"b{i}" for i in range(MAX_CLAIM_BLOCKS + 1)], "epsilon": 0.1, "delta": 1e-7},
     "privacy.blocks", f"must name at most {MAX_CLAIM_BLOCKS:,} blocks, got {MAX_CLAIM_BLOCKS + 1:,}"),
    (claim_from_mapping, {"blocks": ["mon"], "rdp": {2 + i: 0.1 for i in range(MAX_ORDERS + 1)}}, "privacy.rdp",
     f"must give at most {MAX_ORDERS} orders, got {MAX_ORDERS + 1}"),
    (array_text, list(range(MAX_ARRAY_TASKS + 1)), "array",
     f"must name at most {MAX_ARRAY_TASKS:,} tasks, got {MAX_ARRAY_TASKS + 1:,}"),
])
def test_too_many_items_anywhere_is_refused_in_the_same_words(check, value, field, words):
    error = refused(check, value)
    assert error.field == field
    assert words in str(error)


def test_the_helpers_pass_what_is_within_bounds():
    assert check_fields({"a": 1}, ("a", "b"), "x", shape="a mapping") == {"a": 1}
    check_count([1, 2], "f", "x", most=2, what="things")
    with pytest.raises(InputError, match="must have at most 2 things, got 3"):
        check_count([1, 2, 3], "f", "x", most=2, what="things")
