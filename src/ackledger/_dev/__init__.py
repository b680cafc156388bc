"""Development tools: the demo and the console's screenshots (the fault proxy and the process
helpers they use live in ops/, which `ackledger verify` ships with)."""
