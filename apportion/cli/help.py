"""How every command's ``--help`` reads: text that flows, flags shown as flags.

Help is written in the code as flowing sentences (docstrings wrapped at the code's width); the
terminal wraps it, so a single line break inside a paragraph is a space. A flag takes no
value, so it shows no type (typer would print ``--json <bool>``), and the usage line names an
argument as a word (``submit [OPTIONS] JOB_FILE``), not as ``{job_file}``. Options are read
without pydantic where typer would need it only to hand back what was typed (light_params.py).
"""

from __future__ import annotations

import inspect

from typer.core import TyperArgument, TyperCommand, TyperGroup

from apportion.cli.light_params import lighten


def flowing(text: str | None) -> str | None:
    """``text`` with each paragraph on one line: line breaks inside a paragraph become spaces."""
    if not text:
        return text
    return "\n\n".join(" ".join(paragraph.split()) for paragraph in inspect.cleandoc(text).split("\n\n"))


def _tidy(params) -> None:
    """Flags without a type, every help text flowing."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""  # shown as nothing; a flag never reads a value
        if getattr(param, "help", None):
            param.help = flowing(param.help)


def _usage_name(argument: TyperArgument) -> str:
    """An argument in the usage line: NAME when it must be given, [NAME] when it may."""
    name = argument.display_name_raw + ("..." if argument.nargs != 1 else "")
    return name if argument.required else f"[{name}]"


class _FlowingHelp:
    """What a command and a group of commands share: help that flows, flags that show no type,
    and options read without pydantic where typer allows it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.help = flowing(self.help)

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        lighten(self.get_params(ctx))  # options not given, and text, read without pydantic
        return super().parse_args(ctx, args)

    def format_help(self, ctx, formatter) -> None:
        _tidy(self.get_params(ctx))
        return super().format_help(ctx, formatter)


class HelpCommand(_FlowingHelp, TyperCommand):
    """A command whose help flows, whose flags show no type, and whose usage line names its arguments as words."""

    def collect_usage_pieces(self, ctx) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            pieces.extend([_usage_name(param)] if isinstance(param, TyperArgument) else param.get_usage_pieces(ctx))
        return pieces


class HelpGroup(_FlowingHelp, TyperGroup):
    """A group of commands whose help flows and whose flags show no type."""
