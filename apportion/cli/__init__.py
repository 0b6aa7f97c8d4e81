"""The ``apportion`` command: parse, call the library, print. Nothing else lives here.

One module a group of commands: ``simulate`` (simulate, compare, kinds), ``policies`` (every policy, plugins
included; ``plugin_names`` loads the plugins a command line names before it is parsed), ``sweep``, ``plan``, ``profile``, ``serve``,
``replay`` (a served run against its simulation), ``submit`` (submit, wait) and ``jobs`` (queue, cancel, logs, status),
the server's clients, ``history`` (its jobs' accounting), ``users`` (its credentials) and ``blocks``
(its privacy blocks); ``trace`` (what a trace holds);
``options`` holds the options several of them share, ``help`` how their ``--help`` reads.
Each command imports what it needs when it runs, so that ``apportion queue`` or ``--help``
never pay for the solvers, the simulator or matplotlib.
"""

from __future__ import annotations

import typer

from apportion.cli import (blocks, history, jobs, plan, policies, profile, replay, serve, simulate, submit, sweep,
                           trace, users)
from apportion.cli.help import HelpCommand, HelpGroup
from apportion.cli.options import BriefPolicyCommand, PolicyCommand
from apportion.cli.submit_flags import SubmitCommand

app = typer.Typer(
    cls=HelpGroup,
    add_completion=False,
    no_args_is_help=True,
    help="Share a cluster of accelerators among deep-learning training jobs.",
)

app.command(cls=PolicyCommand)(simulate.simulate)
app.command(cls=PolicyCommand)(simulate.compare)
app.command(cls=PolicyCommand)(sweep.sweep)
app.command(cls=HelpCommand)(simulate.kinds)
app.command(cls=HelpCommand)(policies.policies)
app.command(cls=HelpCommand)(plan.plan)
app.command(cls=HelpCommand)(profile.profile)
app.command(cls=BriefPolicyCommand)(serve.serve)
app.command(cls=HelpCommand)(replay.replay)
app.command(cls=SubmitCommand)(submit.submit)
app.command(cls=HelpCommand)(jobs.queue)
app.command(cls=HelpCommand)(jobs.cancel)
app.command(cls=HelpCommand)(jobs.logs)
app.command(cls=HelpCommand)(jobs.status)
app.command(cls=HelpCommand)(submit.wait)
app.command(cls=HelpCommand)(history.history)
app.add_typer(users.app, name="users")
app.add_typer(blocks.app, name="blocks")
app.add_typer(trace.app, name="trace")


def main(prog_name: str | None = None) -> None:  # pragma: no cover - console entry point
    try:
        app(prog_name=prog_name)
    except RuntimeError as exc:
        from apportion.solve.shares import SolveError  # imported only now: `queue` must start fast

        if not isinstance(exc, SolveError):
            raise
        import sys

        print(f"error: the LP solver gave no answer ({exc}); please report this with the command "
              "that gave it", file=sys.stderr)
        raise SystemExit(1) from None
