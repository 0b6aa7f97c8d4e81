"""Reading a Philly-style CSV trace: durations become steps on the reference GPU type."""

import gzip
from pathlib import Path

import numpy as np
import pytest

from apportion.core.errors import InputError
from apportion.core.throughputs import ThroughputTable
from apportion.workloads.trace_csv import read_workload_csv

HEADER = "job_id,submit_time_s,duration_s,num_gpus,gpu_type,user,queue,status"
PHILLY = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "philly_pollux_jobs.csv.gz"


def throughputs() -> ThroughputTable:
    """Steps/s on (k80, v100) at 1, 2, 4 GPUs; NaN = unknown."""
    nan = np.nan
    return ThroughputTable(
        kinds=("resnet50/bs64", "lm/bs20", "k80only/bs8"),
        gpu_types=("k80", "v100"),
        scales=(1, 2, 4),
        steps_per_s=np.array(
            [
                [[3.0, 5.0, 9.0], [10.0, 18.0, 32.0]],  # resnet50/bs64
                [[1.0, 2.0, 4.0], [4.0, 8.0, nan]],  # lm/bs20: no 4-GPU number on v100
                [[2.0, 4.0, 8.0], [nan, nan, nan]],  # k80only/bs8: cannot run on v100
            ]
        ),
    )


def write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_duration_becomes_steps_on_the_reference_gpu_type_at_the_jobs_scale(tmp_path):
    path = write(
        tmp_path,
        "job_id,submit_time_s,duration_s,num_gpus,kind\n"
        "a,0,100,1,resnet50/bs64\n"
        "b,50,10,2,resnet50/bs64\n"
        "c,20,30,16,resnet50/bs64\n"
        "d,60,5,4,lm/bs20\n",
    )
    jobs = read_workload_csv(path, throughputs=throughputs(), reference_gpu_type="v100")

    assert list(jobs.job_id) == ["a", "c", "b", "d"]  # sorted by submit time
    assert list(jobs.submit_time_s) == [0, 20, 50, 60]
    # a: 100 s x 10 steps/s on one v100
    # c: 16 GPUs is past the measured 4; the last doubling (2 -> 4) kept e = 32 / (2 x 18) = 8/9
    #    of linear, so 4 -> 16 (two doublings) runs at 32 x 4 x (8/9)^2 = 8192/81 steps/s
    # b: 10 s x 18 steps/s on two v100s
    # d: no 4-GPU number for lm on v100, so the 1-GPU rate x 4 = 16 steps/s, for 5 s
    np.testing.assert_allclose(jobs.total_steps, [1000.0, 30 * 8192 / 81, 180.0, 80.0])
    assert jobs.kinds == throughputs().kinds
    assert [jobs.kinds[k] for k in jobs.kind] == ["resnet50/bs64"] * 3 + ["lm/bs20"]
    assert list(jobs.num_gpus) == [1, 16, 2, 4]
    assert list(jobs.priority) == [1.0] * 4
    assert list(jobs.user) == [""] * 4


def test_without_a_kind_column_each_job_gets_a_seeded_runnable_kind(tmp_path):
    rows = "".join(f"j{i},{i},{10 + i},1,,u{i % 3},q,completed\n" for i in range(200))
    path = write(tmp_path, HEADER + "\n" + rows)
    jobs = read_workload_csv(path, throughputs=throughputs(), seed=7)

    names = [jobs.kinds[k] for k in jobs.kind]
    assert set(names) == {"resnet50/bs64", "lm/bs20"}  # k80only/bs8 has no v100 number
    one_v100 = {"resnet50/bs64": 10.0, "lm/bs20": 4.0}
    expected = [(10 + i) * one_v100[name] for i, name in enumerate(names)]
    np.testing.assert_allclose(jobs.total_steps, expected)
    assert list(jobs.user[:4]) == ["u0", "u1", "u2", "u0"]
    assert jobs.queue[0] == "q"


def test_same_seed_gives_the_same_table_and_another_seed_a_different_one(tmp_path):
    rows = "".join(f"j{i},{i},{10 + i},1,,,,\n" for i in range(100))
    path = write(tmp_path, HEADER + "\n" + rows)
    first = read_workload_csv(path, throughputs=throughputs(), seed=1)
    again = read_workload_csv(path, throughputs=throughputs(), seed=1)
    other = read_workload_csv(path, throughputs=throughputs(), seed=2)

    np.testing.assert_array_equal(first.kind, again.kind)
    np.testing.assert_array_equal(first.total_steps, again.total_steps)
    assert not np.array_equal(first.kind, other.kind)


def test_kind_and_steps_columns_are_used_as_they_are(tmp_path):
    path = write(
        tmp_path,
        "job_id,submit_time_s,duration_s,num_gpus,kind,steps,priority\n"
        "x,0,100,2,k80only/bs8,500,2.5\n"  # no v100 number needed: steps are given
        "y,5,100,1,lm/bs20,,\n",  # steps empty: converted; priority empty: 1
    )
    jobs = read_workload_csv(path, throughputs=throughputs())

    assert [jobs.kinds[k] for k in jobs.kind] == ["k80only/bs8", "lm/bs20"]
    assert list(jobs.total_steps) == [500.0, 400.0]
    assert list(jobs.priority) == [2.5, 1.0]


def test_a_name_column_gives_the_jobs_their_names_and_without_one_they_have_none(tmp_path):
    named = write(tmp_path, "job_id,submit_time_s,duration_s,num_gpus,user,name\n"
                            "x,10,100,1,ann,bert-ft\ny,0,100,1,bob,\n", name="named.csv")
    plain = write(tmp_path, "job_id,submit_time_s,duration_s,num_gpus\nx,0,100,1\n", name="plain.csv")

    assert read_workload_csv(named, throughputs=throughputs()).name.tolist() == ["", "bert-ft"]  # by submit time
    assert read_workload_csv(plain, throughputs=throughputs()).name is None


def test_gzip_is_read_like_plain_csv(tmp_path):
    text = HEADER + "\nj1,0,100,1,,,,\nj2,3,50,2,,,,\n"
    plain = read_workload_csv(write(tmp_path, text), throughputs=throughputs())
    packed = tmp_path / "trace.csv.gz"
    packed.write_bytes(gzip.compress(text.encode()))
    zipped = read_workload_csv(packed, throughputs=throughputs())

    np.testing.assert_array_equal(plain.total_steps, zipped.total_steps)
    np.testing.assert_array_equal(plain.kind, zipped.kind)


def test_max_jobs_and_time_window(tmp_path):
    rows = "".join(f"j{i},{100 * i},60,1,,,,\n" for i in range(10))  # submitted at 0, 100, ..., 900
    path = write(tmp_path, HEADER + "\n" + rows)
    whole = read_workload_csv(path, throughputs=throughputs())

    first3 = read_workload_csv(path, throughputs=throughputs(), max_jobs=3)
    assert list(first3.job_id) == ["j0", "j1", "j2"]

    window = read_workload_csv(path, throughputs=throughputs(), start_s=250, end_s=600)
    assert list(window.job_id) == ["j3", "j4", "j5"]
    assert list(window.submit_time_s) == [0, 100, 200]  # shifted: the first kept job is at 0
    np.testing.assert_array_equal(window.kind, whole.kind[3:6])  # a job keeps its drawn kind

    both = read_workload_csv(path, throughputs=throughputs(), start_s=250, max_jobs=2)
    assert list(both.job_id) == ["j3", "j4"]

    with pytest.raises(InputError, match="no jobs submitted"):
        read_workload_csv(path, throughputs=throughputs(), start_s=5000)


@pytest.mark.parametrize(
    "bad_row, field, message",
    [
        ("j3,20,abc,1,,,,", "duration_s", "'abc' is not a number"),
        ("j3,20,0,1,,,,", "duration_s", "must be > 0 and at most 315,576,000 s (10 years), got '0'"),
        ("j3,20,,1,,,,", "duration_s", "'' is not a number"),
        ("j3,-5,10,1,,,,", "submit_time_s", "must be from 0 to 3,155,760,000 s (100 years), got '-5'"),
        ("j3,20,10,0,,,,", "num_gpus", "must be a whole number from 1 to 1,048,576 (2**20), got '0'"),
        ("j3,20,10,1.5,,,,", "num_gpus", "must be a whole number from 1 to 1,048,576 (2**20), got '1.5'"),
        ("j3,20,10,1e23,,,,", "num_gpus", "must be a whole number from 1 to 1,048,576 (2**20), got '1e23'"),
        ("j3,20,10,2000000,,,,", "num_gpus", "must be a whole number from 1 to 1,048,576 (2**20), got '2000000'"),
        ("j3,20,10,inf,,,,", "num_gpus", "'inf' is not a finite number"),
        ("j3,20,1e30,1,,,,", "duration_s", "must be > 0 and at most 315,576,000 s (10 years), got '1e30'"),
        ("j3,20,-inf,1,,,,", "duration_s", "'-inf' is not a finite number"),
        ("j3,1e30,10,1,,,,", "submit_time_s", "must be from 0 to 3,155,760,000 s (100 years), got '1e30'"),
        ("j3,20,nan,1,,,,", "duration_s", "'nan' is not a finite number"),
        ("j1,20,10,1,,,,", "job_id", "job id 'j1' appears on an earlier line too"),
    ],
)
def test_a_bad_row_names_the_file_line_and_field(tmp_path, bad_row, field, message):
    # line 1 header, 2 j1, 3 blank, 4 j2, 5 the bad row
    path = write(tmp_path, HEADER + "\nj1,0,10,1,,,,\n\nj2,10,10,1,,,,\n" + bad_row + "\n")
    with pytest.raises(InputError) as caught:
        read_workload_csv(path, throughputs=throughputs())

    err = caught.value
    assert (err.source, err.line, err.field) == (str(path), 5, field)
    assert str(err) == f"{path}:5: field '{field}': {message}"


@pytest.mark.parametrize(
    "kind, steps, field, message",
    [
        ("bert/bs8", "", "kind", "unknown job kind 'bert/bs8' (known: resnet50/bs64, lm/bs20, k80only/bs8)"),
        ("lm/bs20", "-3", "steps", "must be > 0 and at most 9,007,199,254,740,992 (2**53), got '-3'"),
        ("lm/bs20", "1e16", "steps", "must be > 0 and at most 9,007,199,254,740,992 (2**53), got '1e16'"),
        ("lm/bs20", "nan", "steps", "'nan' is not a finite number"),
        ("k80only/bs8", "", "kind", "kind 'k80only/bs8' has no throughput on 'v100'"),
    ],
)
def test_bad_kind_or_steps(tmp_path, kind, steps, field, message):
    header = "job_id,submit_time_s,duration_s,num_gpus,kind,steps"
    path = write(tmp_path, f"{header}\nj1,0,10,1,,\nj2,5,10,1,{kind},{steps}\n")
    with pytest.raises(InputError) as caught:
        read_workload_csv(path, throughputs=throughputs())
    assert (caught.value.line, caught.value.field) == (3, field)
    assert message in str(caught.value)


def test_cpus_and_memory_columns_give_what_each_job_needs_beside_its_gpus(tmp_path):
    header = "job_id,submit_time_s,duration_s,num_gpus,cpus,memory_gib"
    path = write(tmp_path, f"{header}\nj2,5,10,2,8,\nj1,0,10,1,,32.5\nj3,9,10,1,0.5,0\n")
    jobs = read_workload_csv(path, throughputs=throughputs())

    assert jobs.job_id.tolist() == ["j1", "j2", "j3"]  # by submit time, their demands with them
    assert jobs.cpus.tolist() == [0.0, 8.0, 0.5]  # empty: asks for none
    assert jobs.memory_gib.tolist() == [32.5, 0.0, 0.0]


def test_without_the_columns_no_job_asks_for_cores_or_memory(tmp_path):
    jobs = read_workload_csv(write(tmp_path, HEADER + "\nj1,0,10,1,,,,\n"), throughputs=throughputs())

    assert jobs.cpus is None and jobs.memory_gib is None


@pytest.mark.parametrize(
    "cpus, memory, field, message",
    [
        ("-1", "", "cpus", "must be a number >= 0, got '-1'"),
        ("four", "", "cpus", "'four' is not a number"),
        ("inf", "", "cpus", "'inf' is not a finite number"),
        ("4", "-0.5", "memory_gib", "must be a number >= 0, got '-0.5'"),
        ("4", "32GB", "memory_gib", "'32GB' is not a number"),
    ],
)
def test_bad_cpus_or_memory_name_the_file_line_and_field(tmp_path, cpus, memory, field, message):
    header = "job_id,submit_time_s,duration_s,num_gpus,cpus,memory_gib"
    path = write(tmp_path, f"{header}\nj1,0,10,1,2,16\nj2,5,10,1,{cpus},{memory}\n")
    with pytest.raises(InputError) as caught:
        read_workload_csv(path, throughputs=throughputs())
    assert str(caught.value) == f"{path}:3: field '{field}': {message}"


def test_the_largest_job_a_row_may_describe_is_read_as_it_is(tmp_path):
    header = "job_id,submit_time_s,duration_s,num_gpus,kind,steps,deadline_s"
    ten_years = 10 * 365.25 * 24 * 3600
    path = write(tmp_path, f"{header}\nbig,0,{ten_years},1048576,resnet50/bs64,9007199254740992,{ten_years}\n")
    jobs = read_workload_csv(path, throughputs=throughputs())
    assert (int(jobs.num_gpus[0]), jobs.total_steps[0]) == (2**20, 2.0**53)


def test_a_deadline_beyond_ten_years_is_an_error(tmp_path):
    path = write(tmp_path, "job_id,submit_time_s,duration_s,num_gpus,deadline_s\nj1,0,10,1,4e8\n")
    with pytest.raises(InputError) as caught:
        read_workload_csv(path, throughputs=throughputs())
    assert (caught.value.line, caught.value.field) == (2, "deadline_s")
    assert "at most 315,576,000 s (10 years) after submission, got '4e8'" in str(caught.value)


def test_a_duration_that_becomes_more_than_2_to_the_53_steps_is_an_error(tmp_path):
    # a kind at 100 steps/s on one v100, scaling linearly: on 1,048,576 of them for 10 years
    fast = ThroughputTable(kinds=("tiny/bs1",), gpu_types=("v100",), scales=(1,), steps_per_s=np.array([[[100.0]]]))
    path = write(tmp_path, "job_id,submit_time_s,duration_s,num_gpus,kind\nj1,0,315000000,1048576,tiny/bs1\n")
    with pytest.raises(InputError) as caught:
        read_workload_csv(path, throughputs=fast)
    assert (caught.value.line, caught.value.field) == (2, "duration_s")
    assert "more than 9,007,199,254,740,992 (2**53); give a 'steps' value or a shorter duration" in str(caught.value)


def test_a_missing_required_column_is_reported_on_the_header_line(tmp_path):
    path = write(tmp_path, "job_id,submit_time_s,num_gpus\nj1,0,1\n")
    with pytest.raises(InputError) as caught:
        read_workload_csv(path, throughputs=throughputs())
    assert (caught.value.line, caught.value.field) == (1, "duration_s")


def test_a_row_with_the_wrong_number_of_fields(tmp_path):
    path = write(tmp_path, HEADER + "\nj1,0,10,1,,,,\nj2,5,10\n")
    with pytest.raises(InputError, match=r":3: has 3 fields, the header has 8"):
        read_workload_csv(path, throughputs=throughputs())


@pytest.mark.parametrize("text, message", [("", "empty file"), (HEADER + "\n", "header but no rows")])
def test_empty_and_header_only_files(tmp_path, text, message):
    with pytest.raises(InputError, match=message):
        read_workload_csv(write(tmp_path, text), throughputs=throughputs())


def test_missing_file_and_unknown_reference_type(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_workload_csv(tmp_path / "absent.csv", throughputs=throughputs())
    path = write(tmp_path, HEADER + "\nj1,0,10,1,,,,\n")
    with pytest.raises(InputError, match=r"unknown reference GPU type 'h100' \(known: k80, v100\)"):
        read_workload_csv(path, throughputs=throughputs(), reference_gpu_type="h100")


def test_the_philly_trace_loads_whole():
    if not PHILLY.exists():
        pytest.skip(f"Philly trace not found at {PHILLY.resolve()} (see DESIGN.md, Data)")
    jobs = read_workload_csv(PHILLY, throughputs=throughputs())

    assert len(jobs) == 82_247
    assert np.all(np.diff(jobs.submit_time_s) >= 0)
    assert jobs.submit_time_s[0] == 0
    assert jobs.num_gpus.max() == 128
    assert np.all(np.isfinite(jobs.total_steps) & (jobs.total_steps > 0))


def test_a_jobs_own_estimate_becomes_steps_as_its_duration_does(tmp_path):
    path = write(
        tmp_path,
        "job_id,submit_time_s,duration_s,num_gpus,kind,estimated_duration_s\n"
        "a,0,100,1,resnet50/bs64,250\n"
        "b,10,10,2,resnet50/bs64,\n",
    )
    jobs = read_workload_csv(path, throughputs=throughputs(), reference_gpu_type="v100")

    # a: 250 s x 10 steps/s on one v100, beside its 100 s x 10; b gave none
    np.testing.assert_allclose(jobs.total_steps, [1000.0, 180.0])
    np.testing.assert_allclose(jobs.estimated_steps, [2500.0, np.nan])


def test_a_trace_without_estimates_has_no_estimate_column(tmp_path):
    path = write(tmp_path, "job_id,submit_time_s,duration_s,num_gpus,kind,estimated_duration_s\n"
                           "a,0,100,1,resnet50/bs64,\n")
    assert read_workload_csv(path, throughputs=throughputs()).estimated_steps is None
    path = write(tmp_path, "job_id,submit_time_s,duration_s,num_gpus,kind\na,0,100,1,resnet50/bs64\n")
    assert read_workload_csv(path, throughputs=throughputs()).estimated_steps is None


@pytest.mark.parametrize("value, message", [("-5", "must be > 0"), ("0", "must be > 0"), ("soon", "not a number"),
                                            ("inf", "not a finite number")])
def test_a_bad_estimate_names_the_file_line_and_column(tmp_path, value, message):
    path = write(tmp_path, "job_id,submit_time_s,duration_s,num_gpus,kind,estimated_duration_s\n"
                           "a,0,100,1,resnet50/bs64,50\n"
                           f"b,5,100,1,resnet50/bs64,{value}\n")
    with pytest.raises(InputError) as err:
        read_workload_csv(path, throughputs=throughputs())
    assert err.value.line == 3 and err.value.field == "estimated_duration_s"
    assert message in str(err.value) and "trace.csv" in str(err.value)
