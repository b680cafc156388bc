"""``python manage.py ackledger COMMAND ...``: the command line, its database option filled in
from settings (the alias ``settings.ACKLEDGER["DATABASE"]``) unless it is given."""

from __future__ import annotations

from collections.abc import Sequence

#: The option through which each command names ackledger's database, by its words.
DATABASE_OPTION = {
    ("accept",): "--source",
    ("publish",): "--source",
    ("pending",): "--source",
    ("dispatch",): "--source",
    ("relay",): "--source",
    ("status",): "--source",
    ("trace",): "--source",
    ("reconcile",): "--source",
    ("quarantine",): "--source",
    ("requeue",): "--source",
    ("quarantined",): "--source",
    ("purge",): "--source",
    ("serve", "sink"): "--db",
    ("serve", "ledger"): "--db",
    ("consume",): "--db",
    ("inbox", "purge"): "--db",
    ("ledger", "purge"): "--db",
    ("refused", "list"): "--db",
    ("refused", "replay"): "--db",
    ("migrate",): "--target",
}


def with_database(argv: Sequence[str], target: str) -> list[str]:
    """``argv`` with the command's database option set to ``target``, unless it names one
    already (or the command has none: it is passed as it is, for the CLI to judge)."""
    words = list(argv)
    for length in (2, 1):
        option = DATABASE_OPTION.get(tuple(words[:length]))
        if option is None:
            continue
        if any(word == option or word.startswith(option + "=") for word in words):
            return words
        return [*words[:length], option, target, *words[length:]]
    return words


#: The commands whose inbox runs on Django's connection by themselves (``--django``).
_ON_DJANGO = (("serve", "sink"), ("consume",))


def with_django(argv: Sequence[str], settings_module: str | None) -> list[str]:
    """``argv`` with ``--django SETTINGS_MODULE`` for ``serve sink`` and ``consume``, so that
    handlers save Django models in the receipt's transaction; unless ``--django`` or
    ``--session`` is given already (or the settings were configured in code: no module)."""
    words = list(argv)
    if settings_module is None or not any(
        tuple(words[: len(command)]) == command for command in _ON_DJANGO
    ):
        return words
    given = ("--django", "--session")
    if any(word in given or word.startswith(("--django=", "--session=")) for word in words):
        return words
    return [*words, "--django", settings_module]


def run(argv: Sequence[str]) -> int:
    """Run the command line with the database of ackledger's alias; its exit status."""
    from ..cli import fail, main
    from .config import ImproperlyConfiguredError
    from .target import database_target

    words = list(argv)
    if not words or words[0] in ("-h", "--help"):
        return main([*words] or ["--help"])
    from django.conf import settings

    try:
        target = database_target()
    except ImproperlyConfiguredError as exc:
        fail(str(exc))  # the command line's one line and exit status 2
    return main(with_django(with_database(words, target), settings.SETTINGS_MODULE))
