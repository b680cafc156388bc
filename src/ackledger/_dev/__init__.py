"""Development tools: the fault proxy, process helpers and the demo."""
