"""report.html's section on a rented cluster: dollars by market and instance type, and the market's
preemptions, one column a replay."""

from __future__ import annotations

import html
from typing import Sequence

from apportion.report.tables import policy_name
from apportion.sim.result import SimResult


def rented_section(results: Sequence[SimResult]) -> str:
    """The section's HTML; empty when no replay rented its instances."""
    rented = [r for r in results if r.rented is not None]
    if not rented:
        return ""
    head = "".join(f"<th>{html.escape(policy_name(r.summary, i))}</th>" for i, r in enumerate(rented))
    rows = [("on-demand", [r.rented.by_market()["on-demand"] for r in rented]),
            ("spot", [r.rented.by_market()["spot"] for r in rented]),
            ("egress", [r.rented.egress_usd for r in rented])]
    types = list(dict.fromkeys(label for r in rented for label in r.rented.by_type()))
    rows += [(label, [r.rented.by_type().get(label) for r in rented]) for label in types]
    preempted = list(dict.fromkeys(label for r in rented for label in r.rented.preemptions_by_type()))
    lines = ['<section>', '  <h2>Rented instances</h2>',
             f'  <p class="note">Dollars by market and by instance type (cloud/region/instance/market), from '
             f'{html.escape(rented[0].rented.market.source)}. Spot preemptions: '
             f'{html.escape(rented[0].rented.market.preemptions_from)}.</p>',
             f'  <table class="summary"><thead><tr><th>dollars</th>{head}</tr></thead><tbody>']
    for label, values in rows:
        cells = "".join(f"<td>{'—' if v is None else f'${v:,.2f}'}</td>" for v in values)
        lines.append(f"  <tr><th>{html.escape(label)}</th>{cells}</tr>")
    lines.append("  </tbody></table>")
    if preempted:
        lines.append(f'  <table class="summary"><thead><tr><th>spot preemptions</th>{head}</tr></thead><tbody>')
        for label in preempted:
            cells = "".join(f"<td>{r.rented.preemptions_by_type().get(label, 0):,}</td>" for r in rented)
            lines.append(f"  <tr><th>{html.escape(label)}</th>{cells}</tr>")
        lines.append("  </tbody></table>")
    lines.append("</section>")
    return "\n".join(lines)
