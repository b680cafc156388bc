"""Internals shared by every part: backoff, durations, closing, logs, the claim-once move."""
