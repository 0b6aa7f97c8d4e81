"""The Gittins index over a group's recent finished jobs (Tiresias's empirical form): what the
history of jobs like it says about a job that did so much, with no shape assumed."""

import numpy as np
import pytest

from apportion.core.duration_samples import DurationSamples
from apportion.core.durations import DurationPredictor
from apportion.core.gittins import sample_keys


def key(samples: DurationSamples, group: int, done: float) -> float:
    return float(samples.keys(np.array([group]), np.array([done]))[0])


def test_the_index_over_one_one_one_ten_worked_by_hand():
    """Sample {1, 1, 1, 10} GPU-s. A fresh job: asking for 1 GPU-s, 3 of 4 finish, at a cost of 1
    each (the 10 too pays 1): 4 GPU-s for 3 finishes, 4/3; asking for 10, all finish for 3 + 10:
    13/4. The best is 4/3 GPU-s a finish. Having done 1, only the 10 is left: 9 GPU-s for 1."""
    samples = DurationSamples(least=1)
    samples.observe(np.zeros((4, 1), dtype=np.int64), [1.0, 1.0, 1.0, 10.0])

    assert key(samples, 0, 0.0) == pytest.approx(4 / 3)
    assert key(samples, 0, 1.0) == pytest.approx(9.0)
    # what a job did is counted at quarter doublings of a GPU-second: 1.1 counts as 1
    assert key(samples, 0, 1.1) == pytest.approx(9.0)
    # past every job of the sample: as much again to go as it did
    assert key(samples, 0, 16.0) == pytest.approx(16.0)


def test_every_column_agrees_with_the_index_worked_out_directly():
    """The vectorised table against the definition, on a heavy-tailed sample."""
    rng = np.random.default_rng(3)
    sample = np.sort(np.exp(rng.normal(5.0, 2.0, 300)))
    keys = sample_keys(sample)
    for column, done in ((0, 0.0), (1, 1.0), (25, 2.0 ** 6), (37, 2.0 ** 9)):
        longer = sample[sample > done]
        best = min(((longer[longer <= end] - done).sum() + (longer > end).sum() * (end - done))
                   / (longer <= end).sum() for end in longer)
        assert keys[column] == pytest.approx(best)


def test_a_group_is_ranked_by_its_sample_only_from_enough_jobs_on_and_only_by_jobs_told():
    """The no-future rule: a job is in its group's sample only once the group is told it finished.
    Its most specific group with ``least`` jobs ranks a job; none: -1 (its lognormal ranks it)."""
    predictor = DurationPredictor((("gpus",), ()))
    samples = predictor.keep_samples(least=3)
    groups = predictor.groups(user=None, name=None, queue=None, num_gpus=[1, 1, 1, 8],
                              submit_time_s=np.zeros(4))
    predictor.observe(groups[:2], [10.0, 20.0])

    assert predictor.predict(groups).sample_group.tolist() == [-1, -1, -1, -1]
    assert samples.sample(groups[0, 1]).tolist() == [10.0, 20.0]

    predictor.observe(groups[2:3], [30.0])  # the third 1-GPU job finishes; the 8-GPU one is still running

    chosen = predictor.predict(groups).sample_group
    assert chosen.tolist() == [groups[0, 0]] * 3 + [groups[3, 1]]  # the 8-GPU job by everyone's
    assert samples.sample(groups[0, 0]).tolist() == [10.0, 20.0, 30.0]
    assert key(samples, groups[0, 0], 0.0) == pytest.approx(sample_keys(np.array([10.0, 20.0, 30.0]))[0])


def test_a_group_keeps_only_its_most_recent_jobs():
    samples = DurationSamples(window=3, least=1)
    samples.observe(np.zeros((8, 1), dtype=np.int64), np.arange(1.0, 9.0))

    assert samples.sample(0).tolist() == [6.0, 7.0, 8.0]
    for value in range(9, 21):  # told one at a time
        samples.observe(np.zeros((1, 1), dtype=np.int64), [float(value)])
    assert samples.sample(0).tolist() == [18.0, 19.0, 20.0]


def test_a_job_past_all_but_a_few_of_its_sample_has_as_much_again_to_go():
    """Sample 100, 200, …, 1,000. Having done 2**9.5 = 724 GPU-s, three are left (800, 900, 1,000):
    over them the best stretch is to 1,000, 528 GPU-s for 3 finishes, 176. So few say little (one
    left: the job would seem all but done as it nears it), so it is believed to have at least as
    much again to go as it did: 724. With five or more left the index stands (done 2**8 = 256: 352)."""
    samples = DurationSamples(least=1)
    samples.observe(np.zeros((10, 1), dtype=np.int64), np.arange(100.0, 1001.0, 100.0))

    assert key(samples, 0, 2 ** 9.5) == pytest.approx(2 ** 9.5)
    longer = np.arange(300.0, 1001.0, 100.0) - 256.0
    assert key(samples, 0, 256.0) == pytest.approx(min(
        (longer[:j + 1].sum() + (len(longer) - 1 - j) * longer[j]) / (j + 1) for j in range(len(longer))))
