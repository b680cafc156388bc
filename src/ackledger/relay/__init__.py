"""The relay: the loop over the outbox or a leased partition, its policy and runner."""
