"""Elastic jobs in a trace CSV: the columns, their defaults, and an error naming the line and
field of each kind of bad value; elastic workloads through load_inputs."""

import numpy as np
import pytest

from apportion.core.errors import InputError
from apportion.experiment import WorkloadSettings, load_inputs
from apportion.workloads.catalog import builtin_throughputs
from apportion.workloads.elastic_kinds import builtin_elastic_kinds
from apportion.workloads.trace_csv import read_workload_csv

HEADER = "job_id,submit_time_s,kind,num_gpus,min_gpus,max_gpus,batch_size,target_examples\n"


def read(tmp_path, body: str, header: str = HEADER):
    path = tmp_path / "elastic.csv"
    path.write_text(header + body)
    return read_workload_csv(path, throughputs=builtin_throughputs())


def test_elastic_rows_become_elastic_jobs_with_their_limits_batch_and_target(tmp_path):
    jobs = read(tmp_path, "a,0,cifar10,4,2,16,1024,\nb,60,bert,2,,,24,100000\n")
    kinds = jobs.elastic.kinds

    assert jobs.job_id.tolist() == ["a", "b"]
    assert [kinds.names[k] for k in jobs.kind] == ["cifar10", "bert"]
    assert jobs.num_gpus.tolist() == [4, 2]
    assert jobs.elastic.min_gpus.tolist() == [2, 1]  # min_gpus left empty: 1
    assert jobs.elastic.max_gpus.tolist() == [16, 64]  # empty: as many as its batch allows, at most 64
    assert jobs.elastic.batch_size.tolist() == [1024.0, 24.0]
    assert jobs.total_steps.tolist() == [kinds.target_examples[kinds.index("cifar10")], 100000.0]


def test_a_trace_with_only_the_required_columns_and_one_elastic_column_is_elastic(tmp_path):
    jobs = read(tmp_path, "a,0,ncf,1,32768\n", header="job_id,submit_time_s,kind,num_gpus,batch_size\n")
    assert jobs.elastic is not None and jobs.elastic.batch_size.tolist() == [32768.0]


def test_fixed_size_traces_are_read_as_before(tmp_path):
    jobs = read(tmp_path, "a,0,100,1\n", header="job_id,submit_time_s,duration_s,num_gpus\n")
    assert jobs.elastic is None


@pytest.mark.parametrize("row, message", [
    ("a,0,resnet,4,1,16,1024,", "line 2: field 'kind': unknown elastic job kind 'resnet' (known: bert, cifar10,"),
    ("a,0,cifar10,four,1,16,1024,", "line 2: field 'num_gpus': 'four' is not a number"),
    ("a,0,cifar10,4,5,16,1024,", "line 2: field 'min_gpus': 5 is more than the row's num_gpus, 4"),
    ("a,0,cifar10,4,1,2,1024,", "line 2: field 'max_gpus': 2 is less than the row's num_gpus, 4"),
    ("a,0,cifar10,4,1,1.5,1024,", "line 2: field 'max_gpus': must be a whole number from 1"),
    ("a,0,cifar10,4,1,16,64,", "line 2: field 'batch_size': 64 is below cifar10's smallest batch, 128 (its M0)"),
    ("a,0,cifar10,4,1,16,99999,", "line 2: field 'batch_size': 99999 is above cifar10's largest batch, 4096"),
    ("a,0,cifar10,64,1,64,1024,", "line 2: field 'batch_size': 1024 on 64 GPUs is 16 examples a GPU, fewer than "
                                  "cifar10's smallest micro-batch, 32"),
    ("a,0,cifar10,4,1,16,1024,-3", "line 2: field 'target_examples': must be > 0"),
])
def test_a_bad_value_is_named_by_line_and_field(tmp_path, row, message):
    with pytest.raises(InputError) as error:
        read(tmp_path, row + "\n")
    assert message in str(error.value).replace(":2:", " line 2:")


def test_a_missing_kind_column_is_named(tmp_path):
    with pytest.raises(InputError, match="field 'kind': missing required column"):
        read(tmp_path, "a,0,4,1024\n", header="job_id,submit_time_s,num_gpus,batch_size\n")


def test_elastic_jobs_asking_for_cpu_cores_are_refused_at_the_header(tmp_path):
    with pytest.raises(InputError) as error:
        read(tmp_path, "a,0,ncf,1,32768,4\n", header="job_id,submit_time_s,kind,num_gpus,batch_size,cpus\n")
    assert (error.value.line, error.value.field) == (1, "cpus")
    assert "elastic jobs cannot ask for CPU cores or memory" in error.value.message


def test_the_pollux_shape_loads_an_elastic_workload_and_a_cluster_it_has_models_for():
    inputs = load_inputs(WorkloadSettings(jobs=20, rate_per_hour=20.0, shape="pollux", cluster="t4:16,v100:8"))

    assert len(inputs.jobs) == 20 and inputs.jobs.elastic is not None
    assert set(inputs.cluster.gpu_types) <= set(builtin_elastic_kinds().gpu_types)
    assert np.all(inputs.jobs.elastic.max_gpus >= inputs.jobs.num_gpus)
