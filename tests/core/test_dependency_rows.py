"""Dependencies as compressed rows: gathered for a subset, renumbered when a table is cut."""

from apportion.core.dependencies import Dependencies

# job 0 waits for nothing, 1 for 0, 2 for 0 and 1, 3 for 2
CHAIN = Dependencies.of_lists([[], [0], [0, 1], [2]])


def lists(after: Dependencies) -> list[list[int]]:
    return [after.of(i).tolist() for i in range(len(after))]


def test_a_subset_keeps_the_keys_as_they_are():
    assert lists(CHAIN.subset([3, 2])) == [[2], [0, 1]]


def test_take_renumbers_the_keys_and_drops_those_of_jobs_left_out():
    assert lists(CHAIN.take([1, 2, 3])) == [[], [0], [1]]


def test_take_in_another_order_follows_the_new_positions():
    assert lists(CHAIN.take([3, 2, 1, 0])) == [[1], [3, 2], [3], []]
