import json
import pickle
import random

import pytest

from apportion.runtime import ResumableSampler
from apportion.runtime.sampler import epoch_permutation


def test_each_epoch_is_a_permutation_and_epochs_differ():
    sampler = ResumableSampler(50, seed=3)
    first, second = sampler.take(50), sampler.take(50)
    assert sorted(first) == list(range(50)) and sorted(second) == list(range(50))
    assert first != second
    assert sampler.state() == {"length": 50, "seed": 3, "epoch": 2, "position": 0}


def test_order_depends_on_seed_only_not_on_global_random_state():
    random.seed(1)
    a = ResumableSampler(100, seed=7).take(250)
    random.seed(2)
    random.random()
    b = ResumableSampler(100, seed=7).take(250)
    assert a == b
    assert ResumableSampler(100, seed=8).take(250) != a
    assert epoch_permutation(100, 7, 0) == a[:100]


@pytest.mark.parametrize("length,epochs", [(1, 3), (7, 3), (20, 2)])
def test_resume_at_every_position_yields_the_uninterrupted_sequence(length, epochs):
    total = length * epochs
    uninterrupted = ResumableSampler(length, seed=11).take(total)
    for cut in range(total + 1):
        before = ResumableSampler(length, seed=11)
        head = before.take(cut)
        saved = json.loads(json.dumps(before.state()))  # a state survives JSON and pickle
        saved = pickle.loads(pickle.dumps(saved))
        after = ResumableSampler(length, seed=11)
        after.load_state(saved)
        assert head + after.take(total - cut) == uninterrupted, f"cut at {cut}"


def test_iteration_as_a_torch_style_sampler_resumes_mid_epoch():
    uninterrupted = ResumableSampler(10, seed=0)
    epochs = [list(uninterrupted) for _ in range(3)]  # each iter() is one epoch
    assert all(sorted(e) == list(range(10)) for e in epochs)

    sampler = ResumableSampler(10, seed=0)
    it = iter(sampler)
    head = [next(it) for _ in range(4)]
    assert len(sampler) == 6  # the rest of the epoch
    resumed = ResumableSampler(10, seed=0)
    resumed.load_state(sampler.state())
    rest_of_epoch = list(resumed)
    assert head + rest_of_epoch == epochs[0]
    assert list(resumed) == epochs[1] and list(resumed) == epochs[2]


def test_seek_and_set_epoch():
    reference = ResumableSampler(6, seed=5).take(20)
    sampler = ResumableSampler(6, seed=5)
    sampler.seek(13)
    assert sampler.take(7) == reference[13:]
    sampler.set_epoch(1)
    assert sampler.take(6) == reference[6:12]


def test_state_of_another_data_set_is_refused():
    sampler = ResumableSampler(10, seed=0)
    with pytest.raises(ValueError, match="length=12"):
        sampler.load_state(ResumableSampler(12, seed=0).state())
    with pytest.raises(ValueError):
        ResumableSampler(0)
