"""The server's commands start without pydantic, and options still read as typer reads them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from apportion.cli import app
from apportion.cli.light_params import supported

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def modules_loaded(*args: str) -> str:
    """Run the command in a fresh interpreter; what it printed on stderr, then whether pydantic was loaded."""
    code = ("import sys, atexit\natexit.register(lambda: print('pydantic loaded:', 'pydantic' in sys.modules,"
            " file=sys.stderr))\nfrom apportion.cli import app\napp(sys.argv[1:], prog_name='apportion')\n")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120).stderr


def test_status_and_queue_do_not_load_pydantic_where_typer_lets_them():
    for command in (("status",), ("queue",), ("queue", "--all", "--json")):
        said = modules_loaded(*command, "--server", "http://127.0.0.1:9")
        assert "cannot reach the apportion server at http://127.0.0.1:9" in said
        if supported():  # a typer without the hook reads every option itself: the command still works
            assert said.rstrip().endswith("pydantic loaded: False"), said


def test_options_given_still_read_and_refuse_as_typer_has_them(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("")
    empty = runner.invoke(app, ["status", "--server", "http://127.0.0.1:9", "--token-file", str(token_file)])
    assert empty.exit_code == 2 and f"--token-file {token_file}" in empty.stderr  # a path, read
    bad = runner.invoke(app, ["logs", "1", "--attempt", "two", "--server", "http://127.0.0.1:9"])
    assert bad.exit_code == 2 and "Invalid value for '--attempt'" in bad.output  # typer's own check
