"""audit.html: one self-contained page for a fleet audit (ranked table, headroom chart, links to the
report of each run the audit started), rebuilt from audit.json."""

from __future__ import annotations

from pathlib import Path

from ..record.rundir import write_atomic
from ..report import charts
from .files import AuditReport


def build(folder: Path, report: AuditReport) -> Path:
    """Write ``audit.html`` in the audit folder and return its path."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    rows = [(e.name, e.headroom.headroom, e.headroom.basis, e.headroom.roofline_pct)
            for e in report.entries if e.headroom is not None]
    template = Environment(loader=PackageLoader("cudaopt.fleet", "templates"),
                           autoescape=select_autoescape(["html", "j2"])).get_template("audit.html.j2")
    html = template.render(report=report, headroom_svg=charts.headroom(rows), colours=charts.BASIS_COLOURS)
    out = folder / "audit.html"
    write_atomic(out, html)
    return out
