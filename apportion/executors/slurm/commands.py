"""Slurm's own commands, run for the executor: each a subprocess with a timeout, its failure an OSError.

The commands (``sbatch``, ``squeue``, ``scontrol``, ``scancel``, ``sacct``) are the stable interface
every Slurm site has; ``slurmrestd`` is often absent and needs JWT set-up (docs/slurm.md says why).
"""

from __future__ import annotations

import os
import subprocess

CALL_S = 20.0  # the longest one Slurm command may take


class Slurm:
    """Runs Slurm's commands with ``env`` over this process's environment (``SLURM_CONF`` for a cluster
    other than the default one)."""

    def __init__(self, env: dict[str, str] | None = None, timeout_s: float = CALL_S) -> None:
        self.env = dict(env or {})
        self.timeout_s = timeout_s

    def run(self, *argv: str, stdin: str | None = None, env: dict[str, str] | None = None,
            check: bool = True) -> str:
        """``argv``'s output; OSError naming the command and Slurm's message when it fails (``check``)."""
        try:
            done = subprocess.run(list(argv), input=stdin, capture_output=True, text=True, timeout=self.timeout_s,
                                  env={**(os.environ if env is None else env), **self.env})
        except FileNotFoundError:
            raise OSError(f"{argv[0]} not found: is Slurm installed here (its client commands on PATH)?") from None
        except subprocess.TimeoutExpired as err:
            said = err.stderr.decode(errors="replace") if isinstance(err.stderr, bytes) else (err.stderr or "")
            last = said.strip().splitlines()[-1:] or [""]
            raise OSError(f"{argv[0]} did not answer within {self.timeout_s:g} s"
                          + (f" ({last[0].strip()})" if last[0] else "")) from None
        if check and done.returncode != 0:
            message = (done.stderr or done.stdout).strip().splitlines()
            raise OSError(f"{' '.join(argv[:2])}: {message[-1] if message else f'exit {done.returncode}'}")
        return done.stdout
