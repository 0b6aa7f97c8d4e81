"""`apportion users add/list/revoke`: who may use a server, run by its admin on the server's machine.

These work on the state directory itself (its state file), not through the API: whoever can
write the state directory is the server's admin already. A server that is running sees a new
user, or a revoked credential, at its next request.
"""

from __future__ import annotations

from pathlib import Path

import typer

from apportion.cli.help import HelpCommand, HelpGroup
from apportion.cli.output import console, errors, escape, fail, print_json

app = typer.Typer(cls=HelpGroup, no_args_is_help=True, help="Who may use a server: add users (each with a credential), list, revoke.")

StateDir = typer.Option(Path("~/.apportion/server"), "--state-dir", help="The server's state directory.")


def _store(state_dir: Path, create: bool = False):
    from apportion.serve.store.state import StateStore

    path = state_dir.expanduser() / "state.db"
    if not create and not path.exists():
        raise fail(f"no apportion state in {state_dir} (--state-dir names the server's)")
    return StateStore(path)


@app.command(cls=HelpCommand)
def add(
    name: str = typer.Argument(..., metavar="NAME", help="The user's name (what `apportion queue` shows)."),
    admin: bool = typer.Option(False, "--admin", help="May cancel and read the logs of every job, and submit as any user."),
    replace: bool = typer.Option(False, "--replace", help="Give an existing user a new credential (the old one stops working)."),
    state_dir: Path = StateDir,
) -> None:
    """Add a user and print their credential on stdout: shown this once, stored only as a salted hash.

    From the first user on, the server asks every caller for a credential.
    """
    import time

    from apportion.serve.accounts.auth import add_user

    store = _store(state_dir, create=True)
    try:
        first = not store.has_users()
        credential = add_user(store, name, admin, time.time(), replace=replace)
    except ValueError as exc:
        raise fail(str(exc)) from None
    finally:
        store.close()
    console.print(credential, highlight=False, soft_wrap=True)
    errors.print(f"{escape(name)}{' (admin)' if admin else ''}: the credential above is shown only this once. They keep it in "
                 "~/.config/apportion/token (chmod 600), a file for --token-file, or APPORTION_TOKEN.",
                 highlight=False, soft_wrap=True)
    if first:
        errors.print(f"the server of {escape(state_dir)} now asks every caller for a credential", highlight=False)


@app.command("list", cls=HelpCommand)
def list_users(
    as_json: bool = typer.Option(False, "--json", help="Print the users as JSON (a list)."),
    state_dir: Path = StateDir,
) -> None:
    """List the users: name, role, when added, whether revoked."""
    import time

    store = _store(state_dir)
    try:
        users = store.users()
    finally:
        store.close()
    if as_json:
        print_json([{"name": u.name, "admin": bool(u.admin), "created": u.created, "revoked": u.revoked}
                    for u in users])
        return
    if not users:
        console.print("no users: the server is open (loopback only; every caller is trusted as the user it names)")
        return

    def day(when: float) -> str:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(when))

    width = max(len(u.name) for u in users)
    for u in users:
        state = f"revoked {day(u.revoked)}" if u.revoked is not None else "active"
        console.print(f"{escape(f'{u.name:<{width}}')}  {'admin' if u.admin else 'user ':<5}  added {day(u.created)}  {state}",
                      highlight=False)


@app.command(cls=HelpCommand)
def revoke(
    name: str = typer.Argument(..., metavar="NAME", help="The user whose credential ends."),
    state_dir: Path = StateDir,
) -> None:
    """End a user's credential at once (their jobs keep running; `users add NAME --replace` issues a new one)."""
    import time

    store = _store(state_dir)
    try:
        if not store.revoke_user(name, time.time()):
            known = store.user(name)
            raise fail(f"user {name!r} " + ("is revoked already" if known else "does not exist"))
    finally:
        store.close()
    console.print(f"revoked the credential of {escape(name)}", highlight=False)
