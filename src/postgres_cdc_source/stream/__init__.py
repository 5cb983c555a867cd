"""``mode=cdc``: the change stream of a logical replication slot.

The Spark-facing reader (:mod:`.reader`: offsets, partitions, read, commit) and what it asks:
:mod:`.coordinator` sequences the snapshot, a resnapshot, backfills and the reselect horizon;
:mod:`.ranges` ends the stream's batches and :mod:`.splitting` cuts them for parallel reads;
:mod:`.offset` is where a query stands; :mod:`.reselect` completes unchanged TOAST values after
a snapshot that was not exact; :mod:`.column_states` gives each read the tables' columns where
it starts (``include_schema_changes``). The slot and its publications are
:mod:`postgres_cdc_source.replication`'s.
"""
