"""Where a benchmark's results go: `benchmarks/results/NAME[_TAG].json` and `.md`, the table also printed."""

from __future__ import annotations

import json
import os

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def write_report(name: str, tag: str | None, report: dict, lines: list[str]) -> str:
    """Write `report` as JSON and `lines` as Markdown under results/, print the Markdown; returns the path stem."""
    out = os.path.join(RESULTS, name + (f"_{tag}" if tag else ""))
    with open(out + ".json", "w") as f:
        json.dump(report, f, indent=1)
    with open(out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return out
