"""Everything that talks replication to the server: the slot and the publications.

Every read mode uses these modules; none of them knows about Spark, offsets or batches.

* :mod:`.slots`: what ``pg_replication_slots`` says about a slot, and whether it is lost;
* :mod:`.lifecycle`: the checks and creation at start (:func:`~.lifecycle.ensure_slot`), and
  dropping a lost slot;
* :mod:`.exported`: a slot created with an exported snapshot, for ``snapshot=initial``;
* :mod:`.positions`: the server's WAL positions, moving the slot (advance, up to a batch's
  start) and temporary copies of it for parallel reads;
* :mod:`.peeking`: reading the slot's changes without consuming them;
* :mod:`.diagnostics`: the slot's health, and the transaction holding its restart point back;
* :mod:`.publication`, :mod:`.publication_setup`, :mod:`.publication_sync`,
  :mod:`.identity_guard`: the pgoutput publications ``pg_cdc`` manages.

Identifiers are composed with :mod:`psycopg.sql`; slot names, LSNs and plugin options are query
parameters. Nothing is string-formatted into SQL.
"""
