"""Every command's --help: flags shown as flags, arguments named as words, text that flows, and
serve's options grouped into panels short enough to read."""

from __future__ import annotations

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from apportion.cli import app
from apportion.cli.help import flowing

runner = CliRunner()
# serve --help at 100 columns, in lines: 103 when it listed the policy options (now --help-policy-options)
SERVE_HELP_LINES_AT_100 = 100  # one line a setting, in panels: budgets, sharing and the job PATH took it from 72


def command_paths(group: TyperGroup, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and subcommand under ``group``, as the words that name it."""
    paths = [prefix]
    context = typer.Context(group)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        if isinstance(command, TyperGroup):
            paths += command_paths(command, (*prefix, name))
        else:
            paths.append((*prefix, name))
    return paths


COMMANDS = command_paths(typer.main.get_command(app))


def help_of(words: tuple[str, ...], columns: int) -> str:
    result = runner.invoke(app, [*words, "--help"], prog_name="apportion", env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.stdout


def test_every_command_is_walked():
    assert ("serve",) in COMMANDS and ("users", "add") in COMMANDS and () in COMMANDS


@pytest.mark.parametrize("columns", [80, 120])
@pytest.mark.parametrize("words", COMMANDS, ids=lambda words: " ".join(words) or "apportion")
def test_flags_take_no_type_and_arguments_are_words(words, columns):
    text = help_of(words, columns)
    assert "<bool>" not in text
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    assert "{" not in usage and "}" not in usage


def test_submit_names_its_argument_in_capitals():
    usage = next(line for line in help_of(("submit",), 100).splitlines() if "Usage:" in line)
    assert usage.split() == ["Usage:", "apportion", "submit", "[OPTIONS]", "[JOB_FILE]", "[--", "COMMAND...]"]


def test_serve_groups_its_options_and_fits_the_bound():
    text = help_of(("serve",), 100)
    for panel in ("Server", "Security", "Jobs", "Executor", "Policy options"):
        assert f"╭─ {panel} ─" in text
    assert len(text.splitlines()) <= SERVE_HELP_LINES_AT_100


def test_serve_help_policy_options_shows_the_policy_panel_with_flags_as_flags():
    result = runner.invoke(app, ["serve", "--help-policy-options"], prog_name="apportion", env={"COLUMNS": "100"})

    assert result.exit_code == 0, result.output
    assert "╭─ Policy options ─" in result.stdout and "╭─ Jobs ─" not in result.stdout
    assert "--water-filling" in result.stdout and "<bool>" not in result.stdout


def test_simulate_groups_its_options():
    text = help_of(("simulate",), 100)
    for panel in ("Inputs", "Cluster", "Policy options", "Mechanism", "Output"):
        assert f"╭─ {panel} ─" in text


def test_a_docstring_wrapped_in_the_code_flows_as_one_sentence():
    text = " ".join(help_of(("sweep",), 200).split())
    assert "report each metric's mean over the seeds with a 95% confidence interval" in text


def test_flowing_joins_lines_and_keeps_paragraphs():
    assert flowing("One sentence\n    wrapped here.\n\n    A second\n    paragraph.") == \
        "One sentence wrapped here.\n\nA second paragraph."
