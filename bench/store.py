"""docs/benchmarks.json: every section's figures with the run that measured them.

A run of some sections (``--only``) replaces those sections and keeps the others, so a page
can be made of sections measured one at a time; each section keeps its own run line (command,
start, duration, machine and load), and the page shows every run line it draws on. The last
comparison with an earlier revision (``--against``) is kept under its own key, ``against``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .common import Results

DOCS = Path(__file__).resolve().parent.parent / "docs"
STORE = DOCS / "benchmarks.json"


def load(path: Path = STORE) -> dict[str, dict[str, Any]]:
    """The sections stored at ``path``, by name (none if there is no such file)."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    sections = data.get("sections") if isinstance(data, dict) else None
    if not isinstance(sections, dict):
        raise ValueError(f"{path}: no 'sections' object (written by an older bench?)")
    return sections


def load_against(path: Path = STORE) -> dict[str, Any] | None:
    """The last comparison with an earlier revision (``--against``), if one was stored."""
    if not path.exists():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    against = data.get("against") if isinstance(data, dict) else None
    return against if isinstance(against, dict) else None


def save(sections: dict[str, dict[str, Any]], path: Path = STORE) -> None:
    """Stores ``sections``, keeping the stored comparison: a later run does not measure it."""
    _write(path, sections, load_against(path))


def save_against(against: dict[str, Any], path: Path = STORE) -> None:
    """Stores the comparison with an earlier revision, keeping the sections."""
    _write(path, load(path), against)


def _write(path: Path, sections: dict[str, dict[str, Any]], against: dict[str, Any] | None) -> None:
    data: dict[str, Any] = {"sections": sections}
    if against is not None:
        data["against"] = against
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def write_run(sections: dict[str, dict[str, Any]], chosen: list[str], path: Path) -> None:
    """Writes the figures of the ``chosen`` sections alone to ``path`` (``--json``)."""
    measured = combined({name: sections[name] for name in chosen}, chosen)
    path.write_text(json.dumps(measured.as_dict(), indent=1) + "\n", encoding="utf-8")


def combined(sections: dict[str, dict[str, Any]], order: list[str]) -> Results:
    """Every stored section's results in one, sections in ``order`` first."""
    results = Results()
    names = [n for n in order if n in sections] + [n for n in sections if n not in order]
    for name in names:
        part = Results.from_dict(sections[name])
        results.figures.update(part.figures)
        results.refused.update(part.refused)
        results.skipped.update(part.skipped)
        results.notes += part.notes
    return results


def section_part(results: Results, before: Results) -> dict[str, Any]:
    """What ``results`` holds beyond ``before`` (what one section added), as stored."""
    part = Results()
    part.figures = {k: f for k, f in results.figures.items() if k not in before.figures}
    part.refused = {k: v for k, v in results.refused.items() if k not in before.refused}
    part.skipped = {k: v for k, v in results.skipped.items() if k not in before.skipped}
    part.notes = results.notes[len(before.notes) :]
    return part.as_dict()


def snapshot(results: Results) -> Results:
    """A shallow copy of which keys, skips and notes ``results`` holds now."""
    copy = Results()
    copy.figures = dict(results.figures)
    copy.refused = dict(results.refused)
    copy.skipped = dict(results.skipped)
    copy.notes = list(results.notes)
    return copy
