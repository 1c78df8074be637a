"""The documentation stays short at the top, speaks of the project only, and its links lead somewhere."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README_MAX_LINES = 300
# Numbered work items and working sessions are the history of how the project was built, not documentation.
HISTORY = re.compile(r"\b(issue|session)\s+#?\d+|\b(this|last|previous|earlier|next) session\b", re.IGNORECASE)
TEXT_SUFFIXES = {".md", ".py", ".sh", ".yaml", ".yml", ".txt", ".toml"}


def _documentation_files() -> list[Path]:
    files = [REPO / "README.md"]
    for folder in ("docs", "bench", "tests"):
        files += [p for p in sorted((REPO / folder).rglob("*")) if p.is_file() and p.suffix in TEXT_SUFFIXES]
    return files


def test_the_readme_stays_short():
    lines = (REPO / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move details into docs/ (at most {README_MAX_LINES})"


def test_no_history_narration_in_docs_bench_or_tests():
    found = []
    for path in _documentation_files():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
            match = HISTORY.search(line)
            if match:
                found.append(f"{path.relative_to(REPO)}:{number}: {match.group(0)!r}")
    assert not found, "history narration (say what is, with a date where it is a figure):\n" + "\n".join(found)


def test_the_history_pattern_catches_what_it_should():
    assert HISTORY.search("as measured in session" + " 7") and HISTORY.search("fixed in Issue" + " #11")
    assert HISTORY.search("no device time was left in this" + " session")
    assert not HISTORY.search("a Tinker session closes") and not HISTORY.search("the WebSocket session ends")


def test_relative_links_in_readme_and_docs_lead_to_files():
    missing = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "bench" / "README.md"]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if re.match(r"[a-z]+://", target):
                continue
            resolved = (page.parent / target).resolve()
            if not resolved.exists():
                missing.append(f"{page.relative_to(REPO)} -> {target}")
    assert not missing, missing
