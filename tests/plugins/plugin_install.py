"""Installing tests/plugins/demo_package as a researcher's package would be: its files and a
dist-info that declares the entry points a test gives, in a folder put on sys.path (where
importlib.metadata finds them, in this process and in the processes compare and sweep spawn)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

PACKAGE = Path(__file__).parent / "demo_package" / "apportion_demo_plugins"
MODULE = "apportion_demo_plugins"


def install(site: Path, monkeypatch, entry_points: dict[str, dict[str, str]], name: str = "apportion-demo-plugins",
            version: str = "1.0") -> Path:
    """Install the demo package under ``site`` with ``entry_points`` (group -> name -> "module:attr")."""
    site.mkdir(parents=True, exist_ok=True)
    if not (site / MODULE).exists():
        shutil.copytree(PACKAGE, site / MODULE)
    dist = site / f"{name.replace('-', '_')}-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (dist / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in points.items()) + "\n"
        for group, points in entry_points.items()))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    return site
