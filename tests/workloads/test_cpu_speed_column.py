"""A trace's cpu_speed column: each job's speed at a few CPU core counts per GPU."""

from pathlib import Path

import numpy as np
import pytest

from apportion.core.cpu_speed import relative_speed
from apportion.core.errors import InputError
from apportion.core.throughputs import ThroughputTable
from apportion.workloads.trace_csv import read_workload_csv

HEADER = "job_id,submit_time_s,duration_s,num_gpus,cpu_speed"
ONE_KIND = ThroughputTable(kinds=("a",), gpu_types=("v100",), scales=(1,), steps_per_s=np.array([[[1.0]]]))


def read(tmp_path: Path, rows: str):
    path = tmp_path / "trace.csv"
    path.write_text(f"{HEADER}\n{rows}")
    return path, read_workload_csv(path, throughputs=ONE_KIND)


def test_each_row_keeps_its_own_curve_on_the_union_of_the_core_counts(tmp_path):
    _, jobs = read(tmp_path, "late,9,10,1,2:0.5 4:1\nearly,0,10,1,1:0.3 3:0.9 6:1.2\nflat,5,10,1,\n")
    curves = jobs.cpu_curves
    assert jobs.job_id.tolist() == ["early", "flat", "late"]  # by submit time, curves with them
    assert curves.points.tolist() == [1, 2, 3, 4, 6]
    cores = np.array([1.0, 3.0, 5.0, 8.0])
    each = [relative_speed(curves, np.full(4, row), cores).tolist() for row in range(3)]
    assert each[0] == pytest.approx([0.25, 0.75, 1.1 / 1.2, 1.0])  # 5 is 2/3 of 3:0.9 to 6:1.2; over its best
    assert each[1] == [1.0, 1.0, 1.0, 1.0]  # an empty cell: its speed does not depend on cores
    assert each[2] == [0.25, 0.75, 1.0, 1.0]  # half speed at 2, so a quarter at 1; flat beyond 4


def test_an_empty_or_missing_column_gives_no_curves(tmp_path):
    assert read(tmp_path, "j1,0,10,1,\n")[1].cpu_curves is None
    path = tmp_path / "plain.csv"
    path.write_text("job_id,submit_time_s,duration_s,num_gpus\nj1,0,10,1\n")
    assert read_workload_csv(path, throughputs=ONE_KIND).cpu_curves is None


@pytest.mark.parametrize(
    "cell, message",
    [
        ("1-0.3", "'1-0.3' is not CORES:SPEED (e.g. '1:0.3 2:0.66 4:1')"),
        ("1:fast", "'1:fast' is not CORES:SPEED with two numbers (e.g. '2:0.66')"),
        ("0:0.5 2:1", "'0:0.5': cores per GPU must be a number > 0"),
        ("1:-0.5 2:1", "'1:-0.5': speed must be a finite number >= 0"),
        ("2:0.5 2:1", "2 cores per GPU appears twice"),
        ("1:0 2:0", "the speed is 0 at every core count: the job could never train"),
    ],
)
def test_a_bad_cell_names_the_file_line_and_field(tmp_path, cell, message):
    with pytest.raises(InputError) as caught:
        read(tmp_path, f"j1,0,10,1,1:0.5 2:1\nj2,5,10,1,{cell}\n")
    assert str(caught.value) == f"{tmp_path / 'trace.csv'}:3: field 'cpu_speed': {message}"
