"""Reports of replays: summary JSON, per-job and timeline CSVs, PNG plots and rich tables."""

from apportion.report.outputs import write_comparison, write_run
from apportion.report.tables import format_duration, summary_table, unschedulable_lines

__all__ = ["format_duration", "summary_table", "unschedulable_lines", "write_comparison", "write_run"]
