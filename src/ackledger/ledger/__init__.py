"""The idempotency ledger, its /deliveries service and its client."""
