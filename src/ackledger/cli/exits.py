"""The command line's exit statuses: one meaning each, the same in every command.

They are listed in ``ackledger --help`` (``EPILOG``) and in README.md ("Command line").
"""

from __future__ import annotations

from ..relay.policy import EXIT_POISON

#: Done: the command did what it was asked.
EXIT_OK = 0
#: Ran, and the answer is "no": a dispatch that stopped on a failure (what stays pending is
#: printed), an event known nowhere (``trace``), a campaign that found a fault (``verify``).
EXIT_STOPPED = 1
#: Bad input: a one-line error naming what is wrong; nothing was written.
EXIT_BAD_INPUT = 2
#: The relay stopped on a poison event (``--on-poison stop``): a permanent refusal.
EXIT_REFUSED = EXIT_POISON
#: A database or a service could not be reached or used (connection refused, locked, disk
#: full): the same command may succeed later.
EXIT_UNREACHABLE = 4
#: ``deliver --fail-after-save``: EX_TEMPFAIL, the status a Job treats as a failed Pod.
EXIT_FAIL_AFTER_SAVE = 75
#: Interrupted (Ctrl-C).
EXIT_INTERRUPTED = 130

EPILOG = f"""exit status:
  {EXIT_OK}    done
  {EXIT_STOPPED}    ran, and the answer is no (dispatch stopped on a failure; trace: the event is
       known nowhere; verify: something lost, applied twice, stuck or reordered)
  {EXIT_BAD_INPUT}    bad input: one line naming what is wrong; nothing was written
  {EXIT_REFUSED}    relay: stopped on a poison event (a permanent refusal, --on-poison stop)
  {EXIT_UNREACHABLE}    a database or service could not be reached or used; try again later
  {EXIT_FAIL_AFTER_SAVE}   deliver --fail-after-save (the drill)
  {EXIT_INTERRUPTED}  interrupted"""
