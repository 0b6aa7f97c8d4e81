"""Command-line options used by several commands, each defined once.

Option defaults come from light modules only: importing the command line must not import the
policies, the simulator or matplotlib. The commands that run policies (``PolicyCommand``:
simulate, compare, sweep, serve) take every option the policy registry declares as a flag of
their own, built from the registry when the command line is parsed or its help shown, for the
same reason; a policy registered after import brings its options along. ``serve``
(``BriefPolicyCommand``) names them in one line of its ``--help``, so that it fits a screen,
and shows them in full under ``--help-policy-options``.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from apportion.cli.help import HelpCommand
from apportion.workloads.defaults import DEFAULT_CLUSTER, DEFAULT_RATE_PER_HOUR

if TYPE_CHECKING:
    from apportion.policies.registry import Option

POLICY_NAMES = "{policy names}"  # in an option's help: replaced by the known policies' names
POLICY_PANEL = "Policy options"  # where --help lists the registry's options
_GIVEN = "apportion.policy_options"  # ctx.meta key: the policy options given on the command line
_PREFIX = "policy_option__"  # a policy option's parameter name: never one of a command's own
_FULL_POLICY_HELP = "apportion.full_policy_help"  # ctx.meta key: --help-policy-options asked for
_HELP_POLICY_OPTIONS = "help_policy_options"


class PolicyCommand(HelpCommand):
    """A command that runs policies: every registered policy option is one of its flags, and its
    help names the known policies; read ``policy_options(ctx)`` for what was given."""

    _policy_params: list | None = None

    def parse_args(self, ctx, args):
        from apportion.cli.plugin_names import load_policy_plugins

        load_policy_plugins(list(args))  # before the flags are built: the plugins named bring their options
        return super().parse_args(ctx, args)

    def get_params(self, ctx):
        if self._policy_params is None:
            self._policy_params = _registry_params({o for p in self.params for o in (*p.opts, *p.secondary_opts)})
            self.params.extend(self._policy_params)
        return super().get_params(ctx)

    def format_help(self, ctx, formatter) -> None:
        from apportion.policies import POLICIES

        for param in self.get_params(ctx):
            if param.help and POLICY_NAMES in param.help:
                param.help = param.help.replace(POLICY_NAMES, ", ".join(POLICIES))
        return super().format_help(ctx, formatter)

    def invoke(self, ctx):
        given = {}
        for param in self._policy_params or ():
            value = ctx.params.pop(param.name)
            if ctx.get_parameter_source(param.name).name == "COMMANDLINE":  # not a default: asked for
                given[param.name.removeprefix(_PREFIX)] = value
        ctx.meta[_GIVEN] = given
        return super().invoke(ctx)


class BriefPolicyCommand(PolicyCommand):
    """A PolicyCommand whose ``--help`` only names the registry's options, in one line of its policy
    panel, and whose ``--help-policy-options`` shows them in full: every one is accepted either way."""

    def get_params(self, ctx):
        if self._policy_params is None:
            super().get_params(ctx)
            for param in self._policy_params:
                param.hidden = True
            self.params.extend(_help_policy_options_param([o for p in self._policy_params for o in p.opts]))
        return super().get_params(ctx)

    def format_help(self, ctx, formatter) -> None:
        if not ctx.meta.get(_FULL_POLICY_HELP):
            return super().format_help(ctx, formatter)
        params = self.get_params(ctx)
        hidden, summary = {param: param.hidden for param in params}, self.help
        try:  # the policy panel alone, every option in it shown
            for param in params:
                param.hidden = getattr(param, "rich_help_panel", None) != POLICY_PANEL or \
                    param.name == _HELP_POLICY_OPTIONS
            self.help = (f"The policy options of apportion {ctx.info_name}; in a config file each is a key, "
                         "its flag without dashes in snake_case (--share-by: share_by).")
            return super().format_help(ctx, formatter)
        finally:
            for param, was in hidden.items():
                param.hidden = was
            self.help = summary


def _help_policy_options_param(flags: list[str]) -> list:
    """``--help-policy-options``: the full help of the registry's options (``flags``), then exit."""
    def show(ctx: typer.Context, value: bool) -> None:
        if value and not ctx.resilient_parsing:
            ctx.meta[_FULL_POLICY_HELP] = True
            typer.echo(ctx.get_help(), color=ctx.color)
            raise typer.Exit()

    def template(help_policy_options: bool = typer.Option(
            False, "--help-policy-options", is_eager=True, expose_value=False, callback=show,
            help=f"Show the policy options and exit: {', '.join(flags)}.", rich_help_panel=POLICY_PANEL)):
        return None

    commands = typer.Typer(add_completion=False)
    commands.command()(template)
    return list(typer.main.get_command(commands).params)


def policy_options(ctx: typer.Context) -> dict[str, Any]:
    """The policy options given on the command line, by keyword, for ``make_policy``: the files
    they name read (``--queues``: its QueueConfig); a bad file is a one-line error."""
    return read_policy_options(given_policy_options(ctx))


def recorded_policy_options(ctx: typer.Context) -> dict[str, Any]:
    """The policy options given on the command line as JSON, a file by its absolute path: what a
    served run records, for ``make_policy`` once a replay has read the files."""
    return record_policy_options(given_policy_options(ctx))


def given_policy_options(ctx: typer.Context) -> dict[str, Any]:
    """The policy options given on the command line, by option name, as the flags gave them."""
    return dict(ctx.meta[_GIVEN])


def read_policy_options(given: dict[str, Any]) -> dict[str, Any]:
    """Policy options as given (by option name) with the files they name read, for ``make_policy``."""
    from apportion.arguments import read_policy_options as read
    from apportion.cli.inputs import checked

    return checked(read, given)


def record_policy_options(given: dict[str, Any]) -> dict[str, Any]:
    """Policy options as given, as JSON, a file by its absolute path."""
    from apportion.core.queues import QueueConfig
    from apportion.policies.registry import declared_options

    files = {o.name for o in declared_options() if o.type is QueueConfig}
    return {name: str(Path(value).resolve()) if name in files else value for name, value in given.items()}


def _registry_params(own_flags: set[str]) -> list:
    """The registry's options as typer options, for a command whose own flags are ``own_flags``."""
    from apportion.cli.output import fail
    from apportion.policies.registry import declared_options, option_takers, policy_names

    everyone = set(policy_names())
    parameters = []
    for option in declared_options():
        if not option.command_line:
            continue
        if option.cli_flag in own_flags:
            raise fail(f"the policy option {option.cli_flag} ({', '.join(option_takers(option.name))}) is spelled "
                       "like an option of the command itself: give it another flag in its PolicyEntry")
        takers = option_takers(option.name)
        help = option.help[:1].upper() + option.help[1:]
        if set(takers) != everyone:
            help = f"{option.applies_to or ', '.join(takers)}: {option.help}"
        if option.variant:
            help += f"; or NAME:{option.variant_name}"
        parameters.append(_parameter(option, help + "."))
    return params_of(parameters)


def params_of(parameters: list[inspect.Parameter]) -> list:
    """Click parameters built by typer from ``parameters``, as if a command's signature named them
    (the commands whose options come from a table: the registry's, a job file's fields)."""
    if not parameters:
        return []

    def template(**values):  # only its signature is read: typer builds the options from it
        return values

    template.__signature__ = inspect.Signature(parameters)
    commands = typer.Typer(add_completion=False)
    commands.command()(template)
    return list(typer.main.get_command(commands).params)


def _parameter(option: Option, help: str) -> inspect.Parameter:
    """One registry option as a typer option: a flag for a bool, a number or text with its default
    shown, and text for any other type (which the option's check, or a file reader, turns into its value)."""
    name = _PREFIX + option.name
    flag = option.cli_flag
    if option.type is bool:
        decls = flag if not option.default else f"{flag}/--no-{flag.removeprefix('--')}"
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=bool,
                                 default=typer.Option(bool(option.default), decls, help=help,
                                                      rich_help_panel=POLICY_PANEL))
    kind = option.type if option.type in (int, float, str) else str
    default = option.default if kind is option.type else None
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=Optional[kind],
                             default=typer.Option(default, flag, help=help, metavar=option.metavar or None,
                                                  show_default=default is not None, rich_help_panel=POLICY_PANEL))


def json_option(what: str, panel: str | None = None) -> typer.models.OptionInfo:
    """``--json``: print ``what`` as JSON, and nothing else, on stdout (listed under ``panel`` in --help)."""
    return typer.Option(False, "--json", help=f"Print {what} as JSON.", rich_help_panel=panel)


def round_option(default_s: float, help: str = "Round length in seconds.", panel: str = "Mechanism") -> typer.models.OptionInfo:
    return typer.Option(default_s, "--round-s", help=help, rich_help_panel=panel)


# the workload, the cluster and the mechanism of a replay (simulate, compare)
Workload = typer.Option(None, "--workload", "-w", help="A trace (.csv, .csv.gz): apportion's CSV, or a public trace as it ships, told by its content (Philly's extract or cluster_job_log, Helios, Alibaba PAI 2020 or 2023; docs/workloads.md); or READER:PATH for a plugin's reader (docs/policies.md); default: a seeded synthetic workload.", rich_help_panel="Inputs")
TraceFormat = typer.Option(None, "--trace-format", metavar="NAME", help="Read --workload as this format instead of telling it by its content: apportion, philly, philly-log, helios, pai, alibaba-2023.", rich_help_panel="Inputs")
Cluster = typer.Option(DEFAULT_CLUSTER, "--cluster", "-c", help="YAML file, or TYPE:GPUS[:GPUS_PER_NODE],... (4 GPUs a node by default).", rich_help_panel="Cluster")
Jobs = typer.Option(None, "--jobs", "-n", help="Synthetic: how many jobs (default 400). CSV: keep the first N.", rich_help_panel="Inputs")
Rate = typer.Option(DEFAULT_RATE_PER_HOUR, "--rate", help="Synthetic: Poisson arrivals, jobs per hour.", rich_help_panel="Inputs")
Shape = typer.Option("philly", "--shape", help="Synthetic: philly (apportion's Philly fit), gavel (Gavel's generator: 1/2/4/8 GPUs, its durations), gavel-1gpu (the same, one GPU each) or pollux (elastic jobs as in Pollux's evaluation; e.g. --jobs 160 --rate 20).", rich_help_panel="Inputs")
Seed = typer.Option(0, "--seed", help="Seed for the synthetic workload and for job kinds given to trace rows.", rich_help_panel="Inputs")
Start = typer.Option(None, "--start-s", help="CSV: keep jobs submitted at or after this second.", rich_help_panel="Inputs")
End = typer.Option(None, "--end-s", help="CSV: keep jobs submitted before this second.", rich_help_panel="Inputs")
Throughputs = typer.Option(None, "--throughputs", help="Gavel-format throughput JSON laid on top of the built-in catalog.", rich_help_panel="Inputs")
Reference = typer.Option("v100", "--reference-gpu-type", help="CSV: a trace duration is this long on this GPU type.", rich_help_panel="Inputs")
SimRound = round_option(360.0)
RestartCost = typer.Option(10.0, "--restart-cost-s", help="Seconds of no progress each time a job is moved or resumed.", rich_help_panel="Mechanism")
CpuSplit = typer.Option("proportional", "--cpu-split", help="How each node's CPU cores are divided among the jobs placed on it, where the trace's cpu_speed column says how their speeds depend on cores: proportional (every GPU an equal share, as a scheduler that counts GPUs alone), aware (each job at least as fast as its equal share lets it, the cores it does not need to those they speed up most) or greedy (each job 1 core a GPU, the rest where they speed jobs up most). docs/data-stalls.md.", rich_help_panel="Mechanism")
LearnModels = typer.Option(False, "--learn-models", help="Elastic jobs: a policy that sizes them sees each job's step-time model learnt from the steps it has made, and gives it at most twice the most GPUs it has run on (Pollux's way); default: their true models.", rich_help_panel="Mechanism")
# privacy budget (docs/privacy.md)
Blocks = typer.Option(None, "--blocks", help="Privacy blocks CSV (block,arrival_s,epsilon,delta[,rdp_orders]); the workload's privacy_* columns claim them.", rich_help_panel="Privacy budget")
PrivacyPolicyName = typer.Option("dpf-n", "--privacy-policy", help="How claims are granted: fcfs, rr, dpf-n, dpf-t, pack, or a plugin (docs/policies.md).", rich_help_panel="Privacy budget")
PrivacyN = typer.Option(None, "--privacy-n", help="Unlock a block's budget over this many claims for it (dpf-n; rr and pack by claims).", rich_help_panel="Privacy budget")
PrivacyT = typer.Option(None, "--privacy-t", help="Unlock a block's budget over this many seconds from its arrival (dpf-t; rr and pack by time).", rich_help_panel="Privacy budget")
PrivacyTimeout = typer.Option(None, "--privacy-timeout-s", help="Reject a claim not granted within this many seconds (default: it waits while it can still fit).", rich_help_panel="Privacy budget")
PrivacyDecide = typer.Option("arrival", "--privacy-decide", help="When a replay decides privacy claims: arrival (each claim when it arrives, as PrivateKube; the default) or round (the claims arrived within a GPU round as one batch at its end).", rich_help_panel="Privacy budget")
PrivacyRejectedPortions = typer.Option("lost", "--privacy-rejected-portions", help="Round robin: what a rejected claim held: lost (PrivateKube's; the default) or returned to its blocks.", rich_help_panel="Privacy budget")
# apportion.policies.provisioning.PROVISIONING's names, spelled here so that --help loads no policy package
PROVISIONING_NAMES = ("static", "cheapest-now", "cheapest-now:daily", "spot-fallback", "deadline-aware")
Market = typer.Option(None, "--market", metavar="<path>", help="Rent the cluster from a market: files (AWS's describe-spot-price-history JSON, or the CSV of docs/cloud.md) or directories of them, repeat the flag for more, all merged; or 'synthetic' (seeded by --seed). Each job rents its own instances; --cluster and the GPU policy do not apply.", rich_help_panel="Rented cluster")
MarketStart = typer.Option(None, "--market-start", help="With --market FILE: the market's time 0, an ISO 8601 time or the files' seconds (default: the latest of the series' first prices, where every series has one).", rich_help_panel="Rented cluster")
InterruptionRates = typer.Option(None, "--interruption-rates", help="With --market FILE: spot types' interruptions a month, as AWS's Spot Instance Advisor publishes them (its JSON, or a CSV instance_type,region,interruption of buckets <5%..>20%); default: the synthetic market's rule.", rich_help_panel="Rented cluster")
CheckpointGb = typer.Option(10.0, "--checkpoint-gb", help="With --market: what a job's move to another region transfers (1 Gbit/s) and pays egress for.", rich_help_panel="Rented cluster")
Out = typer.Option(None, "--out", "-o", help="Write summary, per-job CSV, timeline and plots to this directory.", rich_help_panel="Output")

# the server a client command talks to (submit, queue, cancel, logs, status)
Server = typer.Option(None, "--server", help="The server's URL (default: $APPORTION_SERVER, else http://127.0.0.1:8642).", rich_help_panel="Server")
Token = typer.Option(None, "--token", help="Your credential (visible to others in ps: prefer --token-file, $APPORTION_TOKEN or ~/.config/apportion/token).", rich_help_panel="Server")
TokenFile = typer.Option(None, "--token-file", help="A file (mode 600) holding your credential (default: $APPORTION_TOKEN, else ~/.config/apportion/token).", rich_help_panel="Server")
User = typer.Option(None, "--user", help="Act as this user (default: your credential's user, else the job file's, else your OS user); with a credential, for admins only.", rich_help_panel="Server")
