"""``python -m bench --quick --against REV``: this tree's figures against an earlier revision's.

REV is checked out in a git worktree of its own under ``.bench-against/`` with its own venv
(its Makefile's ``.venv/.bench-stamp``), both kept for the next comparison. Then, section by
section for the sections both trees have, REV's suite and this tree's run as subprocesses
(``--only SECTION --no-docs --json FILE``), one right after the other, so both are measured
under the same conditions. Which tree goes first turns every section: on a shared machine the
one that ran second measured slower, whichever it was.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import machine, moved

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".bench-against"
THEIRS, OURS = "theirs", "ours"


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def checkout(rev: str) -> tuple[str, Path]:
    """REV's full commit and its worktree (made once under ``.bench-against/``)."""
    commit = _git("rev-parse", "--verify", f"{rev}^{{commit}}")
    folder = CACHE / commit[:12]
    if not (folder / ".git").exists():
        # --force: the folder may have been removed by hand while git still lists it.
        _git("worktree", "add", "--force", "--detach", str(folder), commit)
    return commit, folder


def _clean_env(venv: Path) -> dict[str, str]:
    """The environment for a tree's suite: its own venv first, nothing of the caller's."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}  # fmt: skip
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def build(folder: Path) -> float:
    """Makes (or brings up to date) REV's bench venv with its own Makefile; returns seconds."""
    clock = time.perf_counter()
    subprocess.run(["make", "-C", str(folder), ".venv/.bench-stamp"],
                   env=_clean_env(folder / ".venv"), check=True)  # fmt: skip
    return time.perf_counter() - clock


def sections_of(python: Path, folder: Path) -> list[str]:
    """The sections of the suite in ``folder``, in its order, as its own code lists them."""
    done = subprocess.run(
        [str(python), "-c", "from bench.__main__ import SECTIONS; print(*SECTIONS, sep='\\n')"],
        cwd=folder, env=_clean_env(python.parent.parent), capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    return done.stdout.split()


def read_figures(path: Path) -> dict[str, dict[str, Any]]:
    """A run's ``--json`` file as figure dicts by key; a refused figure has no median.

    Older suites wrote a list of figures; this one writes its results (figures and refused).
    """
    data = json.loads(path.read_text(encoding="utf-8"))
    figures = data if isinstance(data, list) else data.get("figures", [])
    found = {figure["key"]: figure for figure in figures}
    refused = {} if isinstance(data, list) else data.get("refused", {})
    for key, why in refused.items():
        found[key] = {"key": key, "label": why["label"], "unit": why["unit"], "median": None,
                      "why": why.get("why", "")}  # fmt: skip
    return found


#: REV's section run in REV's tree with every answer its load client got kept: a figure added
#: after a load that got anything but a 2xx is refused. Suites before answers were checked
#: (5e5ad69's: its ledger workload was answered 400 throughout) counted such figures as rates.
#: Where REV's suite lacks the pieces this reaches for, its own ``--json`` run is used instead.
_CHECKED_RUN = """
import json, sys
section, size, out = sys.argv[1:4]
import bench.load as load
from bench import common
answered = [{}]
real_run_load, real_add = load.run_load, common.Results.add
def run_load(*args, **kwargs):
    result = real_run_load(*args, **kwargs)
    answered[0] = {int(k): v for k, v in dict(getattr(result, "statuses", {}) or {}).items()}
    return result
wrong = {}
def add(self, key, label, unit, *args, **kwargs):
    if any(not 200 <= status < 300 for status in answered[0]):
        wrong[key] = {"label": label, "unit": unit, "why": f"answered {answered[0]}"}
    return real_add(self, key, label, unit, *args, **kwargs)
load.run_load, common.Results.add = run_load, add
from bench.__main__ import SECTIONS
results = common.Results()
SECTIONS[section](common.QUICK if size == "--quick" else common.FULL, results)
figures = [f.as_dict() for key, f in results.figures.items() if key not in wrong]
with open(out, "w", encoding="utf-8") as dump:
    json.dump({"figures": figures, "refused": wrong}, dump)
"""


def _run(python: Path, folder: Path, size: str, section: str, out: Path, *, side: str) -> str:
    """Runs one section of the suite in ``folder``; returns why it failed, or ""."""
    env = _clean_env(python.parent.parent)
    if side == THEIRS:
        checked = [str(python), "-c", _CHECKED_RUN, section, size, str(out)]
        if subprocess.run(checked, cwd=folder, env=env, check=False).returncode == 0:
            return ""
    command = [str(python), "-m", "bench", size, "--only", section, "--no-docs", "--json", str(out)]
    done = subprocess.run(command, cwd=folder, env=env, check=False)
    return "" if done.returncode == 0 and out.exists() else f"exit status {done.returncode}"


def compare(rev: str, size: str, only: list[str], *, command: str,
            about: dict[str, str]) -> dict[str, Any]:  # fmt: skip
    """Measures the sections both trees have (those of ``only`` if given) and compares them.

    ``size`` is ``--quick`` or ``--full``; returns the comparison as stored in the JSON.
    """
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    commit, folder = checkout(rev)
    build_seconds = build(folder)
    theirs_python, ours_python = folder / ".venv" / "bin" / "python", Path(sys.executable)
    their_sections, our_sections = (
        sections_of(theirs_python, folder),
        sections_of(ours_python, ROOT),
    )
    wanted = only or our_sections
    shared = [name for name in wanted if name in their_sections]
    load_before, clock = machine.load_line(), time.perf_counter()
    theirs: dict[str, dict[str, Any]] = {}
    ours: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}
    first: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="ackledger-bench-against-") as scratch:
        for number, section in enumerate(shared):
            sides = [(THEIRS, theirs_python, folder, theirs), (OURS, ours_python, ROOT, ours)]
            if number % 2:
                sides.reverse()
            first[section] = sides[0][0]
            for side, python, tree, into in sides:
                print(f"== {section}: {side} ({tree.name})", flush=True)
                out = Path(scratch) / f"{side}-{section}.json"
                why = _run(python, tree, size, section, out, side=side)
                if why:
                    failed[f"{section} ({side})"] = why
                else:
                    into.update(read_figures(out))
    return {
        "rev": rev,
        "commit": commit,
        "command": command,
        "plan": size.lstrip("-"),
        "started": started,
        "seconds": round(time.perf_counter() - clock, 1),
        "build_seconds": round(build_seconds, 1),
        "machine": {**about, "load_before": load_before, "load_after": machine.load_line()},
        "sections": shared,
        "first": first,
        "sections_only_theirs": [name for name in their_sections if name not in our_sections],
        "sections_only_ours": [name for name in wanted if name not in their_sections],
        "failed": failed,
        # REV's figures its own suite counted though they were not the answers expected.
        "refused_theirs": {
            key: figure["why"]
            for key, figure in theirs.items()
            if figure.get("median") is None and figure.get("why")
        },
        "comparison": moved.compare(theirs, ours).as_dict(),
    }


def summary(against: dict[str, Any]) -> list[str]:
    """What a terminal shows at the end of a comparison."""
    comparison = moved.Comparison.from_dict(against["comparison"])
    lines = [
        f"against {against['rev']} ({against['commit'][:12]}): {len(comparison.pairs)} figures "
        f"compared in {', '.join(against['sections']) or 'no section'}; "
        f"{len(comparison.only_theirs)} only in {against['rev']}, "
        f"{len(comparison.only_ours)} only here; {against['seconds']:,.0f} s measuring, "
        f"{against['build_seconds']:,.0f} s making {against['rev']}'s venv",
    ]
    worse = comparison.worse()
    lines.append(f"  {len(worse)} moved more than {moved.THRESHOLD:.0%} for the worse")
    for pair in worse:
        lines.append(f"  {pair.key}: {pair.theirs:,.2f} -> {pair.ours:,.2f} {pair.unit} "
                     f"({pair.ratio:.2f} x)")  # fmt: skip
    for what, why in against["failed"].items():
        lines.append(f"  FAILED {what}: {why}")
    return lines
