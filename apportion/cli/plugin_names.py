"""Plugins named on a command line, loaded before it is parsed so that their options are its flags.

A command that runs policies (``PolicyCommand``) looks at its arguments before parsing them: each
policy named by ``--policy``/``-p``/``--policies`` that is not a built-in is loaded now (a file
spec, an entry point), so that its options become flags like the built-ins'; with ``--help`` every
installed policy plugin is. A broken plugin named there is a one-line error (exit 2); one only
listed is skipped with a warning. Commands that name only built-ins never look for plugins.
"""

from __future__ import annotations

from apportion.cli.output import errors, escape, fail

POLICY_FLAGS = ("--policy", "-p", "--policies")
HELP_FLAGS = ("--help", "--help-policy-options")


def named_policies(args: list[str]) -> list[str]:
    """The policy specs ``args`` give with ``POLICY_FLAGS`` (``--policies`` split at commas)."""
    specs = []
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag in POLICY_FLAGS and (eq or i + 1 < len(args)):
            text = value if eq else args[i + 1]
            specs += [s.strip() for s in text.split(",")] if flag == "--policies" else [text.strip()]
    return [s for s in specs if s]


def load_policy_plugins(args: list[str]) -> None:
    """Register the plugins ``args`` name (all installed ones for ``--help``); exit 2 on a broken one."""
    from apportion.policies.registry import ENTRIES, policy_info

    if any(a in HELP_FLAGS for a in args):
        discover_policies()
    for spec in named_policies(args):
        name = spec.split(":")[0]
        if name in ENTRIES and ENTRIES[name].source == "built-in":
            continue
        try:
            policy_info(spec)
        except ValueError as exc:
            if str(exc).startswith("unknown policy"):
                continue  # said when the command builds its policies, as for any other unknown name
            raise fail(str(exc)) from None


def discover_policies() -> None:
    """Register every installed policy plugin that loads; a line on stderr for each one skipped."""
    from apportion.policies.registry import discover_plugins

    discover_plugins(warn)


def warn(message: str) -> None:
    errors.print(f"[yellow]warning:[/] {escape(message)}", highlight=False, soft_wrap=True)
