"""The row formats: what ``key``, ``before`` and ``after`` hold, one folder per format.

Below the readers (the change stream, the snapshot, backfills, polling) and the decoders, above
the shared rules: a decoder builds each table's :class:`~.shape.RowShape` with the JSON mode's
converters and hands it to the query's format, which gives it back typed its way; the readers
hold the format and ask it (:class:`~.contract.RowFormat`: who calls what, where and how
often), never which one it is.

* :mod:`.contract`: :class:`~.contract.RowFormat`, the contract every format meets;
* :mod:`.registry`: the formats by the ``row_format`` option's value, and
  :func:`~.registry.rows_for`, which makes a query's;
* :mod:`.shape`: :class:`~.shape.RowShape`, what a decoder and a format exchange;
* :mod:`.json`, :mod:`.struct`, :mod:`.variant`: the formats, each a folder whose
  ``__init__`` maps it.

Every format's converters key on the one registry of Postgres's built-in types by name,
:data:`postgres_cdc_source.pg_types.TYPES`. A new format: see docs/development.md, "A new row
format".
"""

from postgres_cdc_source.rows.contract import RowFormat
from postgres_cdc_source.rows.shape import Retyping, RowShape

__all__ = ["Retyping", "RowFormat", "RowShape"]
