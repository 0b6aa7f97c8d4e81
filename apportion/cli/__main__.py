"""``python -m apportion.cli``: the ``apportion`` command."""

from apportion.cli import main

main(prog_name="apportion")
