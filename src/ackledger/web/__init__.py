"""ASGI apps for the sink and the ledger, and what they share."""
