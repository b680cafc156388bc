"""The wire: target allow-lists, senders, and what counts as an acknowledgement."""
