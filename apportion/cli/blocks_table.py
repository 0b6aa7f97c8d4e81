"""The server's privacy blocks (``GET /blocks``) as a table: what ``blocks list`` and ``queue`` print."""

from __future__ import annotations

from apportion.cli.output import cell, console, print_table


def print_budgets(info: dict) -> None:
    """The blocks of ``GET /blocks`` as a table (nothing when there is none)."""
    from rich import box
    from rich.table import Table

    if not info["blocks"]:
        console.print("no privacy blocks (an admin adds them: apportion blocks add)", highlight=False)
        return
    table = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False, show_edge=False,
                  title=f"privacy blocks ({cell(info['policy'])})", title_justify="left")
    columns = ("BLOCK", "EPSILON", "DELTA", "UNLOCKED", "GRANTED", "CONSUMED", "LEFT", "CLAIMS", "WAITING")
    for column in columns:
        table.add_column(column, justify="left" if column == "BLOCK" else "right", no_wrap=True)
    for b in info["blocks"]:
        at = f" @{b['order']:g}" if b.get("order") is not None else ""
        table.add_row(cell(b["name"]), f"{b['epsilon']:g}", f"{b['delta']:g}", f"{b['unlocked']:.4g}",
                      f"{b['granted']:.4g}", f"{b['consumed']:.4g}", f"{b['left']:.4g}{at}", str(b["claims"]),
                      str(b["waiting"]))
    print_table(table)
