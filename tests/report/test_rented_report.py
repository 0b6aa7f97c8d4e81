"""What a rented replay adds to its outputs: dollars per job in jobs.csv, dollars by market and type in report.html."""

import numpy as np

from apportion.core.jobs import JobTable
from apportion.core.market import ON_DEMAND, SPOT, Market
from apportion.core.throughputs import ThroughputTable
from apportion.policies.provisioning import make_provisioning
from apportion.report.outputs import job_columns, job_header
from apportion.report.rented import rented_section
from apportion.report.tables import summary_rows
from apportion.sim import SimConfig
from apportion.sim.rented import RentalConfig, simulate_rented


def rented_result():
    """One 1 step/s job of 5400 steps on spot at $1/h, preempted at 1800 s, then on-demand at $3/h."""
    market = Market(
        name=np.array(["p3.2xlarge"] * 2, dtype=object), cloud=np.array(["aws"] * 2, dtype=object),
        region=np.array(["us-east-1"] * 2, dtype=object), gpu_type=np.array(["v100"] * 2, dtype=object),
        gpus=np.array([1, 1]), market=np.array([ON_DEMAND, SPOT]), times_s=np.array([0.0]),
        price_per_hour=np.array([[3.0], [1.0]]), preempt_type=np.array([1]), preempt_s=np.array([1800.0]),
    )
    jobs = JobTable.build(job_id=["j"], submit_time_s=[0.0], kind_names=["k"], num_gpus=[1], total_steps=[5400.0],
                          kinds=("k",))
    return simulate_rented(jobs, market, ThroughputTable(("k",), ("v100",), (1,), np.ones((1, 1, 1))),
                           make_provisioning("spot-fallback"), SimConfig(round_s=3600.0, restart_cost_s=0.0),
                           RentalConfig(checkpoint_gb=0.0))


def test_jobs_csv_gains_each_jobs_dollars():
    result = rented_result()
    header = job_header([result])
    assert header[-2:] == ("dollars", "out_of_budget")
    dollars = job_columns(result)[header.index("dollars")]
    assert dollars == ["3.5"]  # 1800 s of spot at $1/h, then from 3600 s an hour of on-demand at $3/h


def test_the_report_shows_dollars_by_market_and_type_and_the_preemptions():
    section = rented_section([rented_result()])
    assert "<th>on-demand</th><td>$3.00</td>" in section and "<th>spot</th><td>$0.50</td>" in section
    assert "<th>aws/us-east-1/p3.2xlarge/on-demand</th><td>$3.00</td>" in section
    assert "<th>spot preemptions</th>" in section and "<th>aws/us-east-1/p3.2xlarge/spot</th><td>1</td>" in section


def test_the_summary_table_shows_dollars_only_for_rented_replays():
    rented = [label for label, _, _ in summary_rows([rented_result().summary])]
    assert "dollars" in rented and "deadlines missed" in rented
    owned = [label for label, _, _ in summary_rows([{"policy": "fifo", "jobs": 1, "deadlines_missed": 0}])]
    assert "dollars" not in owned and "deadlines missed" not in owned
