"""The console's screenshots in docs/img/ (``python -m ackledger._dev.console_shots``).

Builds the console's scene (``console_scene``) in a temporary folder, starts ``ackledger
console`` on it as a real process, and photographs each view in Debian's Chromium driven by
Playwright (the dev extra). Not a test: the browser tests check the page; this shows it.
"""

from __future__ import annotations

import argparse
import secrets
import tempfile
import time
from pathlib import Path

from ..ops.processes import start_service
from ..source.outbox import Outbox
from .console_scene import build

#: Debian's Chromium, and its flags for a headless run that talks to nothing but the page
#: (the browser tests use the same).
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
#: Samples the chart gets before it is photographed, a second apart, events added between.
CHART_SAMPLES = 8


def shoot(out: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ackledger-shots-") as folder:
        workdir = Path(folder)
        scene = build(workdir)
        (workdir / "token").write_text(secrets.token_urlsafe(24) + "\n", encoding="utf-8")
        args = ["console", "--source", scene.source, "--sink", scene.sink]
        args += ["--ledger", scene.ledger, "--port", "0", "--token-file", str(workdir / "token")]
        made: list[Path] = []
        with start_service(args) as console, sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1180, "height": 760})

            def snap(name: str) -> None:
                path = out / f"console-{name}.png"
                page.screenshot(path=str(path), full_page=True)
                made.append(path)

            # Each load asks for a sample: pending grows as orders arrive, then the age.
            with Outbox(scene.source) as outbox:
                for step in range(CHART_SAMPLES):
                    page.goto(console.base_url + "/")
                    page.wait_for_function(
                        "document.getElementById('span').textContent.includes('sample')"
                    )
                    if step < CHART_SAMPLES // 2:
                        for extra in range(step + 1):
                            order_id = f"order-{100 + step * 10 + extra}"
                            outbox.accept({"id": order_id, "sku": "SKU-9", "qty": 1})
                    time.sleep(1.1)
            page.goto(console.base_url + "/")
            page.wait_for_function(
                f"document.getElementById('span').textContent.startsWith('{CHART_SAMPLES + 1} ')"
            )
            snap("overview")
            page.goto(console.base_url + "/events")
            snap("events")
            page.goto(console.base_url + "/trace?id=order-0006")
            snap("trace")
            page.goto(console.base_url + "/reconcile")
            snap("reconcile")
            page.goto(console.base_url + "/ledger?limit=3")
            snap("ledger")
            page.goto(console.base_url + "/events")
            row = page.locator("tr.quarantined[data-id='order-0008']")
            row.locator("input[name=token]").fill("not-the-token")
            row.locator("button").click()
            page.wait_for_selector("#message")
            snap("refused")
            browser.close()
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/img"), help="default docs/img")
    for path in shoot(parser.parse_args().out):
        print(path)


if __name__ == "__main__":
    main()
