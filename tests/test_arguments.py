"""The arguments of simulate, compare and sweep, checked once for the command line and for Python:
one message, each argument named as its caller spells it."""

from __future__ import annotations

import pytest

from apportion.arguments import ArgumentError, flag, keyword, names, numbers, seed_list, workload_settings


def settings(**changes):
    arguments = dict(workload=None, cluster="v100:4", jobs=None, rate=8.0, seed=0, start_s=None, end_s=None,
                     throughputs=None, reference_gpu_type="v100", shape="philly")
    return workload_settings(**{**arguments, **changes})


def test_an_error_names_each_argument_as_flag_or_keyword():
    with pytest.raises(ArgumentError) as caught:
        settings(workload="trace.csv", shape="gavel")

    assert str(caught.value) == "shape applies to the synthetic workload only, not to workload"
    assert caught.value.spelled(flag) == "--shape applies to the synthetic workload only, not to --workload"
    assert caught.value.spelled(keyword) == str(caught.value)


def test_a_value_with_braces_is_shown_as_given():
    with pytest.raises(ArgumentError) as caught:
        settings(shape="{cluster}")

    assert caught.value.spelled(flag).endswith("got '{cluster}'")
    assert ArgumentError.plain("a.csv:3: field 'x': '{y}'").spelled(flag) == "a.csv:3: field 'x': '{y}'"


def test_lists_come_as_the_command_line_s_text_or_as_python_lists():
    assert names("fifo, las,", "policies") == names(["fifo", "las"], "policies") == ["fifo", "las"]
    assert names("v100:4;k80:4", "clusters", ";") == ["v100:4", "k80:4"]
    assert numbers("4,8", "rates", float) == numbers([4, 8], "rates", float) == numbers((4.0, 8), "rates", float)
    assert numbers(4, "rates", float) == [4.0]
    assert seed_list("0-2") == seed_list(range(3)) == seed_list([0, 1, 2]) == [0, 1, 2]
    assert seed_list(7) == seed_list("7") == [7]


@pytest.mark.parametrize("call, message", [
    (lambda: names(" , ", "policies"), "--policies is empty"),
    (lambda: numbers("4,x", "rates", float), "--rates must be comma-separated numbers, got '4,x'"),
    (lambda: seed_list("5-1"), "--seeds: '5-1' is an empty range"),
])
def test_a_bad_list_says_which_and_why(call, message):
    with pytest.raises(ArgumentError) as caught:
        call()

    assert caught.value.spelled(flag) == message
