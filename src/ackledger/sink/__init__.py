"""The sink side: the idempotent inbox and its /events service."""
