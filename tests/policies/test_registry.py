"""The policy registry: one table of names, classes, variants and options, imported lazily."""

import subprocess
import sys

import numpy as np
import pytest

from apportion.core.cluster import parse_cluster_shorthand
from apportion.core.jobs import JobTable
from apportion.core.throughputs import ThroughputTable
from apportion.core.views import JobView, ThroughputView
from apportion.experiment import check_policy_specs, parse_policy_spec, policy_from_spec
from apportion.policies import LP_POLICIES, POLICIES, OrderingPolicy, make_policy, policy_info, policy_names
from apportion.policies.registry import (
    AGNOSTIC, Option, PolicyEntry, declared_options, option_takers, register, unregister,
)
from apportion.sim import SimConfig, simulate


def test_importing_the_policies_loads_no_policy_module_and_no_solver():
    code = (
        "import sys\n"
        "import apportion.policies, apportion.experiment\n"
        "from apportion.policies.base import Policy\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('highspy', 'scipy')"
        " or m.startswith('apportion.policies.') and m not in ('apportion.policies.base', 'apportion.policies.registry',"
        " 'apportion.policies.entry'))\n"
        "print(','.join(loaded))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout

    assert out.strip() == ""


@pytest.mark.parametrize("name", policy_names())
def test_every_entry_names_its_class_and_says_truly_whether_it_is_an_lp(name):
    from apportion.policies.lp import LPPolicy

    entry = policy_info(name)
    policy_class = entry.load()

    assert policy_class.name == name
    assert issubclass(policy_class, LPPolicy) == entry.is_lp == (name in LP_POLICIES)
    assert entry.summary and all(option.help for option in entry.options)


def test_the_names_are_the_tables_in_order():
    assert list(POLICIES) == list(policy_names())
    assert policy_names()[:3] == ("fifo", "srtf", "las")
    assert sorted(LP_POLICIES) == ["finish-time-fairness", "max-min-fairness", "max-throughput", "min-cost", "min-makespan"]


def test_a_policys_name_is_its_full_spec():
    assert make_policy("las").name == "las"
    assert policy_from_spec("max-min-fairness:agnostic").name == "max-min-fairness:agnostic"
    assert policy_from_spec("max-min-fairness", agnostic=True, space_sharing=True).name == (
        "max-min-fairness:agnostic:space-sharing"
    )
    partitioned = policy_from_spec("max-throughput:space-sharing", partitions=2)
    assert partitioned.name == "max-throughput:space-sharing" and len(partitioned.parts) == 2


def test_options_reach_the_policy():
    policy = policy_from_spec("las:agnostic", thresholds_gpu_s="7200,600")

    assert policy.agnostic and policy.thresholds_gpu_s.tolist() == [600.0, 7200.0]
    assert make_policy("max-min-fairness", water_filling=True).water_filling
    assert make_policy("min-cost", slo=True).slo


def test_a_spec_parses_into_its_name_and_variants():
    assert parse_policy_spec(" min-cost : agnostic ") == ("min-cost", {"agnostic": True})
    assert parse_policy_spec("max-min-fairness:space-sharing:agnostic") == (
        "max-min-fairness", {"space_sharing": True, "agnostic": True},
    )


@pytest.mark.parametrize("spec, options, message", [
    ("nope", {}, "unknown policy 'nope' (known: fifo, srtf, las, qssf, max-min-fairness, "),
    ("max-min-fairness:shared", {}, "unknown policy variant ':shared' in 'max-min-fairness:shared' (known: :agnostic, :preemptive, :head-of-line, :continuous, :non-preemptive, :median-left, :lognormal, :estimate-ratios, :space-sharing)"),
    ("las", {"partitions": 2}, "--partitions applies to LP policies (finish-time-fairness, max-min-fairness, "),
    ("max-min-fairness", {"partitions": 0}, "--partitions must be a whole number >= 1, got 0"),
    ("fifo:space-sharing", {}, "--space-sharing applies to finish-time-fairness, max-min-fairness, max-throughput, "
                               "min-cost, min-makespan, not to 'fifo'"),
    ("las", {"water_filling": True}, "--water-filling applies to max-min-fairness only, not to 'las'"),
    ("fifo", {"thresholds_gpu_s": "3600"}, "--las-thresholds applies to las only, not to 'fifo'"),
    ("las", {"thresholds_gpu_s": "3600,-1"}, "--las-thresholds must be positive GPU-seconds, got '3600,-1'"),
    ("min-cost:space-sharing", {"slo": True}, "--slo cannot be combined with --space-sharing"),
    ("hierarchical", {}, "hierarchical needs --queues FILE (a queues YAML, see docs/queues.md)"),
    ("fifo", {"speed": 2}, "unknown policy option 'speed'"),
])
def test_what_does_not_apply_is_one_line_naming_it(spec, options, message):
    with pytest.raises(ValueError) as error:
        policy_from_spec(spec, **options)

    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("spec, options, hint", [
    ("max-min-fairnes", {}, "unknown policy 'max-min-fairnes'; did you mean 'max-min-fairness'? (known: fifo,"),
    ("lsa", {}, "unknown policy 'lsa'; did you mean 'las'? (known:"),
    ("las:agnostc", {}, "unknown policy variant ':agnostc' in 'las:agnostc'; did you mean ':agnostic'? (known:"),
    ("max-min-fairness", {"water_filing": True}, "unknown policy option 'water_filing'; did you mean 'water_filling'?"),
])
def test_a_misspelt_name_gets_a_did_you_mean(spec, options, hint):
    with pytest.raises(ValueError) as error:
        policy_from_spec(spec, **options)

    assert str(error.value).startswith(hint)


def test_queues_are_ignored_by_the_policies_that_do_not_take_them_but_must_serve_one():
    queues = policy_info("hierarchical").example_options()["queues"]

    check_policy_specs(["fifo", "hierarchical"], queues=queues)
    assert make_policy("fifo", queues=queues).name == "fifo"
    with pytest.raises(ValueError, match="--queues applies to hierarchical only"):
        check_policy_specs(["fifo", "las"], queues=queues)


# --- a policy is one file and one test: a toy one, registered here and nowhere else ----------


class NewestFirst(OrderingPolicy):
    """Last in, first out; ``patience_s``: a waiting job that arrived that long ago goes first anyway."""

    name = "newest-first"

    def __init__(self, *, patience_s: float = float("inf"), agnostic: bool = False) -> None:
        super().__init__(agnostic=agnostic)
        self.patience_s = patience_s

    def rank_key(self, jobs: JobView, throughputs: ThroughputView) -> np.ndarray:
        waited_too_long = (jobs.now_s - jobs.submit_time_s >= self.patience_s) & (jobs.running_type < 0)
        return np.where(waited_too_long, -np.inf, -jobs.submit_time_s)


NEWEST_FIRST = PolicyEntry(
    "newest-first", NewestFirst, "last in, first out",
    options=(AGNOSTIC, Option("patience_s", float, "seconds after which a waiting job goes first anyway",
                              float("inf"), check=float)),
)


@pytest.fixture
def newest_first():
    register(NEWEST_FIRST)
    yield NEWEST_FIRST
    unregister(NEWEST_FIRST.name)


def test_a_registered_policy_runs_end_to_end(newest_first):
    """One GPU; one-hour jobs j0, j1, j2 arrive at 0, 10 and 20 s; no restart cost. The newest
    runs first: j2 preempts j0 at the first round (360 s) and runs to 3960 s. Then j1, the
    newer of the two waiting, runs; with ``patience_s`` 3000, j0 has waited too long and
    goes first instead."""
    one_step_a_second = ThroughputTable(("a",), ("v100",), (1,), np.ones((1, 1, 1)))
    workload = JobTable.build(job_id=["j0", "j1", "j2"], submit_time_s=[0.0, 10.0, 20.0], kind_names=["a"] * 3,
                              num_gpus=[1, 1, 1], total_steps=[3600.0] * 3, kinds=("a",))

    def replay(spec, **options):
        return simulate(workload, parse_cluster_shorthand("v100:1"), one_step_a_second,
                        make_policy(spec, **options), SimConfig(restart_cost_s=0.0))

    patient, impatient = replay("newest-first"), replay("newest-first:agnostic", patience_s=3000)

    assert patient.first_start_s.tolist() == [0.0, 3960.0, 360.0]
    assert patient.finish_s.tolist() == [10800.0, 7560.0, 3960.0]
    assert impatient.first_start_s.tolist() == [0.0, 7200.0, 360.0]
    assert impatient.finish_s.tolist() == [7200.0, 10800.0, 3960.0]
    assert impatient.summary["policy"] == "newest-first:agnostic"
    assert "newest-first" in policy_names() and "newest-first" in POLICIES


def test_a_registered_policys_options_are_checked_like_any_other(newest_first):
    with pytest.raises(ValueError, match="--partitions applies to LP policies"):
        make_policy("newest-first", partitions=2)
    with pytest.raises(ValueError, match="--patience-s applies to newest-first only, not to 'fifo'"):
        make_policy("fifo", patience_s=60)
    assert "newest-first" not in LP_POLICIES


def test_each_option_is_declared_once_with_the_policies_that_take_it(newest_first):
    options = {option.name: option for option in declared_options()}

    assert options["patience_s"].cli_flag == "--patience-s" and options["p"].cli_flag == "--goodput-p"
    assert option_takers("patience_s") == ("newest-first",)
    assert option_takers("durations") == ("srtf", "qssf", "finish-time-fairness")
    assert len(options) == len(declared_options())


@pytest.mark.parametrize("option, message", [
    (Option("partitions", int, "how many pieces", 4), "policy 'pieces': option 'partitions' differs from the one "
                                                       "max-min-fairness, finish-time-fairness, min-makespan, "
                                                       "max-throughput, min-cost declare"),
    (Option("exponent", float, "an exponent", 1.0, flag="--goodput-p"),
     "policy 'pieces': option 'exponent' is spelled --goodput-p, like option 'p' of goodput"),
])
def test_an_option_that_would_mean_two_things_on_the_command_line_is_refused(option, message):
    with pytest.raises(ValueError) as error:
        register(PolicyEntry("pieces", NewestFirst, "in pieces", options=(option,)))

    assert str(error.value) == message
    assert "pieces" not in policy_names()
