"""How far the simulator is from a real run: a finished ``apportion serve`` run, replayed in the
simulator under the same policy and round length with what the run measured, side by side."""

from apportion.fidelity.comparison import Fidelity, JobComparison, replay, replay_run
from apportion.fidelity.served import RunSettings, ServedRun, read_served_run

__all__ = ["Fidelity", "JobComparison", "RunSettings", "ServedRun", "read_served_run", "replay", "replay_run"]
