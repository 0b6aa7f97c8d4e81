"""The simulator run as the server runs (SimConfig.wall_clock) and the costs it charges per job
kind: small replays on one GPU, worked out by hand."""

import pytest

from apportion.core.cluster import parse_cluster_shorthand
from apportion.core.jobs import JobTable
from apportion.core.throughputs import ThroughputTable
from apportion.policies import make_policy
from apportion.sim import SimConfig, simulate
from apportion.sim.costs import AttemptCosts, MachineSlowness

import numpy as np

ONE_GPU = parse_cluster_shorthand("v100:1")
ONE_STEP_A_SECOND = ThroughputTable(kinds=("a", "b"), gpu_types=("v100",), scales=(1,), steps_per_s=np.ones((2, 1, 1)))


def jcts(submit, steps, config, policy, kinds=("a", "a"), cluster=ONE_GPU) -> list[float]:
    jobs = JobTable.build(job_id=["A", "B"], submit_time_s=submit, kind_names=list(kinds), num_gpus=[1, 1],
                          total_steps=steps, kinds=("a", "b"))
    return simulate(jobs, cluster, ONE_STEP_A_SECOND, policy, config).jct_s.tolist()


def las():  # a job that has held its GPU over 5 s goes behind one that has not
    return make_policy("las", thresholds_gpu_s=(5.0,))


def test_on_the_wall_clock_a_job_starts_as_soon_as_a_gpu_frees_not_at_the_next_round():
    # fifo, rounds of 100 s: B (arrived at 1 s) waits for A's 10 steps
    plain = jcts([0.0, 1.0], [10, 10], SimConfig(round_s=100.0, restart_cost_s=0.0), make_policy("fifo"))
    wall = jcts([0.0, 1.0], [10, 10], SimConfig(round_s=100.0, restart_cost_s=0.0, wall_clock=True),
                make_policy("fifo"))

    assert plain == [10.0, 109.0]  # B starts at the next round, at 100 s
    assert wall == [10.0, 19.0]  # B starts when A ends, at 10 s


def test_on_the_wall_clock_a_job_arriving_to_an_idle_cluster_waits_out_the_fill_gap_after_the_last_round():
    # the server decided its first round 0.3 s before A arrived; an early round comes no sooner
    # than 1 s after the last, so A (5 steps) starts at 0.7 s. B arrives at 40 s to an idle GPU:
    # the server went on deciding empty rounds every 10 s (at 10.7, 20.7, 30.7, 40.7 s), the
    # last at 30.7 s, so B starts at once
    config = SimConfig(round_s=10.0, restart_cost_s=0.0, wall_clock=True, first_round_s=-0.3)
    assert jcts([0.0, 40.0], [5, 5], config, make_policy("fifo")) == pytest.approx([5.7, 5.0])
    # B at 31 s comes 0.3 s after the empty round at 30.7 s: it waits until 31.7 s
    assert jcts([0.0, 31.0], [5, 5], config, make_policy("fifo")) == pytest.approx([5.7, 5.7])
    # unknown first round: A starts as it arrives
    unknown = SimConfig(round_s=10.0, restart_cost_s=0.0, wall_clock=True)
    assert jcts([0.0, 40.0], [5, 5], unknown, make_policy("fifo")) == pytest.approx([5.0, 5.0])


def test_on_the_wall_clock_a_preempted_job_trains_until_its_lease_ends_a_round_after_its_first_step():
    # rounds of 10 s, 2 s to start or restart; A (20 steps) from 0 s, B (5 steps) from 1 s
    costs = dict(round_s=10.0, start_cost_s=2.0, restart_cost_s=2.0)
    plain = jcts([0.0, 1.0], [20, 5], SimConfig(**costs), las())
    wall = jcts([0.0, 1.0], [20, 5], SimConfig(**costs, wall_clock=True), las())

    # plain rounds: A trains 2-10 s (8 steps); B runs 10-17 s; A resumes at the round at 20 s,
    # trains 22-34 s
    assert plain == pytest.approx([34.0, 16.0])
    # wall clock: A's lease ends at 12 s (its first step + 10 s), so it trains 2-12 s (10 steps);
    # B starts at 12 s, ends at 19 s, and A resumes at once: 21-31 s
    assert wall == pytest.approx([31.0, 18.0])


def test_a_stopped_job_loses_its_lead_and_its_successor_waits_for_its_checkpoint():
    # as above, but A asks for its lease 1 s before it ends and takes 0.5 s to checkpoint and exit
    costs = AttemptCosts(stop_lead_s={"a": 1.0}, stop_s={"a": 0.5})
    config = SimConfig(round_s=10.0, start_cost_s=2.0, restart_cost_s=2.0, costs=costs, wall_clock=True)

    # A trains 2-11 s (9 steps), B starts at 11.5 s and ends at 18.5 s; A trains again 20.5-31.5 s
    assert jcts([0.0, 1.0], [20, 5], config, las()) == pytest.approx([31.5, 17.5])


def test_a_kind_with_a_measured_restart_cost_pays_it_and_another_kind_the_constant():
    # rounds of 10 s; kind a restarts in 3 s (measured), kind b in the constant 10 s; both 20 steps
    config = SimConfig(round_s=10.0, restart_cost_s=10.0, costs=AttemptCosts(restart_s={"a": 3.0}))

    # A 0-10 s, B 10-20 s, A resumes at 20 s and trains 23-33 s; B resumes at the round at 40 s
    # and trains 50-60 s
    assert jcts([0.0, 0.0], [20, 20], config, las(), kinds=("a", "b")) == pytest.approx([33.0, 60.0])


def test_a_finish_cost_delays_the_end_and_the_next_start():
    config = SimConfig(round_s=100.0, restart_cost_s=0.0, costs=AttemptCosts(finish_s={"a": 1.5}), wall_clock=True)

    assert jcts([0.0, 1.0], [10, 10], config, make_policy("fifo")) == pytest.approx([11.5, 22.0])
    # rounds of 10 s: A's last step at 9 s, the round at 10 s gives B the GPU A leaves at 10.5 s
    config = SimConfig(round_s=10.0, restart_cost_s=0.0, costs=AttemptCosts(finish_s={"a": 1.5}), wall_clock=True)
    assert jcts([0.0, 1.0], [9, 10], config, make_policy("fifo")) == pytest.approx([10.5, 21.0])


def test_on_the_wall_clock_an_attempt_still_starting_keeps_its_gpu():
    # two GPUs, rounds of 10 s, 6 s to start; las, a job that has held a GPU 0.5 s goes behind
    # new ones. A starts at 0 s; B and C arrive at 0.5 s, and the early round at 1 s (a GPU
    # idles) leaves A, still starting, where it is: B gets the idle GPU, C waits.
    config = SimConfig(round_s=10.0, start_cost_s=6.0, restart_cost_s=6.0, wall_clock=True)
    jobs = JobTable.build(job_id=["A", "B", "C"], submit_time_s=[0.0, 0.5, 0.5], kind_names=["a"] * 3,
                          num_gpus=[1, 1, 1], total_steps=[100, 100, 5], kinds=("a", "b"))
    result = simulate(jobs, parse_cluster_shorthand("v100:2"), ONE_STEP_A_SECOND,
                      make_policy("las", thresholds_gpu_s=(0.5,)), config)

    # the round at 11 s runs C and A (first come within the same queue); B is preempted and
    # trains on until its lease ends, 17 s (its first step at 7 s + 10 s), when C starts
    assert result.first_start_s.tolist() == [0.0, 1.0, 17.0]
    assert result.preemptions.tolist()[:2] == [0, 1]


def test_a_round_decided_while_every_job_is_still_starting_leaves_them_be():
    # two GPUs, rounds of 10 s; B (1 step, 2 s to start) runs at once and ends at 3 s; A arrives
    # at 0.5 s, starts at the early round at 1 s and takes 20 s to start: the round at 11 s finds
    # it starting, alone, beside an idle GPU
    config = SimConfig(round_s=10.0, costs=AttemptCosts(start_s={"a": 20.0, "b": 2.0}), wall_clock=True)

    assert jcts([0.0, 0.5], [1, 10], config, make_policy("max-min-fairness"), kinds=("b", "a"),
                cluster=parse_cluster_shorthand("v100:2")) == pytest.approx([3.0, 30.5])


def test_a_start_up_costs_its_kind_mean_times_how_slow_other_jobs_started_up_around_then():
    # others' start-ups: job row 1 at 0 s took 3x its kind's mean, row 0 at 4 s half of it
    slowness = MachineSlowness(times_s=np.array([0.0, 4.0]), rows=np.array([1, 0]), ratios=np.array([3.0, 0.5]),
                               window_s=5.0)

    factors = slowness.at(np.array([2.0, 2.0, 8.0, 20.0]), np.array([2, 0, 2, 2]))

    # at 2 s: both (3 + 0.5) / 2; row 0's own start-up left out: 3; at 8 s only row 0's; at 20 s none
    assert factors.tolist() == pytest.approx([1.75, 3.0, 0.5, 1.0])


def test_the_simulator_charges_start_ups_as_slow_as_the_machine_was_when_they_begin():
    # fifo on one GPU: A (10 steps) at 0 s, B (10 steps) from 1 s; 2 s to start. Start-ups by
    # other jobs took twice the mean around 0 s and the mean around 12 s
    slowness = MachineSlowness(times_s=np.array([0.0, 12.0]), rows=np.array([5, 5]), ratios=np.array([2.0, 1.0]),
                               window_s=3.0)
    config = SimConfig(round_s=100.0, costs=AttemptCosts(start_s={"a": 2.0}, slowness=slowness), wall_clock=True)

    # A: 4 s to start, 10 s of steps; B starts when A ends at 14 s, 2 s to start: ends at 26 s, 25 s
    # after it arrived
    assert jcts([0.0, 1.0], [10, 10], config, make_policy("fifo")) == pytest.approx([14.0, 25.0])


def test_a_job_still_starting_when_a_round_is_decided_ahead_learns_that_rounds_end_at_its_first_step():
    # las over 5 s, rounds of 10 s decided 5 s ahead, 8 s to start; A (300 steps) from 0 s, B (2)
    # from 3 s. At 5 s A is still starting: its lease is stretched to the round's end, 20 s, which
    # it learns at its first lease call (8 s). At 15 s B is placed: A trains to 19 s (asks 1 s
    # ahead), exits at 19.5 s; B starts then, trains 27.5-29.5 s and exits at 30 s.
    costs = AttemptCosts(start_s={"a": 8.0}, restart_s={"a": 8.0}, stop_lead_s={"a": 1.0}, stop_s={"a": 0.5},
                         finish_s={"a": 0.5})
    config = SimConfig(round_s=10.0, costs=costs, wall_clock=True, plan_ahead_s=5.0)

    assert jcts([0.0, 3.0], [300, 2], config, las())[1] == pytest.approx(27.0)
