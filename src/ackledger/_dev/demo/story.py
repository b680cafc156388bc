"""How the demo speaks: numbered steps, checks with their evidence, a verdict."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Story:
    checks: list[tuple[str, bool]] = field(default_factory=list)
    step_no: int = 0

    def chapter(self, title: str, why: str) -> None:
        print()
        print(f"== {title} ==")
        for line in why.strip().splitlines():
            print(f"   {line.strip()}")

    def step(self, text: str) -> None:
        self.step_no += 1
        print(f"\n[{self.step_no}] {text}")

    def say(self, text: str) -> None:
        print(f"    {text}")

    def check(self, claim: str, held: bool, evidence: str) -> bool:
        mark = "PASS" if held else "FAIL"
        print(f"    {mark}  {claim}")
        print(f"          evidence: {evidence}")
        self.checks.append((claim, held))
        return held

    @property
    def failed(self) -> list[str]:
        return [claim for claim, held in self.checks if not held]

    def verdict(self) -> bool:
        print()
        total = len(self.checks)
        bad = self.failed
        if bad:
            print(f"VERDICT: FAIL - {len(bad)} of {total} checks did not hold:")
            for claim in bad:
                print(f"  - {claim}")
            return False
        print(f"VERDICT: PASS - all {total} checks held.")
        print(
            "Retry freely, apply once: at-least-once delivery, with each effect applied once "
            "inside a named storage boundary (the sink's database, the ledger's database) - "
            "not exactly-once delivery."
        )
        return True
