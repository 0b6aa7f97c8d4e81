"""`apportion policies`: every policy a command can run, built-in or plugin, with its options."""

from __future__ import annotations

from typing import Any

from apportion.cli import options as opt
from apportion.cli.output import console, escape, print_json, print_table


def policies(as_json: bool = opt.json_option("the policies")) -> None:
    """List every policy, built-in or plugin, with its options and where it comes from.

    Plugins are the policies of installed packages' entry points (apportion.policies); each row says
    whether the policy is LP-based, elastic or space-sharing, and its options are flags of simulate,
    compare, sweep and serve. A policy in a file is used as --policy path/to/file.py:Name
    (docs/policies.md)."""
    from apportion.cli.plugin_names import discover_policies
    from apportion.policies.registry import ENTRIES

    discover_policies()
    rows = [describe(entry) for entry in ENTRIES.values()]
    if as_json:
        print_json({"policies": rows})
        return
    from rich.table import Table

    table = Table(header_style="bold")
    for column in ("policy", "from", "kind", "options", "summary"):
        table.add_column(column)
    for row in rows:
        kind = ", ".join(k for k in ("lp", "elastic", "space_sharing") if row[k]).replace("_", "-") or "—"
        flags = " ".join(o["flag"] if o["type"] == "bool" else f"{o['flag']} {o['metavar'] or o['type'].upper()}"
                         for o in row["options"] if o["flag"])
        table.add_row(escape(row["name"]), escape(row["source"]), kind, escape(flags), escape(row["summary"]))
    print_table(table)
    console.print("NAME:variant asks for a variant (max-min-fairness:agnostic); a file's policy: --policy "
                  "path/to/file.py:Name (docs/policies.md).", highlight=False)


def describe(entry) -> dict[str, Any]:
    """One policy as ``apportion policies --json`` shows it."""
    loaded = entry.load()
    cls = getattr(loaded, "plugin_class", loaded)
    return {
        "name": entry.name,
        "summary": entry.summary,
        "source": entry.source,
        "lp": entry.is_lp,
        "elastic": bool(getattr(cls, "sizes_jobs", False)),
        "space_sharing": entry.option("space_sharing") is not None or bool(getattr(cls, "space_sharing", False)),
        "variants": list(entry.variants),
        "options": [{"name": o.name, "flag": o.cli_flag if o.command_line else None,
                     "type": o.type.__name__ if o.type in (bool, int, float, str) else "text",
                     "metavar": o.metavar, "default": o.default if isinstance(o.default, (bool, int, float, str))
                     else None, "variant": o.variant, "required": o.required, "help": o.help}
                    for o in entry.options],
    }
