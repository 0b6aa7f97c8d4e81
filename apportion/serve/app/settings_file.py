"""A server config file (``apportion serve --config server.yaml``): the settings of
``serve/app/settings.py`` and the policy options, one key each, read and checked with their lines.

```yaml
policy: max-min-fairness
round_s: 60
slots: cpu:4
state_dir: state          # relative paths: against this file's directory
token_file: admin.token
share_by: rate            # a policy option: its flag without dashes (--share-by)
user_weights: {alice: 2, bob: 1}   # or alice=2,bob=1, as the flag
```

A key is a flag of ``apportion serve`` without its dashes, in snake_case (``round_s``, not
``round-s``, which is refused with "did you mean"). An unknown key is an error, as is a value of
the wrong type; ``null`` leaves a setting at its default. The file is refused if another
account may change it (group- or world-writable, or owned by anyone but the server's user or
root), and a ``token`` (a secret) unless only the file's owner may read and write the file. Every error is one InputError naming
the file, the line and the key.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from apportion.core.errors import InputError
from apportion.serve.app.settings import PATHS, SETTINGS, ServeSettings
from apportion.serve.base.trusted_file import trust_problem
from apportion.serve.resources.registry import setting_names
from apportion.workloads.yaml_file import read_yaml

if TYPE_CHECKING:
    from apportion.policies.registry import Option

_INTS = frozenset({"port", "max_retries", "max_active_jobs", "max_demand_rows", "max_after_edges",
                   "submit_burst"}) | setting_names("settings", "int")  # and the optional resources' own
_NUMBERS = frozenset({"round_s", "hung_after_s", "retry_backoff_s", "grace_s", "max_stored_mb",
                      "submit_rate"}) | setting_names("settings", "number")
_UNITS = {"max_stored_mb": "a number of MB", "submit_rate": "a number of submits a second"}  # else seconds
_BOOLS = frozenset({"warm_start", "share_by_user"})
_NUMBER_OR_TEXT = frozenset({"checkpoint_every"})  # 300 or auto:300


@dataclass(frozen=True)
class SettingsFile:
    """What a config file says: settings by key (paths absolute), policy options by option name,
    and the line of each key."""

    source: str
    values: dict[str, Any]
    policy_options: dict[str, Any]
    lines: dict[str, int]
    option_keys: dict[str, str]  # a policy option's name -> its key in the file

    def key_of(self, name: str) -> str:
        """The file's key for a setting or a policy option called ``name``."""
        return self.option_keys.get(name, name)

    def error(self, key: str, message: str) -> InputError:
        """``message`` about ``key`` as one InputError naming this file and the key's line."""
        return InputError(self.source, message, line=self.lines.get(key), field=key)


def policy_option_keys() -> dict[str, Option]:
    """Each policy option a command line takes, by its key in a config file (its flag without dashes)."""
    from apportion.policies.registry import declared_options

    return {option.cli_flag.removeprefix("--").replace("-", "_"): option
            for option in declared_options() if option.command_line}


def _load_plugin_policy(policy: Any, where: SettingsFile) -> None:
    """A ``policy:`` that names a plugin (apportion.plugins) is loaded before the keys are checked, so
    that its options are keys of the file as the built-ins' are; a broken one is named at its line."""
    from apportion.policies.registry import ENTRIES, base_name, policy_info

    if not isinstance(policy, str) or base_name(policy) in ENTRIES:
        return
    try:
        policy_info(policy)
    except ValueError as exc:
        if not str(exc).startswith("unknown policy"):  # an unknown name is said where the policy is checked
            raise where.error("policy", str(exc)) from None


def load_settings_file(path: str | Path) -> SettingsFile:
    """Read and check a server config file; InputError naming the file, line and key on any problem."""
    source = str(path)
    _check_trusted(Path(path))
    data, root = read_yaml(path, "server config")
    lines = _key_lines(root)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(source, "a server config file must be a mapping of settings (round_s: 60, slots: cpu:2, …)",
                         line=1)
    base = Path(path).resolve().parent
    values: dict[str, Any] = {}
    policy_options: dict[str, Any] = {}
    where = SettingsFile(source, {}, {}, lines, {})  # for errors, before the values are known
    _load_plugin_policy(data.get("policy"), where)
    options = policy_option_keys()
    for key, value in data.items():
        if not isinstance(key, str) or (key not in SETTINGS and key not in options and key != "user_budgets"):
            raise where.error(str(key), _unknown(str(key), [*SETTINGS, "user_budgets", *options]))
        if value is None:
            continue
        if key == "user_budgets":
            values[key] = _user_budgets(value, where)
            continue
        if key in options:
            option = options[key]
            given = _option_value(option, value, base, where, key)
            if not _left_at_default(given, option):
                policy_options[option.name] = given
            continue
        values[key] = _setting_value(key, value, base, where)
    if "token" in values:
        _check_private(Path(path), where)
    return SettingsFile(source, values, policy_options, lines,
                        {option.name: key for key, option in options.items()})


def settings_yaml(settings: ServeSettings) -> str:
    """``settings`` as a config file that ``load_settings_file`` reads back to the same settings:
    every key, then every policy option, each with its value or its default. A token is never written."""
    lines = ["# apportion serve: the settings in effect (apportion serve --config FILE reads this back)"]
    for key in SETTINGS:
        value = getattr(settings, key)
        if key == "token":
            lines.append("# token: given, not shown" if value is not None else "token: null")
            continue
        lines.append(_yaml_line(key, str(value) if isinstance(value, Path) else value))
    lines.append(_yaml_line("user_budgets", {user: dict(limits) for user, limits in settings.user_budgets.items()}))
    lines.append("# the policy's options (apportion serve --help-policy-options)")
    for key, option in policy_option_keys().items():
        value = settings.policy_options.get(option.name)
        lines.append(_yaml_line(key, option.default if value is None else value))
    return "\n".join(lines) + "\n"


def _yaml_line(key: str, value: Any) -> str:
    if isinstance(value, tuple):
        value = list(value)
    return yaml.safe_dump({key: value}, default_flow_style=False, sort_keys=False, width=10_000).strip()


def _setting_value(key: str, value: object, base: Path, where: SettingsFile) -> Any:
    """A setting's value checked for its type (its range is ``check_settings``'s); a path made absolute."""
    if key in _BOOLS:
        if not isinstance(value, bool):
            raise where.error(key, f"must be true or false, got {_shown(value)}")
        return value
    if key in _INTS:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or abs(value) >= 2**63:
            raise where.error(key, f"must be a whole number, got {_shown(value)}")
        return value
    if key in _NUMBERS:
        if not _is_number(value):
            raise where.error(key, f"must be {_UNITS.get(key, 'a number of seconds')}, got {_shown(value)}")
        return float(value)
    if key in _NUMBER_OR_TEXT and _is_number(value):
        return str(value)
    if key == "market":  # one file or directory, or a list of them (merged), as the repeated flag
        names = value if isinstance(value, list) else [value]
        if not names or not all(isinstance(name, str) for name in names):
            raise where.error(key, f"must be a market file, a list of them, or synthetic, got {_shown(value)}")
        return tuple(names)
    if key == "user_weights" and isinstance(value, dict):  # alice: 2, as the flag's alice=2
        return ",".join(f"{user}={weight}" for user, weight in value.items())
    if not isinstance(value, str):
        raise where.error(key, f"must be {'a path' if key in PATHS else 'text'}, got {_shown(value)}")
    if key in PATHS:
        return _absolute(value, base)
    if key == "token":
        from apportion.serve.accounts.auth import check_secret

        try:
            return check_secret(value, "the token")
        except ValueError as exc:
            raise where.error(key, str(exc)) from None
    return value


def _user_budgets(value: object, where: SettingsFile) -> dict[str, dict[str, float]]:
    """``user_budgets:``, a mapping of user to their own limits (``alice: {max_active_jobs: 100000}``),
    each limit a budget setting's key with a number (its range is ``check_settings``'s)."""
    from apportion.serve.app.settings import BUDGETS

    key = "user_budgets"
    if not isinstance(value, dict):
        raise where.error(key, f"must map users to their budgets (alice: {{max_active_jobs: 100000}}), got "
                               f"{_shown(value)}")
    table: dict[str, dict[str, float]] = {}
    for user, limits in value.items():
        if not isinstance(user, str) or not user.strip():
            raise where.error(key, f"a user must be a name, got {_shown(user)}")
        if not isinstance(limits, dict):
            raise where.error(key, f"{user}: must map budgets to numbers (max_active_jobs: 100000), got "
                                   f"{_shown(limits)}")
        for name, number in limits.items():
            if name not in BUDGETS:
                raise where.error(key, f"{user}: {_shown(name)} is no budget (known: {', '.join(BUDGETS)})")
            if name in _INTS and isinstance(number, float) and number.is_integer():
                number = int(number)
            if not _is_number(number) or (name in _INTS and not isinstance(number, int)):
                expected = "a whole number" if name in _INTS else "a number"
                raise where.error(key, f"{user}: {name} must be {expected}, got {_shown(number)}")
            table.setdefault(user, {})[name] = float(number) if name in _NUMBERS else number
    return table


def _option_value(option: Option, value: object, base: Path, where: SettingsFile, key: str) -> Any:
    """A policy option's value as its flag would give it: a bool, a number, text, or a file's absolute path."""
    from apportion.core.queues import QueueConfig

    if option.type is bool:
        if not isinstance(value, bool):
            raise where.error(key, f"must be true or false, got {_shown(value)}")
        return value
    if option.type in (int, float):
        if isinstance(value, float) and option.type is int and value.is_integer():
            value = int(value)
        kinds = option.type if option.type is int else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds) or abs(value) >= 2**63:
            expected = "a whole number" if option.type is int else "a number"
            raise where.error(key, f"must be {expected}, got {_shown(value)}")
        return option.type(value)
    if option.type is tuple and isinstance(value, (list, int, float)) and not isinstance(value, bool):
        numbers = value if isinstance(value, list) else [value]  # as the flag's S,S,…
        if not numbers or not all(_is_number(v) for v in numbers):
            raise where.error(key, f"must be a list of numbers, got {_shown(value)}")
        return ",".join(str(v) for v in numbers)
    if not isinstance(value, str):
        raise where.error(key, f"must be {option.metavar or 'text'}, got {_shown(value)}")
    if option.type is QueueConfig:
        return str(_absolute(value, base))
    return value


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) <= 1e300


def _shown(value: object) -> str:
    """A value in an error message: its repr, cut short."""
    from apportion.serve.base.bounds import clip

    return clip(repr(value), 40)


def _left_at_default(value: Any, option: Option) -> bool:
    """Whether a policy option's value asks for nothing (as the command line's default does)."""
    return isinstance(value, (bool, int, float, str)) and value == option.default


def _absolute(text: str, base: Path) -> Path:
    path = Path(text).expanduser()
    return path if path.is_absolute() else base / path


def _check_trusted(path: Path) -> None:
    """Refuse a config file another account may change (it says which token, user map and state
    directory the server trusts): group- or world-writable, or owned by anyone but us or root."""
    try:
        problem = trust_problem(path.stat(), path, secret=False)
    except OSError:
        return  # a missing or unreadable file: read_yaml says so
    if problem:
        raise InputError(str(path), problem)


def _check_private(path: Path, where: SettingsFile) -> None:
    """Refuse a file holding a secret that other users may read or change."""
    problem = trust_problem(path.stat(), path, secret=True)
    if problem:
        raise where.error("token", f"is a secret, but {problem}, "
                                   "or put the token in a file of its own and name it in token_file")


def _unknown(key: str, known: list[str]) -> str:
    """The error for a key no setting has: the close ones ("round-s" -> "round_s"), else every key."""
    snake = key.strip().replace("-", "_")
    close = [snake] if snake in known else difflib.get_close_matches(key, known, n=3, cutoff=0.6)
    if close:
        return f"unknown setting; did you mean {' or '.join(repr(c) for c in close)}?"
    return f"unknown setting (known: {', '.join(known)})"


def _key_lines(root: yaml.Node | None) -> dict[str, int]:
    """The 1-based line of each top-level key."""
    if not isinstance(root, yaml.MappingNode):
        return {}
    return {str(key.value): key.start_mark.line + 1 for key, _ in root.value}

