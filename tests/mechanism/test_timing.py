"""When rounds are decided on the server's clock: regular rounds ahead of their start, early ones to fill idle slots."""

import math

from apportion.mechanism.timing import (early_round_at, early_round_due, fill_event_at, idle_round_at, next_boundary,
                                        regular_round_due)


def test_a_regular_round_is_decided_plan_ahead_before_it_starts():
    assert not regular_round_due(169.9, round_end_s=180.0, plan_ahead_s=10.0)
    assert regular_round_due(170.0, round_end_s=180.0, plan_ahead_s=10.0)


def test_an_early_round_waits_for_the_gap_after_the_last_round():
    assert not early_round_due(100.5, last_round_s=100.0, fill_gap_s=1.0)
    assert early_round_due(101.0, last_round_s=100.0, fill_gap_s=1.0)
    assert early_round_at(100.2, last_round_s=100.0, fill_gap_s=1.0) == 101.0
    assert early_round_at(150.0, last_round_s=100.0, fill_gap_s=1.0) == 150.0


def test_slots_idle_while_jobs_wait_at_the_first_exit_or_the_next_arrival():
    # jobs wait: the first exit frees slots for them
    assert fill_event_at(first_exit_s=50.0, next_arrival_s=80.0, waiting=True, idle=False) == 50.0
    # a slot idles: the next arrival can use it at once
    assert fill_event_at(first_exit_s=50.0, next_arrival_s=30.0, waiting=False, idle=True) == 30.0
    # nobody waits and no slot idles: an arrival before the first exit waits for that exit's slot
    assert fill_event_at(first_exit_s=50.0, next_arrival_s=30.0, waiting=False, idle=False) == 50.0
    # nobody waits: an exit before the next arrival leaves a slot idle when it comes
    assert fill_event_at(first_exit_s=50.0, next_arrival_s=80.0, waiting=False, idle=False) == 80.0
    assert fill_event_at(math.inf, math.inf, waiting=True, idle=True) == math.inf


def test_round_boundaries_count_whole_rounds_from_now():
    assert next_boundary(0.0, 1.0, 360.0) == 360.0
    assert next_boundary(0.0, 360.0, 360.0) == 360.0
    assert next_boundary(0.0, 361.0, 360.0) == 720.0
    assert next_boundary(0.0, -5.0, 360.0) == 360.0  # never sooner than one round


def test_a_job_arriving_to_an_idle_cluster_gets_an_early_round_at_once():
    """Rounds of 180 s decided 10 s ahead; the current round ends at 180 and the last was decided at 0.
    A job arriving at 50 gets an early round at 50."""
    assert idle_round_at(50.0, now_s=20.0, last_round_s=0.0, round_end_s=180.0, round_s=180.0,
                         plan_ahead_s=10.0, fill_gap_s=1.0) == (50.0, True)


def test_a_job_arriving_just_after_a_round_waits_for_the_gap():
    assert idle_round_at(0.5, now_s=0.0, last_round_s=0.0, round_end_s=180.0, round_s=180.0,
                         plan_ahead_s=10.0, fill_gap_s=1.0) == (1.0, True)


def test_a_job_arriving_within_the_gap_of_a_regular_round_takes_that_round():
    """The regular rounds are decided at 170, 350, …; one arriving at 350.5 comes under a second after
    the one decided at 350, so it is taken at 351 (early); one arriving at exactly 350 takes it."""
    assert idle_round_at(350.5, now_s=0.0, last_round_s=0.0, round_end_s=180.0, round_s=180.0,
                         plan_ahead_s=10.0, fill_gap_s=1.0) == (351.0, True)
    assert idle_round_at(350.0, now_s=0.0, last_round_s=0.0, round_end_s=180.0, round_s=180.0,
                         plan_ahead_s=10.0, fill_gap_s=1.0) == (350.0, False)


def test_before_any_round_the_first_comes_when_the_job_arrives():
    assert idle_round_at(7.0, now_s=0.0, last_round_s=-math.inf, round_end_s=0.0, round_s=180.0,
                         plan_ahead_s=10.0, fill_gap_s=1.0) == (7.0, True)
