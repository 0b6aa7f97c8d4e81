"""Placement: concrete GPU ids for each job this round, gangs kept on as few nodes as possible."""

import numpy as np

from apportion.core.cluster import parse_cluster_shorthand
from apportion.mechanism.placement import Placement, place_on_gpus


def nodes_of(cluster, owner, job):
    return sorted(set(cluster.gpu_node[owner == job].tolist()))


def idle(cluster):
    return np.full(cluster.num_gpus, -1)


def test_a_4_gpu_job_on_4_gpu_nodes_lands_on_one_node():
    cluster = parse_cluster_shorthand("v100:12")  # 3 nodes of 4
    # job 0 (1 GPU) holds GPU 5 on node 1; job 1 wants 4 GPUs
    previous = idle(cluster)
    previous[5] = 0
    owner, kept = place_on_gpus(cluster, previous, np.array([0, 0]), np.array([1, 4]))

    assert np.count_nonzero(owner == 1) == 4
    assert len(nodes_of(cluster, owner, 1)) == 1
    assert nodes_of(cluster, owner, 1) != [1]  # not the node job 0 is on
    assert owner[5] == 0 and kept.tolist() == [True, False]


def test_an_8_gpu_job_spans_exactly_two_nodes():
    cluster = parse_cluster_shorthand("v100:16")  # 4 nodes of 4
    previous = idle(cluster)
    previous[[1, 9]] = [0, 1]  # two single-GPU jobs hold GPUs on nodes 0 and 2
    owner, _ = place_on_gpus(cluster, previous, np.array([0, 0, 0]), np.array([1, 1, 8]))

    assert np.count_nonzero(owner == 2) == 8
    assert nodes_of(cluster, owner, 2) == [1, 3]  # the two whole free nodes


def test_an_8_gpu_job_spans_two_nodes_even_on_an_idle_cluster():
    cluster = parse_cluster_shorthand("v100:8,v100:8")
    owner, _ = place_on_gpus(cluster, idle(cluster), np.array([0]), np.array([8]))

    assert len(nodes_of(cluster, owner, 0)) == 2


def test_a_job_that_keeps_type_and_count_keeps_its_gpus():
    cluster = parse_cluster_shorthand("v100:8,k80:4")
    # job 0 held GPUs 2 and 5 (two nodes); job 1 held k80 GPU 9
    previous = idle(cluster)
    previous[[2, 5]] = 0
    previous[9] = 1
    owner, kept = place_on_gpus(cluster, previous, np.array([0, 1, 0]), np.array([2, 1, 4]))

    assert np.flatnonzero(owner == 0).tolist() == [2, 5]  # lease renewed, not defragmented
    assert np.flatnonzero(owner == 1).tolist() == [9]
    assert kept.tolist() == [True, True, False]
    assert np.count_nonzero(owner == 2) == 4


def test_a_job_that_changes_type_or_count_is_not_kept():
    cluster = parse_cluster_shorthand("v100:4,k80:4")
    previous = idle(cluster)
    previous[[0]] = 0  # job 0 held v100 GPU 0
    previous[[4, 5]] = 1  # job 1 held 2 k80s
    # job 0 moves to k80; job 1 now runs on v100 (same count, other type)
    owner, kept = place_on_gpus(cluster, previous, np.array([1, 0]), np.array([1, 2]))

    assert kept.tolist() == [False, False]
    assert set(cluster.gpu_type[owner == 0].tolist()) == {1}
    assert set(cluster.gpu_type[owner == 1].tolist()) == {0}


def test_single_gpu_jobs_fill_a_partly_used_node_before_an_empty_one():
    cluster = parse_cluster_shorthand("v100:8")  # nodes 0 (GPUs 0-3) and 1 (GPUs 4-7)
    previous = idle(cluster)
    previous[6] = 0  # node 1 is partly used
    owner, _ = place_on_gpus(cluster, previous, np.array([0, 0, 0, 0]), np.array([1, 1, 1, 1]))

    # three new singles: node 1 has 3 free GPUs, they all go there; node 0 stays whole for a gang
    for job in (1, 2, 3):
        assert nodes_of(cluster, owner, job) == [1]
    assert np.all(owner[:4] == -1)


def test_jobs_that_wait_get_nothing():
    cluster = parse_cluster_shorthand("v100:4")
    previous = idle(cluster)
    previous[:2] = 0
    owner, kept = place_on_gpus(cluster, previous, np.array([-1, 0]), np.array([2, 1]))

    assert np.count_nonzero(owner == 0) == 0
    assert np.count_nonzero(owner == 1) == 1
    assert kept.tolist() == [False, False]
    assert Placement(owner).busy_gpus() == 1


def test_round_after_round_every_job_gets_exactly_its_gpus_and_no_gpu_two_jobs():
    """Random rounds on a mixed cluster: the mechanism's choices are within capacity; placement
    gives each chosen job exactly num_gpus GPUs of its type, and each GPU at most one job."""
    rng = np.random.default_rng(5)
    cluster = parse_cluster_shorthand("v100:16,p100:8:2,k80:6:4")
    n = 12
    num_gpus = rng.choice([1, 1, 1, 2, 4, 8], size=n)
    previous = idle(cluster)
    for _ in range(300):
        chosen = np.full(n, -1)
        left = cluster.capacity.copy()
        for j in rng.permutation(n):
            t = int(rng.integers(0, 3))
            if rng.uniform() < 0.8 and left[t] >= num_gpus[j]:
                chosen[j] = t
                left[t] -= num_gpus[j]
        # jobs that keep their type often keep running
        for j in range(n):
            held = np.flatnonzero(previous == j)
            if len(held) and rng.uniform() < 0.5 and chosen[j] < 0:
                t = cluster.gpu_type[held[0]]
                if left[t] >= num_gpus[j]:
                    chosen[j] = t
                    left[t] -= num_gpus[j]

        owner, kept = place_on_gpus(cluster, previous, chosen, num_gpus)

        counts = np.bincount(owner[owner >= 0], minlength=n)
        assert np.array_equal(counts, np.where(chosen >= 0, num_gpus, 0))
        for j in np.flatnonzero(chosen >= 0):
            assert np.all(cluster.gpu_type[owner == j] == chosen[j])
            if kept[j]:
                assert np.array_equal(np.flatnonzero(owner == j), np.flatnonzero(previous == j))
        previous = owner


def test_a_2_gpu_job_takes_the_tightest_node_that_fits():
    cluster = parse_cluster_shorthand("v100:12")  # nodes 0, 1, 2 of 4 GPUs
    previous = idle(cluster)
    previous[0] = 0  # node 0: 3 free
    previous[[4, 5]] = 1  # node 1: 2 free
    owner, _ = place_on_gpus(cluster, previous, np.array([0, 0, 0]), np.array([1, 2, 2]))

    assert nodes_of(cluster, owner, 2) == [1]  # exactly fills node 1; node 2 stays whole


def test_a_gang_that_fits_no_single_node_uses_the_emptiest_nodes():
    cluster = parse_cluster_shorthand("v100:12")
    previous = idle(cluster)
    previous[[0, 1, 2]] = 0  # node 0: 1 free
    previous[4] = 1  # node 1: 3 free
    previous[8] = 2  # node 2: 3 free
    owner, _ = place_on_gpus(cluster, previous, np.array([0, 0, 0, 0]), np.array([3, 1, 1, 6]))

    # 6 GPUs: 3 on node 1 and 3 on node 2 (two nodes), not 1 + 3 + 2 over three
    assert nodes_of(cluster, owner, 3) == [1, 2]
