"""The supervisor of one attempt: ``python -m apportion.executors.wrapper ... -- COMMAND``.

The server starts this as the leader of a new process group; it runs the job's command in
the same group, waits for it, and writes the exit code to ``--exit-file`` (atomically). It
outlives the server, so a server killed with SIGKILL and started again can still learn how
an attempt ended, and its command line (state directory, job, attempt, slots) lets the new
server find and re-adopt the attempts that are still running.

SIGTERM to the group reaches the job (which checkpoints and exits); the supervisor itself
ignores it so that it can record the exit. Once the job has exited, it kills whatever else
is left in the group (stray data-loader workers), itself last.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

MARKER = "apportion.executors.wrapper"


def parse(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """``--key value`` options up to ``--``, then the command."""
    if "--" not in argv:
        raise SystemExit("usage: python -m apportion.executors.wrapper --state-dir S --job J --attempt N"
                         " --slots X --exit-file F --workdir D -- COMMAND...")
    cut = argv.index("--")
    options, command = argv[:cut], argv[cut + 1:]
    values = {}
    for i in range(0, len(options) - 1, 2):
        values[options[i].lstrip("-")] = options[i + 1]
    return values, command


def _ignore(signum, frame) -> None:  # a handler, not SIG_IGN: children must not inherit "ignored"
    pass


def _account(run_as: str | None) -> dict:
    """Popen's arguments to start the command as ``--run-as UID:GID:GROUPS`` (none: as this process's user)."""
    if not run_as:
        return {}
    uid, gid, groups = run_as.split(":")
    return {"user": int(uid), "group": int(gid), "extra_groups": [int(g) for g in groups.split(",") if g]}


def main(argv: list[str] | None = None) -> int:
    options, command = parse(sys.argv[1:] if argv is None else argv)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _ignore)
    started = time.time()
    try:
        child = subprocess.Popen(command, cwd=options.get("workdir") or None, **_account(options.get("run-as")))
    except OSError as err:
        print(f"apportion: cannot start {command[0] if command else '(empty command)'}: {err}",
              file=sys.stderr, flush=True)
        code = 127
    else:
        code = child.wait()
    path = options.get("exit-file")
    if path:
        record = {"code": code, "started": started, "finished": time.time()}
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    sys.stdout.flush()
    sys.stderr.flush()
    if os.getpgid(0) == os.getpid():  # only when leading our own group, as the server starts us
        os.killpg(0, signal.SIGKILL)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
