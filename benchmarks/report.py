"""Where a benchmark's results go: ``<stem>.json`` (the numbers) and ``<stem>.md`` (the table people read)."""

from __future__ import annotations

import json
from pathlib import Path


def write_report(stem: str | Path, results: dict, markdown: str, echo: bool = True) -> Path:
    """Write ``results`` as JSON and ``markdown`` beside it (folders made as needed); print the table."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(results, indent=1))
    stem.with_suffix(".md").write_text(markdown)
    if echo:
        print(markdown)
    return stem
