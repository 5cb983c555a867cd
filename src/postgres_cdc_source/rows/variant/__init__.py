"""``row_format=variant``: ``key``/``before``/``after`` as Spark VARIANT values, any table's shape.

:mod:`.encoding` writes Spark's VARIANT binary encoding from Python values; :mod:`.values`
converts each value's output text straight to its encoded bytes (and back to the JSON mode's
value, for matching keys); :mod:`.format` is the :class:`~postgres_cdc_source.rows.RowFormat`.
"""
