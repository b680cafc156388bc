"""A feature whose extra is not installed says which extra to install, from Python as from the
command line: each case runs a child Python with the extra's module blocked
(``sys.modules[name] = None`` makes its import fail as an uninstalled one would)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ackledger import AckledgerError
from ackledger._core.extras import MissingExtra

AMQP = "amqp://guest:guest@127.0.0.1:5672/%2F?exchange=e"
POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"
REPORT = """
try:
    {call}
except ImportError as exc:
    import ackledger, json
    print(json.dumps([type(exc).__name__, exc.name, str(exc),
                      isinstance(exc, ackledger.AckledgerError)]))
else:
    print("null")
"""


def _blocked(module: str, setup: str, call: str) -> list[object] | None:
    code = f"import sys\nsys.modules[{module!r}] = None\nimport ackledger\n{setup}\n"
    code += REPORT.format(call=call)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    found: list[object] | None = json.loads(done.stdout.strip().splitlines()[-1])
    return found


@pytest.mark.parametrize(
    ("module", "setup", "call", "extra"),
    [
        ("pika", "", f"ackledger.sender({AMQP!r})", "amqp"),
        ("nats", "", "ackledger.sender('nats://127.0.0.1:4222?subject=s')", "nats"),
        ("starlette", "inbox = ackledger.Inbox(sys.argv[0])", "inbox.asgi()", "server"),
        ("prometheus_client", "inbox = ackledger.Inbox(sys.argv[0])", "inbox.asgi()", "server"),
        ("psycopg", "", f"ackledger.Outbox({POSTGRES!r})", "postgres"),
    ],
    ids=["amqp-sender", "nats-sender", "asgi-starlette", "asgi-prometheus", "postgres-target"],
)  # fmt: skip
def test_a_missing_extra_is_named_with_the_command_that_installs_it(
    tmp_path: Path, module: str, setup: str, call: str, extra: str
) -> None:
    # The child's sys.argv[0] is "-c": the inbox file goes to the test's own folder.
    setup = setup.replace("sys.argv[0]", repr(str(tmp_path / "inbox.db")))
    found = _blocked(module, setup, call)
    assert found is not None, "the call worked without its extra"
    kind, name, message, is_ours = found
    assert kind == "MissingExtra" and is_ours is True
    assert str(name).partition(".")[0] == module
    assert f"pip install 'ackledger[{extra}]'" in str(message)
    assert issubclass(MissingExtra, AckledgerError) and issubclass(MissingExtra, ImportError)


def test_a_missing_module_of_no_extra_is_raised_as_it_is() -> None:
    from ackledger._core.extras import needing_extra

    with pytest.raises(ModuleNotFoundError) as caught, needing_extra("this"):
        import ackledger_no_such_module  # type: ignore[import-not-found]  # noqa: F401
    assert type(caught.value) is ModuleNotFoundError
