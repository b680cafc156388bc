"""docs/benchmarks.md is made from sections measured apart: a partial run replaces only its own.

The section run here is the suite's real ``accept`` workload, shrunk (a few events on real
SQLite files); the stored file is a real JSON file read back.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from bench import report, store
from bench.__main__ import SECTIONS, measure
from bench.common import QUICK

TINY = dataclasses.replace(QUICK, reps=1, accept_events=20)
ABOUT = {
    "cores": "2",
    "cpu": "test cpu",
    "kernel": "Linux",
    "python": "CPython",
    "sqlite": "3",
    "postgresql": "15",
}


def test_a_partial_run_replaces_its_sections_and_keeps_the_others(tmp_path: Path) -> None:
    path = tmp_path / "benchmarks.json"
    stored: dict[str, dict[str, object]] = {}
    measure(["accept"], TINY, stored, command="first", about=ABOUT,
            save=lambda sections: store.save(sections, path))  # fmt: skip
    first = store.load(path)
    assert set(first) == {"accept"}
    assert {f["key"] for f in first["accept"]["figures"]} == {"accept.full", "accept.normal"}
    # Another section stored beside it, then accept measured again on its own.
    first["sink"] = {**first["accept"], "command": "other", "figures": [], "notes": ["kept"]}
    store.save(first, path)
    again = store.load(path)
    measure(["accept"], TINY, again, command="second", about=ABOUT,
            save=lambda sections: store.save(sections, path))  # fmt: skip
    last = json.loads(path.read_text())["sections"]
    assert last["accept"]["command"] == "second"
    assert last["sink"]["notes"] == ["kept"]
    assert len(last["accept"]["figures"]) == 2  # replaced, not added to
    # The page shows both runs' lines, and what no section measured as not measured.
    page = report.render(last, list(SECTIONS))
    assert "- `second`" in page and "- `other`" in page
    assert page.index("## What to expect") < page.index("## Floors and ratios")
    assert "| SQLite | RabbitMQ | not measured |" in page
    assert len(page.splitlines()) < 300
    assert "**This is a quick run**" in page


def test_an_older_file_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps({"figures": []}))
    with pytest.raises(ValueError, match="no 'sections' object"):
        store.load(path)


def test_the_page_says_when_the_machine_was_busier_than_its_cores() -> None:
    def page(load: str) -> str:
        about = {**ABOUT, "load_before": f"{load} 0 0", "load_after": "0.10 0 0"}
        part = {"plan": "full", "command": "c", "started": "s", "seconds": 1.0, "machine": about}
        return report.render({"accept": part}, list(SECTIONS))

    assert "load average up to 3.5 on 2 cores" in page("3.50")
    assert "busy with other work" not in page("1.90")
    assert "**This is a quick run**" not in page("1.90")
