-- On SQLite only the in-process partition worker (PartitionLeases) reads a partition's pending
-- events; `ackledger relay` on SQLite is one loop in seq order (outbox_pending). Yet every mark
-- and every enqueue paid for outbox_partition_pending: a mark of 16 events of 16 partitions
-- rewrote 16 of its pages (20 KiB of WAL grew to 83 KiB per commit, the commit took twice as
-- long, and batch relay ran 17% slower). The index is now built
-- when PartitionLeases first opens this outbox (store/lease_sql.py, ensure_partition_index),
-- and from then on kept, because that outbox needs it.
DROP INDEX IF EXISTS outbox_partition_pending;
