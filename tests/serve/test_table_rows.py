import numpy as np

from apportion.serve.store.table_rows import TableRows


def table() -> dict[str, np.ndarray]:
    columns = {"id": [1, 2], "slots": ["v100:0,v100:1", ""], "service_by_type": ['{"v100": 30.0}', "{}"],
               "shared_by_type": ["{}", '{"1:k80": 5.0}']}
    return {name: np.array(values, dtype=object) for name, values in columns.items()}


def test_rows_come_with_their_slots_listed_and_their_service_parsed():
    first, second = TableRows().rows(table(), np.array([0, 1]))

    assert first == {"id": 1, "slots": "v100:0,v100:1", "slot_list": ["v100:0", "v100:1"],
                     "service_by_type": {"v100": 30.0}, "shared_by_type": {}}
    assert second["slot_list"] == [] and second["shared_by_type"] == {"1:k80": 5.0}


def test_seconds_by_type_follow_the_types_given_with_zero_for_a_type_never_held():
    rows = TableRows()

    assert rows.seconds_by_type('{"v100": 30.0, "k80": 2.5}', ("k80", "p100", "v100")) == (2.5, 0.0, 30.0)


def test_a_text_written_reads_back_as_its_value_the_next_round():
    rows = TableRows()
    text = rows.text({"v100": 42.0})
    rows.next_round()

    assert text == '{"v100": 42.0}' and rows.parsed(text) == {"v100": 42.0}
