"""The Philly trace's public copy (timestamp, duration, num_gpus, gpu_time, cluster) read as it is."""

import gzip

import pytest

from apportion.core.errors import InputError
from apportion.workloads.trace_csv import read_workload_csv
from tests.workloads.test_trace_csv import HEADER, throughputs

SOURCE = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:01:55,66.0,1,66.0,11cb48
2017-10-09 06:13:03,2951.0,2,5902.0,6214e9
2017-10-09 06:13:03,30.0,1,30.0,ee9e8c
2017-10-09 06:00:00,120.0,4,480.0,6214e9
"""

SAME_IN_THE_COMMON_SCHEMA = HEADER + """
philly-000001,0,120,4,,,6214e9,
philly-000002,783,2951,2,,,6214e9,
philly-000003,783,30,1,,,ee9e8c,
philly-000004,3715,66,1,,,11cb48,
"""


def test_the_public_copy_reads_as_the_same_jobs_in_the_common_schema(tmp_path):
    source, common = tmp_path / "philly.csv.gz", tmp_path / "common.csv"
    source.write_bytes(gzip.compress(SOURCE.encode()))
    common.write_text(SAME_IN_THE_COMMON_SCHEMA)
    read = read_workload_csv(source, throughputs=throughputs(), reference_gpu_type="v100")
    expected = read_workload_csv(common, throughputs=throughputs(), reference_gpu_type="v100")
    # sorted by submit time, ties in file order, ids in that order, the virtual cluster as the queue
    assert list(read.job_id) == ["philly-000001", "philly-000002", "philly-000003", "philly-000004"]
    assert list(read.submit_time_s) == [0, 783, 783, 3715]
    assert list(read.num_gpus) == [4, 2, 1, 1]
    assert list(read.queue) == ["6214e9", "6214e9", "ee9e8c", "11cb48"]
    # kinds are drawn row by row in submit order, so the seeded draw is the common file's too
    assert list(read.kind) == list(expected.kind)
    assert list(read.total_steps) == list(expected.total_steps)


def test_a_bad_timestamp_is_named_with_its_line_in_the_file(tmp_path):
    source = tmp_path / "philly.csv"
    source.write_text(SOURCE.replace("2017-10-09 06:13:03,30.0", "yesterday,30.0"))
    with pytest.raises(InputError) as err:
        read_workload_csv(source, throughputs=throughputs(), reference_gpu_type="v100")
    assert str(err.value).endswith("philly.csv:4: field 'timestamp': 'yesterday' is not a time like 2017-10-09 07:01:55")


def test_a_bad_duration_is_named_with_its_line_in_the_file_not_its_sorted_place(tmp_path):
    source = tmp_path / "philly.csv"
    source.write_text(SOURCE.replace("66.0,1,66.0", "-5,1,66.0"))
    with pytest.raises(InputError) as err:
        read_workload_csv(source, throughputs=throughputs(), reference_gpu_type="v100")
    assert ":2: field 'duration': must be > 0" in str(err.value)
