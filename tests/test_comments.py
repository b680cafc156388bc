"""The code's comments and docstrings, and the documents, give their reasons in place: none
sends a reader to a log of past changes or to a ticket number, which the reader of the
package does not have."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CITATION = re.compile(r"bench/CHANGES|CHANGES\.md|\bitems? \d|\bissue \d", flags=re.IGNORECASE)
SUFFIXES = {".py", ".sql", ".html"}
#: The tests that look for such citations name the pattern themselves.
CHECKERS = frozenset({"tests/test_comments.py", "tests/test_packaging.py"})


def citing() -> set[str]:
    found = set()
    for top in ("src", "tests", "bench"):
        for path in (ROOT / top).rglob("*"):
            if path.suffix in SUFFIXES and CITATION.search(path.read_text(encoding="utf-8")):
                found.add(path.relative_to(ROOT).as_posix())
    # The documents a user reads speak of ackledger as it is, too.
    for path in [*(ROOT / "docs").rglob("*.md"), ROOT / "README.md", ROOT / "CHANGELOG.md"]:
        if CITATION.search(path.read_text(encoding="utf-8")):
            found.add(path.relative_to(ROOT).as_posix())
    return found - CHECKERS


def test_no_comment_cites_a_change_log_or_a_ticket() -> None:
    assert sorted(citing()) == []


def test_the_pattern_finds_a_citation() -> None:
    assert CITATION.search("# half its cost (see CHANGES.md)")
    assert CITATION.search('"""PostgreSQL wake-up (issue 1): ..."""')
    assert not CITATION.search("# one item per request, 16 items at most")
