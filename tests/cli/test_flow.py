"""The one flow of the commands that replay (simulate, compare, sweep, replay): an unwritable --out
refused before anything is read, progress on stderr, the table or JSON on stdout, the files named."""

from __future__ import annotations

import io
import json

import pytest
import typer
from typer.testing import CliRunner

from apportion.cli import app
from apportion.cli.flow import Progress, replay_command
from apportion.cli.help import HelpCommand, HelpGroup
from apportion.cli.output import console
from apportion.cli.progress import ProgressLines

runner = CliRunner()


@pytest.mark.parametrize("command", [("simulate",), ("compare", "--policies", "fifo,las"), ("sweep",),
                                     ("replay", "no-such-run")])
def test_every_command_that_writes_files_refuses_an_unwritable_out_before_reading_anything(tmp_path, command):
    taken = tmp_path / "taken"
    taken.write_text("x")
    command = [word if word != "no-such-run" else str(tmp_path / word) for word in command]

    result = runner.invoke(app, [*command, "--out", str(taken)])

    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.startswith("error: --out: ") and "exists and is not a directory" in result.stderr
    assert result.stdout == ""


def run_flow(tmp_path, as_json: bool, out=None, steps=None):
    """A command of the flow whose steps record what ran, in order."""
    steps = [] if steps is None else steps

    def prepare():
        steps.append("prepare")
        return {"jobs": 3}

    def work(inputs, progress):
        steps.append("work")
        progress.update("fifo", completed=inputs["jobs"])
        return {"avg_jct_s": 1.5}

    def write(inputs, result, where):
        steps.append("write")
        (where / "summary.json").write_text(json.dumps(result))
        return [where / "summary.json"]

    return replay_command(out=out, as_json=as_json, prepare=prepare, tasks=lambda inputs: {"fifo": inputs["jobs"]},
                          work=work, to_json=lambda inputs, result: result,
                          show=lambda inputs, result: console.print(f"avg JCT {result['avg_jct_s']} s"), write=write)


def test_with_json_stdout_holds_only_the_json_and_the_files_are_named_on_stderr(tmp_path, capfd):
    steps = []
    run_flow(tmp_path, as_json=True, out=tmp_path, steps=steps)

    printed = capfd.readouterr()
    assert json.loads(printed.out) == {"avg_jct_s": 1.5}
    assert printed.err.strip() == f"wrote {tmp_path / 'summary.json'}"
    assert steps == ["prepare", "work", "write"]


def test_without_json_the_table_comes_first_and_the_files_are_named_under_it(tmp_path, capfd):
    run_flow(tmp_path, as_json=False, out=tmp_path)

    assert capfd.readouterr().out.splitlines() == ["avg JCT 1.5 s", f"wrote {tmp_path / 'summary.json'}"]


def test_an_unwritable_out_is_refused_before_the_inputs_are_read(tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("x")
    steps = []

    with pytest.raises(typer.Exit):
        run_flow(tmp_path, as_json=False, out=taken, steps=steps)

    assert steps == []


def test_progress_reaches_each_task_by_name():
    stream = io.StringIO()
    lines = ProgressLines("jobs ended", every_s=1e-9, stream=stream)
    progress = Progress(lines, {"fifo": 10, "las": 10})

    progress.jobs_ended("las", 4, 10, 2 * 86400)

    assert stream.getvalue().startswith("fifo: 0/10 jobs ended, virtual time 0.0 d; "
                                        "las: 4/10 jobs ended, virtual time 2.0 d")


def test_a_group_and_a_command_flow_their_help_alike():
    group = typer.Typer(cls=HelpGroup, help="A group whose help\n    is wrapped in the code.")

    @group.command(cls=HelpCommand)
    def one(flag: bool = typer.Option(False, "--flag", help="A flag\n    that flows.")) -> None:
        """A command whose help
        is wrapped in the code."""

    @group.command(cls=HelpCommand)
    def two() -> None:
        """A second command."""

    built = typer.main.get_group(group)
    assert built.help == "A group whose help is wrapped in the code."
    assert built.commands["one"].help == "A command whose help is wrapped in the code."
    text = runner.invoke(group, ["one", "--help"], env={"COLUMNS": "200"}).stdout
    assert "A flag that flows." in text and "<bool>" not in text


@pytest.mark.parametrize("command, call, not_taken", [
    ("simulate", "replay_arguments", set()),
    ("compare", "replay_arguments", {"received_since", "share_by_user", "user_weights"}),
    ("sweep", "sweep_arguments", set()),
])
def test_each_command_hands_on_every_argument_the_library_checks_by_the_same_name(command, call, not_taken):
    import inspect

    import apportion.arguments as arguments
    from apportion.cli import simulate, sweep

    callback = {"simulate": simulate.simulate, "compare": simulate.compare, "sweep": sweep.sweep}[command]
    taken = {p.name for p in inspect.signature(getattr(arguments, call)).parameters.values()
             if p.kind is p.KEYWORD_ONLY}
    assert taken - set(inspect.signature(callback).parameters) == not_taken
