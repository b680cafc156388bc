"""The comparison with an earlier revision: which figures moved for the worse, and the page.

Figures are written as each tree's ``--json`` file would hold them (an older suite wrote a
list of figures, this one its results) and read back from real files; the stored comparison
is a real docs JSON file. Only the last test measures, the suite's own ``accept`` shrunk.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest
from bench import against, moved, report, store
from bench.__main__ import SECTIONS, main, measure
from bench.against import read_figures
from bench.common import QUICK

from .test_bench_report import ABOUT


def _fig(key: str, unit: str, median: float) -> dict[str, Any]:
    return {"key": key, "label": key, "unit": unit, "median": median, "min": median,
            "max": median, "samples": [median], "note": ""}  # fmt: skip


def _compare(theirs: list[dict[str, Any]], ours: list[dict[str, Any]]) -> moved.Comparison:
    return moved.compare({f["key"]: f for f in theirs}, {f["key"]: f for f in ours})


def test_each_unit_has_its_better_direction() -> None:
    assert moved.direction("/s") == moved.HIGHER
    assert moved.direction("events/s") == moved.HIGHER
    assert moved.direction("x") == moved.HIGHER  # ours over a floor or a peer
    for unit in ("ms", "µs", "us", "s", "MiB", "instructions", "commits"):
        assert moved.direction(unit) == moved.LOWER, unit
    for unit in ("share", "rows", "messages"):
        assert moved.direction(unit) == moved.NONE, unit


def test_a_rate_is_worse_below_085_and_a_time_above_115_of_the_earlier() -> None:
    theirs = [_fig("rate.a", "/s", 1000), _fig("rate.b", "/s", 1000), _fig("rate.c", "/s", 1000),
              _fig("time.a", "µs", 100), _fig("time.b", "ms", 100), _fig("time.c", "ms", 100),
              _fig("ratio", "x", 2.0)]  # fmt: skip
    ours = [_fig("rate.a", "/s", 849), _fig("rate.b", "/s", 851), _fig("rate.c", "/s", 5000),
            _fig("time.a", "µs", 116), _fig("time.b", "ms", 114), _fig("time.c", "ms", 10),
            _fig("ratio", "x", 1.6)]  # fmt: skip
    comparison = _compare(theirs, ours)
    assert len(comparison.pairs) == 7
    assert [p.key for p in comparison.worse()] == ["rate.a", "time.a", "ratio"]
    # Exactly 15% is the most a change may cost, not more than it.
    edge = _compare([_fig("r", "/s", 100), _fig("t", "ms", 100)],
                    [_fig("r", "/s", 85), _fig("t", "ms", 115)])  # fmt: skip
    assert edge.worse() == []
    assert [p.key for p in edge.worse(threshold=0.1)] == ["r", "t"]
    (pair,) = [p for p in comparison.pairs if p.key == "rate.a"]
    assert (pair.theirs, pair.ours, pair.ratio) == (1000, 849, 0.849)


def test_keys_are_matched_and_those_of_one_tree_only_are_counted() -> None:
    theirs = [_fig("both", "/s", 10), _fig("renamed.old", "/s", 10), _fig("unit", "us", 10),
              _fig("refused.here", "/s", 10), _fig("fact", "rows", 0)]  # fmt: skip
    refused = {**_fig("refused.here", "/s", 0), "median": None}
    ours = [_fig("both", "/s", 10), _fig("renamed.new", "/s", 1), _fig("unit", "ms", 10),
            refused, _fig("fact", "rows", 200)]  # fmt: skip
    comparison = _compare(theirs, ours)
    assert [p.key for p in comparison.pairs] == ["both", "fact"]
    assert sorted(comparison.only_theirs) == ["renamed.old", "unit"]
    assert sorted(comparison.only_ours) == ["renamed.new", "unit"]
    assert comparison.unmeasured == ["refused.here"]
    # A count has no better direction: never "worse", but a change is shown.
    assert comparison.worse() == []
    assert [p.key for p in comparison.changed_facts()] == ["fact"]
    nan = _compare([_fig("n", "/s", 10)], [_fig("n", "/s", math.nan)])
    assert nan.pairs == [] and nan.unmeasured == ["n"]
    again = moved.Comparison.from_dict(json.loads(json.dumps(comparison.as_dict())))
    assert again == comparison


def test_an_older_list_and_todays_results_are_read_alike(tmp_path: Path) -> None:
    older = tmp_path / "older.json"
    older.write_text(json.dumps([_fig("floor.http", "/s", 8000)]))
    today = tmp_path / "today.json"
    today.write_text(json.dumps({
        "figures": [_fig("floor.http", "/s", 6000)],
        "refused": {"sink.c8.rps": {"label": "sink", "unit": "/s", "why": "HTTP 500 x 3"}},
        "skipped": {}, "notes": [],
    }))  # fmt: skip
    theirs, ours = read_figures(older), read_figures(today)
    assert theirs["floor.http"]["median"] == 8000
    assert ours["sink.c8.rps"]["median"] is None
    comparison = moved.compare(theirs, ours)
    assert [p.ratio for p in comparison.worse()] == [0.75]
    assert comparison.only_ours == ["sink.c8.rps"]


def _against(comparison: moved.Comparison) -> dict[str, Any]:
    return {
        "rev": "5e5ad69", "commit": "5e5ad6975ed442956deb45732aa700f542ab4bc1",
        "command": "python -m bench --quick --against 5e5ad69", "plan": "quick",
        "started": "2026-01-01 00:00 UTC", "seconds": 60.0, "build_seconds": 40.0,
        "machine": {**ABOUT, "load_before": "1 1 1", "load_after": "1 1 1"},
        "sections": ["floors", "steps"], "first": {"floors": "theirs", "steps": "ours"},
        "sections_only_theirs": [], "sections_only_ours": ["asgi"],
        "failed": {}, "comparison": comparison.as_dict(),
    }  # fmt: skip


def test_the_page_lists_what_moved_and_keeps_it_when_sections_are_stored_later(
    tmp_path: Path,
) -> None:
    theirs = [_fig("step.sink_new", "µs", 400), _fig("relay.item", "/s", 1000),
              _fig("floor.http", "/s", 8000), _fig("old.only", "/s", 1)]  # fmt: skip
    ours = [_fig("step.sink_new", "µs", 520), _fig("relay.item", "/s", 900),
            _fig("floor.http", "/s", 6000), _fig("new.only", "ms", 1)]  # fmt: skip
    path = tmp_path / "benchmarks.json"
    section = {"plan": "quick", "command": "c", "started": "s", "seconds": 1.0,
               "machine": {**ABOUT, "load_before": "0 0 0", "load_after": "0 0 0"},
               "figures": [], "refused": {}, "skipped": {}, "notes": []}  # fmt: skip
    store.save({"accept": section}, path)
    store.save_against(_against(_compare(theirs, ours)), path)
    # A later run of some sections stores them and keeps the comparison.
    store.save({**store.load(path), "sink": section}, path)
    assert set(store.load(path)) == {"accept", "sink"}
    against = store.load_against(path)
    assert against is not None
    page = report.render(store.load(path), list(SECTIONS), against)
    assert "## Against 5e5ad69" in page
    assert "3 figures compared; 1 only in `5e5ad69` and 1 only here" in page
    assert "Sections `5e5ad69` does not have: asgi." in page
    assert "| `step.sink_new` | 400 µs | 520 µs | 1.30 x |" in page
    assert "| `floor.http` | 8,000 /s | 6,000 /s | 0.75 x |" in page
    assert "`relay.item`" not in page  # 10% slower: within what a rebuild may cost
    assert "runs no ackledger code" in page
    assert len(page.splitlines()) < 300
    assert "## Against" not in report.render(store.load(path), list(SECTIONS))


def test_the_page_stays_short_however_many_figures_moved() -> None:
    many = 200
    theirs = [_fig(f"k{n}", "/s", 100) for n in range(many)]
    ours = [_fig(f"k{n}", "/s", 50) for n in range(many)]
    page = report.render({}, list(SECTIONS), _against(_compare(theirs, ours)))
    assert f"And {many - report.MOVED_ROWS} more" in page
    assert len(page.splitlines()) < 300


def test_this_suites_json_file_holds_the_chosen_sections_figures(tmp_path: Path) -> None:
    stored: dict[str, dict[str, Any]] = {}
    tiny = dataclasses.replace(QUICK, reps=1, accept_events=20)
    measure(["accept"], tiny, stored, command="c", about=ABOUT, save=None)
    out = tmp_path / "run.json"
    store.write_run(stored, ["accept"], out)
    figures = read_figures(out)
    assert set(figures) == {"accept.full", "accept.normal"}
    assert all(figures[key]["unit"] == "/s" and figures[key]["median"] > 0 for key in figures)


def test_the_help_names_the_option_and_its_threshold(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    assert "--against REV" in capsys.readouterr().out


def test_an_earlier_suites_figures_after_wrong_answers_are_refused(tmp_path: Path) -> None:
    """REV's section runs with its load client's answers kept: what it added after a load that
    got anything but 2xx is refused with those answers, the rest read as REV measured them."""
    package = tmp_path / "bench"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "load.py").write_text(
        "class Load:\n"
        "    def __init__(self, statuses):\n"
        "        self.statuses = statuses\n"
        "def run_load(statuses):\n"
        "    return Load(statuses)\n"
    )
    (package / "common.py").write_text(
        "QUICK, FULL = 'quick', 'full'\n"
        "class Figure:\n"
        "    def __init__(self, key, label, unit, value):\n"
        "        self.key, self.label, self.unit, self.value = key, label, unit, value\n"
        "    def as_dict(self):\n"
        "        return {'key': self.key, 'label': self.label, 'unit': self.unit,\n"
        "                'median': self.value}\n"
        "class Results:\n"
        "    def __init__(self):\n"
        "        self.figures = {}\n"
        "    def add(self, key, label, unit, value):\n"
        "        self.figures[key] = Figure(key, label, unit, value)\n"
    )
    (package / "__main__.py").write_text(
        "from .load import run_load\n"
        "def section(plan, results):\n"
        "    results.add('before', 'no load yet', '/s', 1.0)\n"
        "    run_load({200: 5, 201: 5})\n"
        "    results.add('good', 'all 2xx', '/s', 2.0)\n"
        "    run_load({400: 7})\n"
        "    results.add('bad', 'all 400', '/s', 3.0)\n"
        "SECTIONS = {'s': section}\n"
    )
    out = tmp_path / "theirs.json"
    python = Path(sys.executable)
    assert against._run(python, tmp_path, "--quick", "s", out, side=against.THEIRS) == ""
    found = read_figures(out)
    assert {key: figure["median"] for key, figure in found.items()} == {
        "before": 1.0, "good": 2.0, "bad": None,
    }  # fmt: skip
    assert found["bad"]["why"] == "answered {400: 7}"
