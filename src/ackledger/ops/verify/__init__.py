"""``ackledger verify``: a seeded fault campaign against the user's own configuration.

``schedules`` draws each schedule's faults from its seed, ``faults`` makes them happen,
``campaign`` runs one schedule on scratch databases (``scratch``), ``judge`` reads both sides
back, and ``report`` prints the progress, the table and the verdict.
"""
