"""Pollux's simulator workloads (name, time, application, num_replicas, batch_size) read as elastic jobs."""

import pytest

from apportion.core.errors import InputError
from apportion.workloads.elastic_pollux import read_pollux_workload


def write(tmp_path, text):
    path = tmp_path / "workload-1.csv"
    path.write_text(text)
    return path


def test_each_row_is_an_elastic_job_of_its_application_at_its_users_gpus_and_batch(tmp_path):
    jobs = read_pollux_workload(write(tmp_path, "name,time,application,num_replicas,batch_size\n"
                                                "cifar10-0,107,cifar10,6,2048\nncf-1,30,ncf,1,32768\n"))

    assert list(jobs.job_id) == ["ncf-1", "cifar10-0"]  # in submit order
    assert jobs.submit_time_s.tolist() == [30.0, 107.0]
    assert [jobs.kinds[k] for k in jobs.kind] == ["ncf", "cifar10"]
    assert jobs.num_gpus.tolist() == [1, 6]
    assert jobs.elastic.batch_size.tolist() == [32768.0, 2048.0]
    assert jobs.elastic.min_gpus.tolist() == [1, 1]
    assert jobs.elastic.max_gpus.tolist() == [64, 64]  # as many as their largest batch has micro-batches, at most 64


@pytest.mark.parametrize("row, message", [
    ("a,1,resnet,1,128", ":2: field 'application': unknown application 'resnet'"),
    ("a,1,cifar10,0,128", ":2: field 'num_replicas': must be a whole number >= 1, got '0'"),
    ("a,soon,cifar10,1,128", ":2: field 'time': must be a number, got 'soon'"),
])
def test_a_bad_row_names_its_line_and_field(tmp_path, row, message):
    path = write(tmp_path, "name,time,application,num_replicas,batch_size\n" + row + "\n")
    with pytest.raises(InputError, match=message):
        read_pollux_workload(path)


def test_a_file_without_pollux_columns_says_which_are_missing(tmp_path):
    with pytest.raises(InputError, match="missing column.s. num_replicas, batch_size"):
        read_pollux_workload(write(tmp_path, "name,time,application\na,1,ncf\n"))
