"""What the HTTP services (sink/app.py, ledger/app.py) share: answers, bodies, routing, metrics,
database calls, the hot-path ASGI pieces and the server."""
