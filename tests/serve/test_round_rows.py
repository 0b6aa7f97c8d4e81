import numpy as np

from apportion.serve.store.round_rows import RoundRows

NAMES = ("id", "status", "steps_done")


def table(rows: RoundRows) -> list[tuple]:
    columns = rows.columns()
    return list(zip(*(columns[name].tolist() for name in NAMES)))


def test_rows_read_again_replace_theirs_in_id_order():
    rows = RoundRows(NAMES, [(1, "queued", 0), (2, "running", 5), (4, "queued", 0)])

    rows.replace([2], [(2, "running", 9)], in_place=True)

    assert table(rows) == [(1, "queued", 0), (2, "running", 9), (4, "queued", 0)]


def test_a_job_read_again_without_a_row_is_gone_and_a_new_one_takes_its_place_by_id():
    rows = RoundRows(NAMES, [(1, "queued", 0), (2, "running", 5), (4, "queued", 0)])

    rows.replace([2, 3, 5], [(3, "queued", 0), (5, "queued", 0)], in_place=True)

    assert table(rows) == [(1, "queued", 0), (3, "queued", 0), (4, "queued", 0), (5, "queued", 0)]


def test_rows_replaced_not_in_place_leave_the_columns_read_before_as_they_were():
    rows = RoundRows(NAMES, [(1, "queued", 0), (2, "running", 5)])
    before = rows.columns()

    after = rows.replace([1], [(1, "running", 3)], in_place=False)

    assert before["steps_done"].tolist() == [0, 5] and table(rows) == [(1, "queued", 0), (2, "running", 5)]
    assert table(after) == [(1, "running", 3), (2, "running", 5)]


def test_the_first_rows_of_an_empty_table_are_read_in():
    rows = RoundRows(NAMES, [])

    rows.replace([7, 6], [(6, "queued", 0), (7, "queued", 0)], in_place=True)

    assert table(rows) == [(6, "queued", 0), (7, "queued", 0)]


def test_a_column_taken_as_numbers_follows_the_rows_read_again():
    rows = RoundRows(NAMES, [(1, "queued", None), (2, "running", 5)])
    assert rows.columns().typed("steps_done", float).tolist()[1] == 5.0

    rows.replace([1, 2], [(1, "running", 2), (2, "running", 7)], in_place=True)
    assert rows.columns().typed("steps_done", float).tolist() == [2.0, 7.0]

    rows.replace([1, 3], [(3, "queued", None)], in_place=True)
    steps = rows.columns().typed("steps_done", float)
    assert steps[0] == 7.0 and np.isnan(steps[1])
