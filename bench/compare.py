"""Before/after: the same bench sections against several copies of the product, interleaved.

``python -m bench.compare --only relay,sink --rounds 3 before=/tmp/old/src current``

Each variant is ``NAME=SRC`` (a ``src`` folder put first on PYTHONPATH for the bench and every
service it starts), ``NAME=CHECKOUT`` (another checkout: its own ``bench/`` runs from there on its
own ``src``, for when the bench's imports moved with the code) or ``current`` (this checkout).
Rounds alternate the variants, in turned order every other round (ABBA), so that the load of a
shared machine and the position in a round fall on all of them alike; the medians of all rounds
are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def _run(name: str, src: str | None, only: str, out: Path) -> None:
    env = dict(os.environ)
    cwd = None
    if src and (Path(src) / "bench" / "__main__.py").exists():
        cwd, src = src, str(Path(src) / "src")
    if src:
        env["PYTHONPATH"] = src
    command = [sys.executable, "-m", "bench", "--quick", "--only", only, "--no-docs"]
    print(f"== {name}", flush=True)
    subprocess.run([*command, "--json", str(out)], env=env, cwd=cwd, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__)
    parser.add_argument("--only", default="relay,sink", help="bench sections to run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("variants", nargs="+", help="NAME=SRC or current")
    args = parser.parse_args(argv)
    variants = [
        (v, None) if v == "current" else (v.split("=", 1)[0], v.split("=", 1)[1])
        for v in args.variants
    ]
    samples: dict[str, dict[str, list[float]]] = {name: {} for name, _ in variants}
    labels: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as folder:
        for round_number in range(args.rounds):
            # ABBA: on a loaded machine the variant that ran second in a round measured 10-18%
            # slower, whichever it was (bench/CHANGES.md item 17), so the order turns every
            # round and each variant runs first as often as second.
            ordered = variants if round_number % 2 == 0 else variants[::-1]
            for name, src in ordered:
                out = Path(folder) / f"{name}-{round_number}.json"
                _run(name, src, args.only, out)
                for figure in json.loads(out.read_text(encoding="utf-8")):
                    labels[figure["key"]] = f"{figure['label']} ({figure['unit']})"
                    samples[name].setdefault(figure["key"], []).extend(figure["samples"])
    names = [name for name, _ in variants]
    print("\n| figure | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for key, label in labels.items():
        cells = []
        for name in names:
            values = samples[name].get(key)
            cells.append(f"{statistics.median(values):,.2f}" if values else "-")
        print(f"| {label} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
