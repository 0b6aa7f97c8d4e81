"""``python -m apportion.cli``: the ``apportion`` command."""

from apportion.cli import app

app(prog_name="apportion")
