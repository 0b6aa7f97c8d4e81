"""The duration predictor: a ladder of groups of finished jobs, worked out by hand in log space,
and what a job that has run for a while is believed to have left."""

import math

import numpy as np
import pytest

from apportion.core.durations import PRIOR_GPU_S, DurationPredictor, remaining_gpu_s

E = math.e
# user+name+GPUs, then user, then everyone; no history at all is e**0 = 1 GPU-second
LADDER = (("user", "name", "gpus"), ("user",), ())


def predictor(**options) -> DurationPredictor:
    return DurationPredictor(LADDER, shrinkage=1.0, prior_gpu_s=1.0, **options)


def groups(p: DurationPredictor, rows: list[tuple[str, str, int]]) -> np.ndarray:
    users, names, gpus = zip(*rows)
    return p.groups(user=list(users), name=list(names), queue=None, num_gpus=list(gpus),
                    submit_time_s=np.zeros(len(rows)))


def test_each_level_pulls_the_estimate_towards_its_median_by_n_over_n_plus_one():
    """History in log GPU-seconds: alice's bert on 1 GPU took 4, 4, 4; bob's gan on 2 GPUs took 0.

    Everyone: median of 0, 4, 4, 4 is 4, over 4 jobs: 0 + 4/5 × (4 - 0) = 3.2.
    alice: median 4 over 3 jobs: 3.2 + 3/4 × (4 - 3.2) = 3.8.
    alice's bert on 1 GPU: median 4 over 3 jobs: 3.8 + 3/4 × (4 - 3.8) = 3.95.
    """
    p = predictor()
    history = [("alice", "bert", 1)] * 3 + [("bob", "gan", 2)]
    p.observe(groups(p, history), [E**4, E**4, E**4, 1.0])

    asked = [("alice", "bert", 1), ("alice", "vit", 1), ("carol", "bert", 1), ("", "bert", 1)]
    prediction = p.predict(groups(p, asked))

    assert np.log(prediction.gpu_s) == pytest.approx([3.95, 3.8, 3.2, 3.2])
    # where each estimate comes from: the most specific level that has seen a job like it
    assert [p.level_names[k] for k in prediction.level] == ["user+name+gpus", "user", "all", "all"]


def test_no_history_is_the_prior_and_a_blank_feature_skips_its_levels():
    p = DurationPredictor()
    ids = p.groups(user=["", "ann"], name=None, queue=["", "vc1"], num_gpus=[1, 8], submit_time_s=[0.0, 0.0])
    in_a_group = dict(zip(p.level_names, (ids >= 0).T.tolist()))

    assert in_a_group["user"] == [False, True] and in_a_group["queue+gpus"] == [False, True]
    assert in_a_group["user+name"] == [False, False] and in_a_group["gpus"] == [True, True]
    everyone = ids[:, p.level_names.index("all")]
    assert everyone[0] == everyone[1] >= 0
    assert p.predict(ids).gpu_s.tolist() == pytest.approx([PRIOR_GPU_S, PRIOR_GPU_S])


def test_a_group_keeps_only_its_most_recent_jobs():
    """recent=3: after 1, 1, 1 and then e**6 three times, only the e**6 are left."""
    p = DurationPredictor(((),), recent=3, shrinkage=1.0, prior_gpu_s=1.0)
    ids = p.groups(user=None, name=None, queue=None, num_gpus=[1], submit_time_s=[0.0])
    for gpu_s in [1.0, 1.0, 1.0, E**6, E**6, E**6]:
        p.observe(ids, [gpu_s])

    assert math.log(p.predict(ids).gpu_s[0]) == pytest.approx(0 + 3 / 4 * 6)


def test_the_uncertainty_is_the_groups_spread_and_shrinks_towards_the_prior():
    """Logs 2, 4, 6, 8 on one level: interquartile range 3.5 - 6.5, so spread 3 ÷ 1.349; over 4 jobs it
    pulls the prior's 2.0 by (4 - 1) / (4 - 1 + 1) = 3/4."""
    p = DurationPredictor(((),), shrinkage=1.0, prior_log_sd=2.0)
    ids = p.groups(user=None, name=None, queue=None, num_gpus=[1] * 4, submit_time_s=np.zeros(4))
    p.observe(ids, [E**2, E**4, E**6, E**8])

    assert p.predict(ids[:1]).log_sd[0] == pytest.approx(2.0 + 0.75 * (3 / 1.349 - 2.0))


def test_an_unknown_feature_is_refused():
    with pytest.raises(ValueError, match="unknown job feature 'team'"):
        DurationPredictor((("team",),))


def test_what_is_left_is_the_prediction_less_what_is_done_until_the_job_reaches_it():
    # nothing done: all of it; far short of it (sd 0.1): about the difference
    assert remaining_gpu_s([1000.0], [0.1], [0.0]).tolist() == [1000.0]
    assert remaining_gpu_s([1000.0], [0.1], [200.0])[0] == pytest.approx(800.0, rel=1e-6)
    # close to it, with log sd 1 (900 done): half of the lognormal's tail beyond 900 lies past
    # 1000 × e**z with S(z) = S(ln 0.9) / 2 = 0.5420 / 2: z = 0.6099, so 1000 × e**0.6099 - 900 = 940
    assert remaining_gpu_s([1000.0], [1.0], [900.0])[0] == pytest.approx(1000 * math.exp(0.60986) - 900, rel=1e-4)
    # past it, the longer it ran the more it is believed to have left
    left = remaining_gpu_s([1000.0] * 3, [1.0] * 3, [1000.0, 4000.0, 16000.0])
    assert left[0] < left[1] < left[2]


def test_a_job_that_outlives_a_confident_prediction_has_as_much_again_to_go():
    """Predicted 70 GPU-s with log sd 0.18, it has done 3,600. The lognormal alone says the median
    of its tail beyond 3,600 is barely past it (ln(3600/70) / 0.18 = 21.9 sds out): about 20 s
    left, so it would outrank every new 70 GPU-s job. Past its prediction it is believed to have
    at least as much again to go as it did, rounded up to 70 × a power of two: it has done
    70 × 51.4, between 70 × 32 and 70 × 64, so 70 × 64 = 4,480 are left, behind a new 70 GPU-s job."""
    assert remaining_gpu_s([70.0], [0.18], [3600.0])[0] == pytest.approx(4480.0)
    # at its prediction, unfinished: 70 × 2 left; a little past it (100 done), the same
    assert remaining_gpu_s([70.0, 70.0], [0.18, 0.18], [70.0, 100.0]).tolist() == pytest.approx([140.0, 140.0])
    # at twice it, 70 × 4 (the next doubling): what is left changes only at the doublings
    assert remaining_gpu_s([70.0, 70.0], [0.18, 0.18], [140.0, 279.0]).tolist() == pytest.approx([280.0, 280.0])
    # short of it, the lognormal: 35 done of 70 leaves 35 (its tail beyond 35 is almost all of it)
    assert remaining_gpu_s([70.0], [0.18], [35.0])[0] == pytest.approx(35.0, rel=1e-3)


def test_a_predictor_asked_between_lessons_predicts_as_one_told_everything_at_once():
    """A group's sorted recent jobs are kept up to date from one question to the next (a few
    jobs in and out, or many, or more than it keeps); the answer is the same as from scratch."""
    rng = np.random.default_rng(7)
    users = [f"user-{u}" for u in rng.integers(0, 3, 400)]
    history = [(user, "bert", 1) for user in users]
    gpu_s = np.exp(rng.normal(6.0, 2.0, len(history)))
    asked = [("user-0", "bert", 1), ("user-1", "bert", 1), ("user-2", "bert", 1)]
    step_by_step = predictor(recent=5)
    told = 0
    for batch in [1, 1, 2, 3, 9, 1, 40, 2, 1, 140, 200]:  # 400 jobs in all
        step_by_step.observe(groups(step_by_step, history[told:told + batch]), gpu_s[told:told + batch])
        told += batch
        at_once = predictor(recent=5)
        at_once.observe(groups(at_once, history[:told]), gpu_s[:told])
        for p in (step_by_step, at_once):
            p.answer = p.predict(groups(p, asked))
        assert step_by_step.answer.gpu_s.tolist() == at_once.answer.gpu_s.tolist()
        assert step_by_step.answer.log_sd.tolist() == at_once.answer.log_sd.tolist()


def test_a_job_whose_gpu_time_is_unknown_teaches_nothing():
    p = predictor()
    p.observe(groups(p, [("alice", "bert", 1)] * 2), [E**2, math.nan])
    assert np.log(p.predict(groups(p, [("alice", "bert", 1)])).gpu_s) == pytest.approx([2 * (1 / 2 + 1 / 4 + 1 / 8)])


def test_a_job_seen_in_a_later_call_joins_the_same_groups_and_is_learnt_from_as_if_seen_at_once():
    """The server asks for each job's groups when it first sees it and learns from each job as it
    completes: the same user, name and GPUs is the same group whichever call asked, and a group that
    gains jobs one at a time keeps them all, as one given every job in one call does."""
    history = [("alice", "bert", 1), ("bob", "gan", 2), ("alice", "bert", 1), ("alice", "vit", 1)]
    gpu_s = [E**2, E**6, E**4, E**8]
    asked = [("alice", "bert", 1), ("alice", "gan", 2), ("carol", "bert", 1)]
    at_once = predictor()
    at_once.observe(groups(at_once, history), gpu_s)
    one_by_one = predictor()
    ids = np.vstack([groups(one_by_one, [job]) for job in history])
    for job, took in zip(ids, gpu_s):
        one_by_one.observe(job[None], [took])

    assert ids[0].tolist() == ids[2].tolist() and ids[3, 1] == ids[0, 1] != ids[1, 1]
    assert one_by_one.predict(groups(one_by_one, asked)).gpu_s.tolist() == \
        at_once.predict(groups(at_once, asked)).gpu_s.tolist()
    # everyone: logs 2, 6, 4, 8, median 5 over 4: 0 + 4/5 × 5 = 4; alice: 2, 4, 8, median 4 over 3:
    # 4 + 3/4 × (4 - 4) = 4; alice's bert on 1 GPU: 2, 4, median 3 over 2: 4 + 2/3 × (3 - 4)
    assert np.log(at_once.predict(groups(at_once, asked)).gpu_s[0]) == pytest.approx(4 + 2 / 3 * (3 - 4))
