"""Ending a measured child process: SIGTERM (both relays finish the send in hand), then kill."""

from __future__ import annotations

import signal
import subprocess
from typing import Any


def terminate(process: subprocess.Popen[Any], grace: float = 60.0) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)
