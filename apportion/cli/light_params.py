"""Options read without pydantic unless a value needs it.

typer coerces each option's value through a pydantic TypeAdapter it builds on first use, even
for an option not given; importing pydantic and building them costs a command about a tenth
of a second of CPU, more than `apportion status` spends on everything else. Here an option not
given is None (or empty, when it takes many values) and a text option's text is itself, as
typer's coercion makes them; any other value goes through typer's own coercion. This leans on
typer's internals (``_runtime_param``, ``typer._coercion``): a typer without them is left as it
is, every option read by typer, only slower to start (``benchmarks/speed/cli_startup.py`` shows it).
"""

from __future__ import annotations

import importlib.util


def supported() -> bool:
    """Whether this typer has the coercion hook that options can be read lightly through."""
    try:
        return importlib.util.find_spec("typer._coercion") is not None
    except ImportError:
        return False


def lighten(params) -> None:
    """Give each typer parameter of ``params`` not yet coerced the light coercion."""
    for param in params:
        if hasattr(param, "type_descriptor") and getattr(param, "_runtime_param", False) is None:
            param._runtime_param = LightCoercion(param.type_descriptor)


class LightCoercion:
    """typer's coercion of one parameter, built only for a value that needs it."""

    def __init__(self, descriptor) -> None:
        self.descriptor = descriptor
        self.full = None
        info = descriptor.parameter_info
        self.text = (descriptor.annotation is str and descriptor.file_annotation is None
                     and getattr(info, "parser", None) is None and getattr(info, "click_type", None) is None)

    def coerce(self, value, param, ctx):
        many = param.multiple or param.nargs == -1
        if value is None:
            return () if many else None
        if self.text and not many and isinstance(value, str):
            return value
        if self.full is None:
            from typer._coercion import build_runtime_param

            self.full = build_runtime_param(self.descriptor)
        return self.full.coerce(value, param=param, ctx=ctx)
