"""The source side: the transactional outbox and dispatch."""
