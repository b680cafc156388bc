"""A stand-in relay process for the growth benchmark while ``ackledger relay`` is not built.

``python relay_child.py SOURCE SINK_EVENTS_BATCH_URL``: drains the outbox with
``dispatch_batch``, prints its own peak RSS in KiB and exits. (The peak is read here, not from
the parent's ``wait4``: that one also counts the parent's pages the child had before ``exec``.)
"""

from __future__ import annotations

import sys
from typing import Any

from ackledger import Outbox
from ackledger.source.dispatch import dispatch_batch
from ackledger.wire.http import send_http_batch


def main() -> None:
    source, url = sys.argv[1], sys.argv[2]

    def send_batch(events: list[dict[str, Any]]) -> int:
        return send_http_batch(events, url)

    with Outbox(source) as outbox:
        while dispatch_batch(outbox, send_batch, 16):
            pass
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                print(line.split()[1])


if __name__ == "__main__":
    main()
