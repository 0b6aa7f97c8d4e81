"""The Optimus-style baseline: GPUs to the job whose remaining time falls most, batch sizes fixed."""

import numpy as np

from apportion.core.views import ThroughputView
from apportion.policies import make_policy

from test_goodput import KINDS, cluster, elastic_jobs

NO_RATES = ThroughputView(np.zeros((0, 0)))


def test_every_job_first_gets_one_gpu_then_the_rest_go_where_they_save_most_time():
    # ImageNet has hundreds of hours left, CIFAR-10 one: the spare GPUs save far more time on ImageNet
    jobs = with_batches(elastic_jobs(["imagenet", "cifar10"], progress=[0.1, 0.9], gpu_types=("t4",)),
                        [3200.0, 2048.0])
    allocation = make_policy("optimus").allocate(jobs, cluster(16), NO_RATES)

    assert allocation.share[:, 0].tolist() == [1.0, 1.0]
    assert allocation.num_gpus[0] > allocation.num_gpus[1] >= 1
    assert allocation.num_gpus.sum() <= 16
    assert allocation.batch_size.tolist() == [3200.0, 2048.0]  # batch sizes stay the users'


def with_batches(jobs, batches):
    elastic = type(jobs.elastic)(**{**jobs.elastic.__dict__, "batch_size": np.asarray(batches, dtype=float)})
    return type(jobs)(**{**jobs.__dict__, "elastic": elastic})


def test_a_job_gets_no_more_gpus_than_its_batch_has_micro_batches():
    # CIFAR-10 at batch 128 with micro-batches of at least 32: 4 GPUs at most, however many are free
    jobs = with_batches(elastic_jobs(["cifar10"], progress=[0.9], gpu_types=("t4",)), [128.0])
    allocation = make_policy("optimus").allocate(jobs, cluster(64), NO_RATES)

    assert 1 <= allocation.num_gpus[0] <= 128 / KINDS.min_local_batch[KINDS.index("cifar10")] == 4
