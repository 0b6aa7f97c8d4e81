"""Command-line options used by several commands, each defined once.

Option defaults come from light modules only: importing the command line must not import the
policies, the simulator or matplotlib. Policy names are filled into help text when help is shown
(``ListsPolicies``) for the same reason.
"""

from __future__ import annotations

import typer
from typer.core import TyperCommand

from apportion.workloads.defaults import DEFAULT_CLUSTER, DEFAULT_RATE_PER_HOUR

POLICY_NAMES = "{policy names}"  # in an option's help: replaced by the known policies' names


class ListsPolicies(TyperCommand):
    """A command whose option help names the known policies, looked up only when help is shown."""

    def format_help(self, ctx, formatter) -> None:
        from apportion.policies import POLICIES

        for param in self.params:
            if param.help and POLICY_NAMES in param.help:
                param.help = param.help.replace(POLICY_NAMES, ", ".join(POLICIES))
        return super().format_help(ctx, formatter)


def json_option(what: str) -> typer.models.OptionInfo:
    """``--json``: print ``what`` as JSON, and nothing else, on stdout."""
    return typer.Option(False, "--json", help=f"Print {what} as JSON.")


def round_option(default_s: float, help: str = "Round length in seconds.") -> typer.models.OptionInfo:
    return typer.Option(default_s, "--round-s", help=help)


# the workload, the cluster and the mechanism of a replay (simulate, compare)
Workload = typer.Option(None, "--workload", "-w", help="Philly-style CSV (.csv or .csv.gz); default: a seeded synthetic workload.")
Cluster = typer.Option(DEFAULT_CLUSTER, "--cluster", "-c", help="YAML file, or TYPE:GPUS[:GPUS_PER_NODE],... (4 GPUs a node by default).")
Jobs = typer.Option(None, "--jobs", "-n", help="Synthetic: how many jobs (default 400). CSV: keep the first N.")
Rate = typer.Option(DEFAULT_RATE_PER_HOUR, "--rate", help="Synthetic: Poisson arrivals, jobs per hour.")
Shape = typer.Option("philly", "--shape", help="Synthetic: philly (apportion's Philly fit), gavel (Gavel's generator: 1/2/4/8 GPUs, its durations), gavel-1gpu (the same, one GPU each) or pollux (elastic jobs as in Pollux's evaluation; e.g. --jobs 160 --rate 20).")
Seed = typer.Option(0, "--seed", help="Seed for the synthetic workload and for job kinds given to trace rows.")
Start = typer.Option(None, "--start-s", help="CSV: keep jobs submitted at or after this second.")
End = typer.Option(None, "--end-s", help="CSV: keep jobs submitted before this second.")
Throughputs = typer.Option(None, "--throughputs", help="Gavel-format throughput JSON laid on top of the built-in catalog.")
Reference = typer.Option("v100", "--reference-gpu-type", help="CSV: a trace duration is this long on this GPU type.")
SimRound = round_option(360.0)
RestartCost = typer.Option(10.0, "--restart-cost-s", help="Seconds of no progress each time a job is moved or resumed.")
Out = typer.Option(None, "--out", "-o", help="Write summary, per-job CSV, timeline and plots to this directory.")

# how a policy runs (simulate, compare; --queues also serve)
Agnostic = typer.Option(False, "--agnostic", help="Treat all GPU types as equally fast (heterogeneity-agnostic baseline).")
Partitions = typer.Option(1, "--partitions", help="Solve an LP policy as K random sub-problems (POP) for speed on large clusters.")
Slo = typer.Option(False, "--slo", help="min-cost: honour the workload's deadline_s column.")
WaterFilling = typer.Option(False, "--water-filling", help="max-min-fairness: raise jobs level by level, so none can rise without lowering a smaller one (slower).")
ShareBy = typer.Option(None, "--share-by", help="max-min-fairness: what is made equal, gpu-time (default, Gavel's: normalised throughput × GPUs) or rate (normalised throughput alone).")
SpaceSharing = typer.Option(False, "--space-sharing", help="LP policies: let two one-GPU jobs share a GPU where their pair's speed is known (or NAME:space-sharing).")
Durations = typer.Option(None, "--durations", help="srtf, qssf, finish-time-fairness: the remaining durations the policy knows, predicted (from the jobs finished so far; qssf's default) or oracle (the true ones; the others' default).")
Queues = typer.Option(None, "--queues", help="hierarchical: queues YAML (weight, nominal quota per GPU type, borrowing); see docs/queues.md.")

# the server a client command talks to (submit, queue, cancel, logs, status)
Server = typer.Option(None, "--server", help="The server's URL (default: $APPORTION_SERVER, else http://127.0.0.1:8642).")
Token = typer.Option(None, "--token", help="Your credential (visible to others in ps: prefer --token-file, $APPORTION_TOKEN or ~/.config/apportion/token).")
TokenFile = typer.Option(None, "--token-file", help="A file (mode 600) holding your credential (default: $APPORTION_TOKEN, else ~/.config/apportion/token).")
User = typer.Option(None, "--user", help="Act as this user (default: your credential's user, else the job file's, else your OS user); with a credential, for admins only.")
