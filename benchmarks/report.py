"""Where a benchmark's results go: ``<stem>.json`` (the numbers) and ``<stem>.md`` (the table people read)."""

from __future__ import annotations

import json
from pathlib import Path


def write_report(stem: str | Path, results: dict, markdown: str, echo: bool = True) -> Path:
    """Write ``results`` as JSON and ``markdown`` beside it (folders made as needed); print the table."""
    stem = Path(stem)
    if stem.suffix in (".json", ".md"):  # a stem given with one of the extensions
        stem = stem.with_suffix("")
    stem.parent.mkdir(parents=True, exist_ok=True)
    # appended, not with_suffix: a stem like "grid_p0.3" keeps its dot (with_suffix made it "grid_p0.json")
    Path(f"{stem}.json").write_text(json.dumps(results, indent=1))
    Path(f"{stem}.md").write_text(markdown)
    if echo:
        print(markdown)
    return stem
