"""Reading privacy blocks and the claims a trace's rows make on them; a bad file names its line and field."""

from pathlib import Path

import pytest

from apportion.core.errors import InputError
from apportion.core.jobs import JobTable
from apportion.workloads.privacy_files import read_blocks, read_claims

BLOCKS = "block,arrival_s,epsilon,delta\nmon,0,1.0,1e-6\ntue,86400,2.0,1e-6\n"
RDP_BLOCKS = "block,arrival_s,epsilon,delta,rdp_orders\nmon,0,1.0,1e-6,2 4 8\n"


def write(tmp_path: Path, text: str, name: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def jobs(*ids: str) -> JobTable:
    n = len(ids)
    return JobTable.build(job_id=list(ids), submit_time_s=[0.0] * n, kind_names=["k"] * n, num_gpus=[1] * n,
                          total_steps=[10.0] * n)


def test_blocks_keep_their_names_arrivals_and_budgets(tmp_path):
    blocks = read_blocks(write(tmp_path, BLOCKS, "blocks.csv"))
    assert blocks.name.tolist() == ["mon", "tue"]
    assert blocks.arrival_s.tolist() == [0.0, 86400.0]
    assert blocks.budget.tolist() == [[1.0, 1e-6], [2.0, 1e-6]]
    assert not blocks.rdp


def test_renyi_blocks_give_their_orders(tmp_path):
    blocks = read_blocks(write(tmp_path, RDP_BLOCKS, "blocks.csv"))
    assert blocks.orders.tolist() == [2.0, 4.0, 8.0]
    assert blocks.budget.shape == (1, 3)


@pytest.mark.parametrize("row, field, words", [
    ("mon,0,0,1e-6", "epsilon", "more than 0"),
    ("mon,0,1,1.5", "delta", "less than 1"),
    ("mon,-5,1,1e-6", "arrival_s", "from 0"),
    ("mon,soon,1,1e-6", "arrival_s", "'soon' is not a number"),
    ("two words,0,1,1e-6", "block", "one word"),
])
def test_a_bad_block_names_its_line_and_field(tmp_path, row, field, words):
    path = write(tmp_path, "block,arrival_s,epsilon,delta\nok,0,1,1e-6\n" + row + "\n", "blocks.csv")
    with pytest.raises(InputError, match=words) as err:
        read_blocks(path)
    assert (err.value.line, err.value.field) == (3, field)


def test_a_block_named_twice_names_both_lines(tmp_path):
    with pytest.raises(InputError, match="named on line 2 too") as err:
        read_blocks(write(tmp_path, "block,arrival_s,epsilon,delta\na,0,1,0\na,5,1,0\n", "blocks.csv"))
    assert err.value.line == 3


def test_renyi_blocks_must_share_their_orders(tmp_path):
    path = write(tmp_path, RDP_BLOCKS + "tue,0,1.0,1e-6,2 4\n", "blocks.csv")
    with pytest.raises(InputError, match="same Rényi orders") as err:
        read_blocks(path)
    assert (err.value.line, err.value.field) == (3, "rdp_orders")


def test_claims_follow_the_jobs_rows_and_name_their_blocks(tmp_path):
    blocks = read_blocks(write(tmp_path, BLOCKS, "blocks.csv"))
    trace = write(tmp_path, "job_id,submit_time_s,duration_s,num_gpus,privacy_blocks,privacy_epsilon,privacy_delta\n"
                            "a,0,60,1,mon tue,0.1,1e-8\nb,0,60,1,,,\nc,0,60,1,tue,0.5,\n", "trace.csv")
    claims = read_claims(trace, jobs("c", "a", "b"), blocks)
    assert claims.start.tolist() == [0, 1, 3, 3]  # c: tue; a: mon and tue; b: nothing
    assert claims.block.tolist() == [1, 0, 1]
    assert claims.demand.tolist() == [[0.5, 0.0], [0.1, 1e-8], [0.1, 1e-8]]


def test_renyi_claims_give_epsilon_at_each_order(tmp_path):
    blocks = read_blocks(write(tmp_path, RDP_BLOCKS, "blocks.csv"))
    trace = write(tmp_path, "job_id,submit_time_s,duration_s,num_gpus,privacy_blocks,privacy_rdp\n"
                            "a,0,60,1,mon,2:0.1 4:0.2 8:0.4\n", "trace.csv")
    assert read_claims(trace, jobs("a"), blocks).demand.tolist() == [[0.1, 0.2, 0.4]]


@pytest.mark.parametrize("cells, field, words", [
    ("wed,0.1", "privacy_blocks", "no block 'wed'"),
    ("mon mon,0.1", "privacy_blocks", "named twice"),
    ("mon,lots", "privacy_epsilon", "'lots' is not a number"),
    ("mon,-0.1", "privacy_epsilon", "0 or more"),
])
def test_a_bad_claim_names_its_line_and_field(tmp_path, cells, field, words):
    blocks = read_blocks(write(tmp_path, BLOCKS, "blocks.csv"))
    trace = write(tmp_path, "job_id,submit_time_s,duration_s,num_gpus,privacy_blocks,privacy_epsilon\n"
                            "a,0,60,1,mon,0.1\nb,0,60,1," + cells + "\n", "trace.csv")
    with pytest.raises(InputError, match=words) as err:
        read_claims(trace, jobs("a", "b"), blocks)
    assert (err.value.line, err.value.field) == (3, field)


def test_a_renyi_claim_at_other_orders_than_the_blocks_is_refused(tmp_path):
    blocks = read_blocks(write(tmp_path, RDP_BLOCKS, "blocks.csv"))
    trace = write(tmp_path, "job_id,submit_time_s,duration_s,num_gpus,privacy_blocks,privacy_rdp\n"
                            "a,0,60,1,mon,2:0.1 4:0.2\n", "trace.csv")
    with pytest.raises(InputError, match=r"exactly the block file's orders \(2 4 8\)") as err:
        read_claims(trace, jobs("a"), blocks)
    assert (err.value.line, err.value.field) == (2, "privacy_rdp")
