"""``ackledger console``: the operator's page (CONTRACT v2 §10 "Console").

Server-rendered pages over the same library calls the command line makes: ``status``,
``trace``, ``reconcile``, ``quarantine``/``requeue`` and the ledger's listings. It needs the
``console`` extra (Starlette and Jinja2); nothing else imports it.
"""
