"""What one registered policy is: a ``PolicyEntry`` and the ``Option``s it takes, and the policy
API version plugins are checked against. Below both the registry and the plugin loader, so that
neither imports the other to know these shapes."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from apportion.policies.base import Policy

POLICY_API_VERSION = 1  # what apportion.policies.api promises; a plugin needing a newer one is refused


@dataclass(frozen=True)
class Option:
    """One keyword option of a policy: its type, meaning, and how it is spelled and checked."""

    name: str  # the keyword argument, e.g. "water_filling"
    type: type
    help: str  # what it means, one line
    default: Any = None  # the value that means "not asked for" (the constructor's default)
    required: bool = False
    variant: bool = False  # may also be asked for as NAME:variant (the flag without its dashes)
    flag: str | None = None  # command-line spelling; default --name-with-dashes
    metavar: str = ""  # what follows the flag, in messages and help ("FILE")
    excludes: tuple[str, ...] = ()  # options it cannot be combined with
    shared: bool = False  # given once for a comparison: policies that do not take it ignore it
    applies_to: str = ""  # how to name the policies that take it, where a rule decides ("LP policies")
    check: Callable[[Any], Any] | None = None  # value -> the value to pass on; ValueError: what is wrong
    example: Callable[[], Any] | None = None  # a value tests can build, for required options
    command_line: bool = True  # a flag of every command that runs policies; False: the commands pass their own

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def variant_name(self) -> str:
        return self.name.replace("_", "-")


@dataclass(frozen=True)
class PolicyEntry:
    """One policy: where its class is, what it does, and the options it takes."""

    name: str
    target: str | Callable[..., Policy]  # "module:Class", imported on first use, or the class itself
    summary: str
    is_lp: bool = False
    options: tuple[Option, ...] = ()
    source: str = "built-in"  # or a plugin's: "entry point of PACKAGE VERSION", "file PATH"

    @property
    def variants(self) -> tuple[str, ...]:
        return tuple(o.variant_name for o in self.options if o.variant)

    def option(self, name: str) -> Option | None:
        return next((o for o in self.options if o.name == name), None)

    def load(self) -> Callable[..., Policy]:
        """The policy's class (or factory), importing its module now."""
        if not isinstance(self.target, str):
            return self.target
        module, _, attribute = self.target.partition(":")
        return getattr(import_module(module), attribute)

    def example_options(self) -> dict[str, Any]:
        """Values for the options this policy cannot go without, so that a test can build it."""
        return {o.name: o.example() for o in self.options if o.required and o.example is not None}
