"""`apportion blocks add/list`: the server's privacy blocks, through its API (adding is for admins).

A block is a unit of data with a privacy budget that jobs' claims consume (docs/privacy.md); it
arrives, and its budget starts to unlock, when it is added.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from apportion.cli import options as opt
from apportion.cli.help import HelpCommand, HelpGroup
from apportion.cli.blocks_table import print_budgets
from apportion.cli.jobs import call, client_for
from apportion.cli.output import cell, console, fail, print_json

app = typer.Typer(cls=HelpGroup, no_args_is_help=True,
                  help="The server's privacy blocks: add them (admins), list their budgets.")


@app.command(cls=HelpCommand)
def add(
    name: Optional[str] = typer.Argument(None, metavar="NAME", help="The block's name (one word)."),
    epsilon: Optional[float] = typer.Option(None, "--epsilon", help="The ε its budget keeps."),
    delta: Optional[float] = typer.Option(None, "--delta", help="The δ its budget keeps."),
    rdp_orders: Optional[List[str]] = typer.Option(None, "--rdp-orders", help="Account in Rényi DP at these orders (2,4,8 or repeat)."),
    file: Optional[Path] = typer.Option(None, "--file", help="A block file (block,arrival_s,epsilon,delta[,rdp_orders]) as simulate's --blocks; arrival_s is not used: each arrives now."),
    server: Optional[str] = opt.Server,
    token: Optional[str] = opt.Token,
    token_file: Optional[Path] = opt.TokenFile,
) -> None:
    """Add a privacy block (NAME with --epsilon and --delta), or every block of a --file, all or none."""
    if (file is None) == (name is None):
        raise fail("give a block's NAME with --epsilon and --delta, or --file")
    if file is not None:
        blocks = _file_blocks(file)
    else:
        if epsilon is None or delta is None:
            raise fail(f"block {name}: give its --epsilon and --delta")
        block = {"name": name, "epsilon": epsilon, "delta": delta}
        if rdp_orders:
            block["rdp_orders"] = [item.strip() for text in rdp_orders for item in text.split(",") if item.strip()]
        blocks = [block]
    added = call(client_for(server, token, token_file).add_blocks, blocks)["added"]
    console.print(f"added {len(added)} block{'s' * (len(added) != 1)}: {cell(', '.join(added), 200)}", highlight=False)


@app.command("list", cls=HelpCommand)
def list_blocks(
    as_json: bool = opt.json_option("the policy and the blocks"),
    server: Optional[str] = opt.Server,
    token: Optional[str] = opt.Token,
    token_file: Optional[Path] = opt.TokenFile,
) -> None:
    """List the blocks: BLOCK EPSILON DELTA UNLOCKED GRANTED CONSUMED LEFT CLAIMS WAITING.

    UNLOCKED, GRANTED (to jobs not started yet), CONSUMED (by jobs that started) and LEFT (its
    budget less granted and consumed) are in ε; under Rényi accounting at the order with the most left.
    """
    info = call(client_for(server, token, token_file).blocks)
    if as_json:
        print_json(info)
        return
    print_budgets(info)


def _file_blocks(path: Path) -> list[dict]:
    """The blocks of a block file, as ``POST /blocks`` takes them; a bad file is one line naming its line and field."""
    from apportion.core.errors import InputError
    from apportion.workloads.privacy_files import read_blocks

    try:
        blocks = read_blocks(path)
    except InputError as exc:
        raise fail(str(exc)) from None
    orders = None if blocks.orders is None else [float(a) for a in blocks.orders]
    return [{"name": str(name), "epsilon": float(e), "delta": float(d), **({"rdp_orders": orders} if orders else {})}
            for name, e, d in zip(blocks.name.tolist(), blocks.epsilon.tolist(), blocks.delta.tolist())]
