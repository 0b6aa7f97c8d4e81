"""The Pollux-shaped elastic workload: its size, arrivals, model mix and the sizes users pick."""

from collections import Counter

import numpy as np
import pytest

from apportion.core.errors import InputError
from apportion.workloads.elastic_kinds import builtin_elastic_kinds
from apportion.workloads.elastic_workload import MODEL_MIX, generate_elastic_workload, user_configurations


def test_160_jobs_over_about_8_hours_by_default():
    jobs = generate_elastic_workload(seed=0)

    assert len(jobs) == 160
    assert jobs.submit_time_s[0] == 0.0
    assert 6 * 3600 < jobs.submit_time_s[-1] < 10 * 3600
    assert jobs.elastic is not None and jobs.kinds == builtin_elastic_kinds().names


def test_the_models_come_in_the_papers_mix():
    kinds = builtin_elastic_kinds()
    names = np.concatenate([np.asarray(kinds.names)[generate_elastic_workload(seed=s).kind] for s in range(5)])
    counts = Counter(names.tolist())

    for model, share in MODEL_MIX.items():
        assert counts[model] / len(names) == pytest.approx(share, abs=0.05)


def test_each_job_runs_at_a_size_its_user_would_pick_and_targets_its_models_goal():
    jobs = generate_elastic_workload(seed=1)
    kinds = jobs.elastic.kinds

    for row in range(len(jobs)):
        k = jobs.kind[row]
        assert (jobs.num_gpus[row], jobs.elastic.batch_size[row]) in user_configurations(kinds, k)
        assert jobs.total_steps[row] == kinds.target_examples[k]
        assert jobs.elastic.min_gpus[row] == 1 <= jobs.num_gpus[row] <= jobs.elastic.max_gpus[row] <= 64


def test_users_pick_sizes_that_scale_at_half_to_four_fifths_of_ideal():
    kinds = builtin_elastic_kinds()
    picks = dict(user_configurations(kinds, kinds.index("cifar10")))

    assert 1 not in picks and all(batch >= kinds.init_batch[kinds.index("cifar10")] for batch in picks.values())


def test_the_same_seed_gives_the_same_workload():
    a, b = generate_elastic_workload(seed=3), generate_elastic_workload(seed=3)
    assert np.array_equal(a.submit_time_s, b.submit_time_s) and np.array_equal(a.num_gpus, b.num_gpus)


@pytest.mark.parametrize("options, message", [
    ({"jobs": 0}, "field 'jobs': must be a whole number >= 1, got 0"),
    ({"rate_per_hour": -1.0}, "field 'rate_per_hour': must be a positive number, got -1.0"),
])
def test_bad_settings_are_named(options, message):
    with pytest.raises(InputError, match=message):
        generate_elastic_workload(**options)
