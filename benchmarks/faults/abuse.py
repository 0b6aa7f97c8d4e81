"""A real ``apportion serve`` tried as a hostile or simply big user would: prints one table of figures
against their targets.

Each case (``benchmarks/faults/abuse_cases/``) starts its own server (the ``apportion`` that ``PYTHONPATH``
names, so two trees compare) on a free loopback port with a temporary state directory, and ends
only that server, by pid. ``--case NAME`` (repeatable) runs some; the default runs them all. The
last line is every row as one JSON object.

    python benchmarks/faults/abuse.py                              # every case, this tree's code
    python benchmarks/faults/abuse.py --case flood --case arrays   # some
    PYTHONPATH=/some/other/tree python benchmarks/faults/abuse.py  # another tree's, as the baseline
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from abuse_cases import cases  # noqa: E402


def value_text(value, unit: str) -> str:
    return f"{value} {unit}" if unit not in ("", "status") else str(value)


def print_table(rows: list[dict]) -> None:
    headers = ("case", "figure", "value", "target", "ok")
    lines = [(r["case"], r["figure"], value_text(r["value"], r["unit"]),
              "" if r["target"] is None else value_text(r["target"], r["unit"]),
              "" if r["ok"] is None else ("yes" if r["ok"] else "NO")) for r in rows]
    widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    for line in lines:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths)))


def main() -> None:
    known = cases()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=sorted(known), help="a case to run (repeatable; default all)")
    parser.add_argument("--clients", type=int, default=20, help="the flood's clients")
    parser.add_argument("--flood-s", type=float, default=10.0, help="how long the flood lasts")
    parser.add_argument("--flood-only", type=int, help=argparse.SUPPRESS)  # the flood's own process: the port
    parser.add_argument("--quick", action="store_true",
                        help="the flood case alone (or --case), 2 clients for 2 s: what the test suite runs")
    args = parser.parse_args()
    if args.quick:
        args.case, args.clients, args.flood_s = args.case or ["flood"], 2, 2.0
    if args.flood_only:
        print(json.dumps(known["flood"].flood(args.flood_only, args.clients, args.flood_s)))
        return
    rows: list[dict] = []
    for name in args.case or list(known):
        started = time.monotonic()
        print(f"{name}: {known[name].ABOUT} ...", file=sys.stderr, flush=True)
        rows += known[name].run(args)
        print(f"{name}: done in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    print(f"code: {os.environ.get('PYTHONPATH', '(installed)')}")
    print_table(rows)
    print(json.dumps({"code": os.environ.get("PYTHONPATH", "(installed)"), "rows": rows}))


if __name__ == "__main__":
    main()
