"""``row_format=struct``: ``key``/``before``/``after`` as structs of the captured tables' columns.

:mod:`.types` holds the types and converters (a column's Postgres type -> Spark type, Arrow
type and converter of its text); :mod:`.catalog` loads the query's structs from the catalog
(and evolves them from :mod:`.history`'s, kept in ``schema_location``); :mod:`.images` turns a
change's images into Arrow columns; :mod:`.evolution` holds the rules of ``schema_evolution``;
:mod:`.structs` is :class:`~.structs.StructRows`, the
:class:`~postgres_cdc_source.rows.RowFormat` (with :func:`~.structs.checkpoint_difference`, a
restart's check); :mod:`.json_text` renders struct rows as the JSON mode's text again
(:func:`~.json_text.json_rows`, public as ``postgres_cdc_source.json_rows``). Names with a
leading underscore are the folder's own, shared between its modules.
"""
