"""``python -m apportion``: the ``apportion`` command."""

from apportion.cli import app

app(prog_name="apportion")
