"""The public traces of the field, read as their owners publish them (small files in each real format)."""

import gzip
import json

import pytest

from apportion.core.errors import InputError
from apportion.workloads.trace_csv import read_trace_rows, read_workload_csv
from tests.workloads.test_trace_csv import throughputs

HELIOS = """job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue
1425511,uXBbc,vcJkd,1,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-10 04:55:09,36848,0
1425512,uVMrF,vchbv,4,16,1,FAILED,2020-06-09 18:41:27,2020-06-09 18:41:27,2020-06-09 18:45:36,249,0
1425513,uzqls,vcpDC,0,4,1,COMPLETED,2020-06-09 18:41:28,2020-06-09 18:41:28,2020-06-09 18:42:28,60,0
1425514,uzqls,vcpDC,8,32,1,CANCELLED,2020-06-09 18:40:00,2020-06-09 18:45:00,2020-06-09 19:45:00,3600,300
1425515,uzqls,vcpDC,2,8,1,CANCELLED,2020-06-09 18:42:00,,,0,0
"""

PAI_JOBS = """4b3f04b66a525d2df903eb16,8cb3bec23d14,58540f191766,Terminated,4550879.0,4551416.0
4f057009a5d481acec67b088,9a1c2d3e4f50,d2d3b77d342e,Failed,4550000.0,4552000.0
aa057009a5d481acec67b0ff,77aa2d3e4f50,d2d3b77d342e,Terminated,4550100.0,4550200.0
bb057009a5d481acec67b0ff,88aa2d3e4f50,58540f191766,Waiting,4550300.0,
"""
PAI_TASKS = """4b3f04b66a525d2df903eb16,worker,2.0,Terminated,4550900.0,4551400.0,600.0,29.296875,50.0,MISC
4f057009a5d481acec67b088,ps,1.0,Failed,4550010.0,4551990.0,400.0,10.0,,
4f057009a5d481acec67b088,worker,4.0,Failed,4550020.0,4551900.0,800.0,20.0,100.0,V100
aa057009a5d481acec67b0ff,tensorflow,1.0,Terminated,4550110.0,4550190.0,600.0,8.0,0.0,
bb057009a5d481acec67b0ff,worker,1.0,Waiting,,,600.0,8.0,100.0,T4
"""

POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
PODS = POD_HEADER + """
openb-pod-0017,88000,327680,8,1000,V100M32,LS,Succeeded,9437497,10769854,9437497
openb-pod-0022,4000,15258,1,460,,BE,Succeeded,9400000,9500000,9400100
openb-pod-0023,8000,30517,0,0,,LS,Running,9300000,9900000,9300000
openb-pod-0024,6000,12288,1,1000,P100|T4,Burstable,Pending,9450000,,
"""

PHILLY_LOG = [
    {"status": "Pass", "vc": "ee9e8c", "jobid": "application_1506638472019_14199",
     "attempts": [{"start_time": "2017-10-07 01:12:09", "end_time": "2017-10-07 01:13:23",
                   "detail": [{"ip": "m47", "gpus": ["gpu0", "gpu1", "gpu2", "gpu3"]}]},
                  {"start_time": "2017-10-07 01:13:30", "end_time": "2017-10-07 02:13:30",
                   "detail": [{"ip": "m412", "gpus": [f"gpu{i}" for i in range(8)]}]}],
     "submitted_time": "2017-10-07 01:11:39", "user": "ce2f4c"},
    {"status": "Killed", "vc": "6214e9", "jobid": "application_1506638472019_14200",
     "attempts": [], "submitted_time": "2017-10-07 01:00:00", "user": "ab12cd"},
    {"status": "Failed", "vc": "6214e9", "jobid": "application_1506638472019_14201",
     "attempts": [{"start_time": "2017-10-07 01:05:00", "end_time": "None",
                   "detail": [{"ip": "m1", "gpus": ["gpu0"]}]},
                  {"start_time": "2017-10-07 01:06:00", "end_time": "2017-10-07 01:07:40",
                   "detail": [{"ip": "m2", "gpus": ["gpu0"]}]}],
     "submitted_time": "2017-10-07 01:01:39", "user": "ab12cd"},
]


def rows(tmp_path, name, text, trace_format=None):
    path = tmp_path / name
    path.write_text(text)
    return read_trace_rows(path, trace_format)


def error_of(path, trace_format=None) -> str:
    with pytest.raises(InputError) as err:
        read_workload_csv(path, throughputs=throughputs(), reference_gpu_type="v100", trace_format=trace_format)
    return str(err.value)


# Helios

def test_a_helios_cluster_log_becomes_its_gpu_jobs_in_submit_order(tmp_path):
    path = tmp_path / "cluster_log.csv"
    path.write_text(HELIOS)
    jobs = read_workload_csv(path, throughputs=throughputs(), reference_gpu_type="v100")
    assert list(jobs.job_id) == ["1425514", "1425511", "1425512"]  # CPU-only and 0 s jobs left out
    assert list(jobs.submit_time_s) == [0, 61, 87]
    assert list(jobs.num_gpus) == [8, 1, 4]
    assert list(jobs.queue) == ["vcpDC", "vcJkd", "vchbv"]  # the virtual cluster, not Helios's wait time
    assert list(jobs.user) == ["uzqls", "uXBbc", "uVMrF"]
    read = read_trace_rows(path)
    assert list(read.columns["duration_s"]) == ["3600.0", "36848.0", "249.0"]
    assert list(read.columns["status"]) == ["killed", "completed", "failed"]
    assert read.skipped == {"CPU-only jobs (gpu_num 0)": 1, "jobs that ran 0 s": 1}


def test_a_malformed_helios_row_names_the_file_line_and_field(tmp_path):
    path = tmp_path / "cluster_log.csv"
    path.write_text(HELIOS.replace("uVMrF,vchbv,4,", "uVMrF,vchbv,four,"))
    assert error_of(path).endswith("cluster_log.csv:3: field 'gpu_num': 'four' is not a number")
    path.write_text(HELIOS.replace("FAILED,2020-06-09 18:41:27", "FAILED,June 9th"))
    assert error_of(path).endswith("cluster_log.csv:3: field 'submit_time': 'June 9th' is not a time like "
                                   "2020-06-09 18:41:01")


# Alibaba PAI 2020

def test_the_pai_tables_join_into_jobs_with_gpu_types_and_whole_gpus(tmp_path):
    (tmp_path / "pai_task_table.csv").write_text(PAI_TASKS)
    (tmp_path / "pai_job_table.csv").write_text(PAI_JOBS)
    read = rows(tmp_path, "pai_job_table.csv", PAI_JOBS)
    by_id = {job: i for i, job in enumerate(read.columns["job_id"])}
    assert list(by_id) == ["4f057009a5d481acec67b088", "4b3f04b66a525d2df903eb16"]  # submit order
    first, second = by_id["4f057009a5d481acec67b088"], by_id["4b3f04b66a525d2df903eb16"]
    # 4 workers x 100% = 4 GPUs on V100 (the ps asks none); 2 workers x 50% = 1 GPU, MISC
    assert read.columns["num_gpus"][first] == "4" and read.columns["gpu_type"][first] == "V100"
    assert read.columns["num_gpus"][second] == "1" and read.columns["gpu_type"][second] == "MISC"
    # submit times from the job table (its start_time is the submission), durations from the tasks
    assert list(read.columns["submit_time_s"]) == ["0.0", "879.0"]
    assert read.columns["duration_s"][first] == "1980.0" and read.columns["duration_s"][second] == "500.0"
    assert read.columns["user"][first] == "d2d3b77d342e" and read.columns["status"][first] == "failed"
    assert read.columns["cpus"][first] == "36.0"  # 4 + 4 x 8 cores
    assert read.skipped == {"jobs asking no GPU": 1, "jobs whose tasks never started or never ended": 1}
    # naming the task table reads the same jobs
    assert list(rows(tmp_path, "pai_task_table.csv", PAI_TASKS).columns["job_id"]) == list(by_id)
    jobs = read_workload_csv(tmp_path / "pai_job_table.csv", throughputs=throughputs(), reference_gpu_type="v100")
    assert list(jobs.num_gpus) == [4, 1]


def test_a_pai_job_table_without_its_task_table_says_what_it_needs(tmp_path):
    path = tmp_path / "pai_job_table.csv"
    path.write_text(PAI_JOBS)
    assert "a PAI job table needs its task table (GPUs are there): no " in error_of(path)
    assert error_of(path).endswith("pai_task_table.csv")


def test_a_malformed_pai_task_row_names_the_task_file_line_and_field(tmp_path):
    (tmp_path / "pai_job_table.csv").write_text(PAI_JOBS)
    (tmp_path / "pai_task_table.csv").write_text(PAI_TASKS.replace("800.0,20.0,100.0", "800.0,20.0,lots"))
    message = error_of(tmp_path / "pai_job_table.csv")
    assert message.endswith("pai_task_table.csv:3: field 'plan_gpu': 'lots' is not a number")
    (tmp_path / "pai_task_table.csv").write_text(PAI_TASKS.replace(",MISC\n", "\n"))
    assert "pai_task_table.csv:1: has 9 fields, a PAI task table has 10" in error_of(tmp_path / "pai_job_table.csv")


# Alibaba 2023 (openb_pod_list)

def test_an_openb_pod_list_reads_gpu_pods_and_a_gpu_share_as_one_whole_gpu(tmp_path):
    read = rows(tmp_path, "openb_pod_list_default.csv", PODS)
    assert list(read.columns["job_id"]) == ["openb-pod-0022", "openb-pod-0017"]
    assert list(read.columns["num_gpus"]) == ["1", "8"]
    assert list(read.columns["submit_time_s"]) == ["0.0", "37497.0"]
    assert list(read.columns["duration_s"]) == ["99900.0", "1332357.0"]  # deletion - scheduled
    assert list(read.columns["gpu_type"]) == ["", "V100M32"]
    assert list(read.columns["cpus"]) == ["4.0", "88.0"]
    assert read.columns["memory_gib"][1] == "320.0"
    assert read.skipped == {"CPU-only pods (num_gpu 0)": 1, "pods never scheduled or not yet deleted": 1}
    assert read.notes == ["1 pods asked for a share of one GPU (gpu_milli under 1000); each is read as a job "
                          "holding one whole GPU"]


def test_a_share_of_several_gpus_is_refused_naming_its_line(tmp_path):
    path = tmp_path / "openb_pod_list_multigpu50.csv"
    path.write_text(PODS.replace("8,1000,V100M32", "8,500,V100M32"))
    assert error_of(path).endswith(
        "openb_pod_list_multigpu50.csv:2: field 'gpu_milli': a share ('500' thousandths) of each of several GPUs "
        "cannot be modelled: apportion gives a job whole GPUs; leave the row out or make it gpu_milli 1000")


def test_a_malformed_pod_row_names_the_file_line_and_field(tmp_path):
    path = tmp_path / "openb_pod_list_default.csv"
    path.write_text(PODS.replace("9400000,9500000,9400100", "9400000,soon,9400100"))
    assert error_of(path).endswith("openb_pod_list_default.csv:3: field 'deletion_time': 'soon' is not a number")


# Philly's raw cluster_job_log

def test_the_philly_job_log_reads_jobs_with_their_attempts(tmp_path):
    path = tmp_path / "cluster_job_log"
    path.write_bytes(gzip.compress(json.dumps(PHILLY_LOG, indent=4).encode()))
    read = read_trace_rows(path)
    assert list(read.columns["job_id"]) == ["application_1506638472019_14201", "application_1506638472019_14199"]
    assert list(read.columns["submit_time_s"]) == ["0.0", "600.0"]
    assert list(read.columns["num_gpus"]) == ["1", "8"]  # the most GPUs an attempt held
    assert list(read.columns["duration_s"]) == ["100.0", "3674.0"]  # attempts' run times, summed
    assert list(read.columns["queue"]) == ["6214e9", "ee9e8c"]
    assert list(read.columns["status"]) == ["failed", "completed"]
    assert read.skipped == {"jobs with no attempt that started and ended": 1}
    jobs = read_workload_csv(path, throughputs=throughputs(), reference_gpu_type="v100")
    assert list(jobs.num_gpus) == [1, 8]


def test_a_malformed_philly_job_names_the_line_its_entry_starts_on(tmp_path):
    log = [dict(job) for job in PHILLY_LOG]
    log[2] = dict(log[2], submitted_time="last Tuesday")
    path = tmp_path / "cluster_job_log"
    text = json.dumps(log, indent=4)
    path.write_text(text)
    line = [i for i, t in enumerate(text.splitlines(), 1) if t == "    {"][2]  # the third entry opens
    assert error_of(path).endswith(f"cluster_job_log:{line}: field 'submitted_time': 'last Tuesday' is not a time "
                                   "like 2017-10-07 01:11:39")


def test_a_named_format_reads_the_file_as_that_format_and_an_unknown_one_is_refused(tmp_path):
    path = tmp_path / "cluster_log.csv"
    path.write_text(HELIOS)
    assert error_of(path, "alibaba-2023").endswith("cluster_log.csv:1: field 'name': missing required column of "
                                                   "an openb_pod_list file")
    assert "unknown trace format 'slurm' (known: apportion, philly, philly-log, helios, pai, alibaba-2023)" in \
        error_of(path, "slurm")


def test_a_job_log_that_is_not_a_list_of_jobs_is_one_error_not_a_traceback(tmp_path):
    path = tmp_path / "cluster_job_log"
    for text, expected in (("[" * 100000, "cluster_job_log:1: not JSON a job log has: nested too deeply"),
                           ('[{"jobid": 1}\n{"jobid": 2}]', "cluster_job_log:2: not JSON: expected ',' or ']'"),
                           ('{"jobid": 1}', "cluster_job_log:1: a Philly cluster_job_log is a JSON list of jobs"),
                           ('[{"attempts": "x"}]', "cluster_job_log:1: field 'attempts': must be a list")):
        path.write_text(text)
        assert expected in error_of(path)
    odd = [dict(PHILLY_LOG[0], attempts=[dict(PHILLY_LOG[0]["attempts"][0], detail=[{"gpus": 3}, "m1"])]),
           PHILLY_LOG[0]]
    path.write_text(json.dumps(odd))
    assert list(read_trace_rows(path).columns["num_gpus"]) == ["8"]  # an unreadable detail holds no GPU


def test_more_gpus_than_a_job_may_ask_for_is_named_not_wrapped_around(tmp_path):
    (tmp_path / "pai_job_table.csv").write_text(PAI_JOBS)
    (tmp_path / "pai_task_table.csv").write_text(PAI_TASKS.replace("800.0,20.0,100.0", "800.0,20.0,1e300"))
    assert error_of(tmp_path / "pai_job_table.csv").endswith(
        "pai_task_table.csv:2: field 'plan_gpu': 4e+298 GPUs is more than 1,048,576")


def test_a_table_still_in_its_tar_archive_says_to_extract_it(tmp_path):
    import tarfile

    table = tmp_path / "pai_job_table.csv"
    table.write_text(PAI_JOBS)
    archive = tmp_path / "pai_job_table.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(table, arcname="pai_job_table.csv")
    assert error_of(archive).endswith("pai_job_table.tar.gz: a tar archive, not a data file: extract it first "
                                      "(tar -xzf pai_job_table.tar.gz)")
