"""``row_format=json``: ``key``/``before``/``after`` as JSON text, the decoders' own rows.

:mod:`.values` converts each value's output text to what ``orjson`` writes (the decoders' hot
path, and every other format's reference: struct and variant rows mean what the JSON mode's
values mean); :mod:`.sql` spells the same JSON in SQL, so the snapshot and polling read whole
rows as ready text; :mod:`.format` is the :class:`~postgres_cdc_source.rows.RowFormat`.
"""
