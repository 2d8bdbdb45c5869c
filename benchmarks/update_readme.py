"""Copy the markdown tables in benchmarks/results/ into README.md and docs/*.md between their markers.

    python benchmarks/update_readme.py

A section ``<!-- table:NAME -->...<!-- /table -->`` receives ``benchmarks/results/NAME.md``.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def fill_tables(page: Path) -> bool:
    """Refill every table section of ``page``; True if the page changed."""
    text = page.read_text()

    def fill(match):
        name = match.group(1)
        table = (ROOT / "benchmarks" / "results" / f"{name}.md").read_text().strip()
        return f"<!-- table:{name} -->\n{table}\n<!-- /table -->"

    new = re.sub(r"<!-- table:([\w/]+) -->.*?<!-- /table -->", fill, text, flags=re.S)
    if new != text:
        page.write_text(new)
    return new != text


def main():
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        print(f"{'updated' if fill_tables(page) else 'unchanged'} {page.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
