"""Every PR or issue the course cites is in docs/FACTS.md, the table of claims about other systems, with its
source and the date it was checked. A citation without its row fails here, naming the file."""
from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CITATION = re.compile(r"\b(?:PRs?|issues?)\s+(#\d+(?:(?:,\s*|\s+and\s+)#\d+)*)", re.IGNORECASE)


def cited_text(path: Path) -> str:
    """What a reader sees: a notebook's cell sources (not its outputs), or the file."""
    if path.suffix == ".ipynb":
        return "\n".join("".join(cell["source"]) for cell in json.loads(path.read_text())["cells"])
    return path.read_text()


def citations(text: str) -> set[str]:
    return {number for group in CITATION.findall(text) for number in re.findall(r"#\d+", group)}


def test_the_pattern_finds_each_way_of_citing():
    assert citations("PR #1, issue #22, PRs #3, #4 and #5; sglang issue #6") == {"#1", "#22", "#3", "#4", "#5", "#6"}
    assert citations("step #7 and row 8") == set()


def test_every_cited_pr_or_issue_has_its_row_in_the_facts_table():
    table = citations(" ".join(row for row in (ROOT / "docs/FACTS.md").read_text().splitlines()
                               if row.startswith("| ")))
    files = [*ROOT.glob("notebooks/*.ipynb"), *ROOT.glob("docs/*.md"), ROOT / "README.md", ROOT / "bench/README.md",
             *ROOT.glob("minicb/**/*.py"), *ROOT.glob("exercises/*.py")]
    missing = {f"{path.relative_to(ROOT)}: {number}" for path in files for number in citations(cited_text(path))
               if number not in table}
    assert not missing, (f"cited without a row in docs/FACTS.md (claim, source, date checked): {sorted(missing)}; "
                         "check the source with the search tool, then add its row")
