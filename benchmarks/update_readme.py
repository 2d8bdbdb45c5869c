"""Copy the markdown tables in benchmarks/results/ into README.md between their markers.

    python benchmarks/update_readme.py

A README section ``<!-- table:NAME -->...<!-- /table -->`` receives ``benchmarks/results/NAME.md``.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main():
    readme = ROOT / "README.md"
    text = readme.read_text()

    def fill(match):
        name = match.group(1)
        table = (ROOT / "benchmarks" / "results" / f"{name}.md").read_text().strip()
        return f"<!-- table:{name} -->\n{table}\n<!-- /table -->"

    text = re.sub(r"<!-- table:([\w/]+) -->.*?<!-- /table -->", fill, text, flags=re.S)
    readme.write_text(text)
    print(f"updated {readme}")


if __name__ == "__main__":
    main()
