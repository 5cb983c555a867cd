"""The contract every row format meets: :class:`RowFormat`.

A row format decides what ``key``, ``before`` and ``after`` hold (``row_format=json``: JSON
text; ``struct``: the captured tables' columns as typed structs; ``variant``: VARIANT values)
and everything that follows from it. The readers (the change stream, the snapshot, backfills,
reselect, routing) hold one :class:`RowFormat` for the query and ask it; none of them branches
on which format it is. :mod:`postgres_cdc_source.rows.registry` makes the query's format from
its options.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from postgres_cdc_source.errors import ConfigError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from postgres_cdc_source.options import CdcOptions
    from postgres_cdc_source.rows.json.values import Converter
    from postgres_cdc_source.rows.shape import Retyping, RowShape
    from postgres_cdc_source.rows.struct.types import TableStruct

__all__ = ["STAMP", "RowFormat", "foreign_checkpoint", "other_format"]


class RowFormat(Protocol):
    """One ``row_format``, fixed for a query when it starts.

    Who calls what, where and how often:

    * **Made** once on the driver per ``load()`` and once per reader
      (:func:`postgres_cdc_source.rows.registry.rows_for`): a format may read the catalog
      then (``struct`` reads the captured tables' columns), never later. It is pickled to the
      executors with the reader, so it holds no connection.
    * :meth:`schemas` gives the rows' Spark schema (``DataSource.schema()``, at ``load()``)
      and Arrow schema (every batch a task builds); only ``key``, ``before`` and ``after``
      differ between formats.
    * :meth:`retyped` is asked by a decoder once per table it meets (pgoutput's Relation
      message, test_decoding's first line of a table), and by the snapshot's and a backfill's
      reader once per chunk, with the :class:`~postgres_cdc_source.rows.shape.RowShape` they
      built with the JSON mode's converters. The shape it returns holds the converters the
      decoders call once per column per change, and :attr:`encode_image`, which makes a
      change's images from the converted values; the images become Arrow columns when the
      batch is built (:func:`postgres_cdc_source.assembly.image_column`, by the Arrow type
      :meth:`schemas` gives). A shape whose ``changed`` is set raises it at the table's first
      change (a table ``struct`` cannot type). :attr:`retyping` is what the decoders are handed
      for this: ``None`` keeps their JSON shapes and the fast paths that write JSON text; with
      it set, a change's images are dicts of the converted values until the batch is built
      (the decoders' fast paths make them so), whose Arrow type :meth:`schemas` gives (a
      struct, or :data:`~postgres_cdc_source.rows.variant.encoding.VARIANT_ARROW`).
    * On the driver, per planned batch: :meth:`stamped` adds what the format keeps in each
      offset (``struct``'s structs), and :meth:`check_offset`, on every offset a batch starts
      from, refuses a checkpoint written with another format or structs this one cannot go
      on from (:class:`~postgres_cdc_source.errors.ConfigError` for ``schema_evolution``).
      :attr:`fixed_tables` (``struct``'s) makes the stream end a batch before a change the
      rows cannot type (:mod:`postgres_cdc_source.stream.schema_watch`).
    * The snapshot reads whole rows as JSON Postgres builds in the ``SELECT`` where
      :attr:`json_in_sql` allows it (:mod:`postgres_cdc_source.rows.json.sql`), else as text
      converted by :meth:`retyped`'s shape.
    * Reselect (TOAST values read back, :mod:`postgres_cdc_source.stream.reselect`) asks
      :meth:`reselect_converters` once per table per read: the converters of the values it
      reads, and each key column's value as the JSON mode's (keys are matched by their JSON
      text); completed images are made with :attr:`encode_image`.
    * Routing (:class:`postgres_cdc_source.destination_columns.Router`, once per read) asks
      :meth:`value_json` for each column a route reads and :meth:`key_text` for the key, so a
      row goes where the JSON mode sends it whichever format the query reads.
    * :attr:`refused_options`: the options given with this format that fail ``load()``
      (checked when the options are parsed, before any format is made:
      :data:`postgres_cdc_source.options.ROW_FORMAT_REFUSALS`).
    """

    @property
    def name(self) -> str:
        """The ``row_format`` option's value."""
        ...

    @property
    def retyping(self) -> Retyping | None:
        """What the decoders retype each table's shape with; ``None``: their JSON shapes."""
        ...

    @property
    def fixed_tables(self) -> Mapping[str, TableStruct] | None:
        """The tables' columns the rows were fixed with when the query started
        (``schema.table``); ``None``: every table of any shape, then and later."""
        ...

    @property
    def json_in_sql(self) -> bool:
        """Whether a whole row's ``key``/``after`` may be the JSON Postgres builds."""
        ...

    @property
    def encode_image(self) -> Callable[[dict[str, Any]], Any]:
        """A row image of converted values (in table order) -> as a change carries it."""
        ...

    @property
    def refused_options(self) -> Mapping[str, str]:
        """The options this format refuses when given (option -> why)."""
        ...

    def schemas(self) -> tuple[StructType, pa.Schema]:
        """The change rows' Spark and Arrow schemas."""
        ...

    def retyped(self, shape: RowShape, *, whole: bool = True,
                types: Sequence[int | str] | None = None) -> RowShape:
        """``shape`` (the JSON mode's) with this format's converters and image encoder;
        ``whole``: it has every column of the table (not an old key's); ``types``: the
        columns' type OIDs (pgoutput, the catalog) or ``format_type`` names (test_decoding)."""
        ...

    def stamped(self, offset: dict[str, Any]) -> dict[str, Any]:
        """``offset`` with what the format keeps in the query's offsets."""
        ...

    def check_offset(self, offset: Mapping[str, Any], options: CdcOptions) -> None:
        """Raise :class:`~postgres_cdc_source.errors.ConfigError` if the query cannot go on
        from ``offset`` (a checkpoint's), naming why and the way out."""
        ...

    def value_json(self, column: str) -> Callable[[Any], Any] | None:
        """A change's value of ``column`` -> the JSON mode's; ``None``: as it is."""
        ...

    def key_text(self) -> Callable[[Any], str | None] | None:
        """A change's key -> the JSON mode's text of it; ``None``: it is that text."""
        ...

    def reselect_converters(
        self, schema: str, table: str, oids: Mapping[str, int], key: Sequence[str],
    ) -> tuple[dict[str, Converter], dict[str, Callable[[Any], Any]]] | None:
        """For the table's columns (name -> type OID, in table order) and key columns: the
        converter of each column's output text as the decoders convert it, and each key
        column's converted value -> its JSON mode's value; ``None``: the table's changes are
        left as Postgres sent them."""
        ...


STAMP = "struct"
"""The key of an offset that holds ``row_format=struct``'s structs."""


def foreign_checkpoint(name: str, offset: Mapping[str, Any], evolution: str) -> None:
    """Refuse ``offset`` for a ``row_format=name`` query that keeps nothing in its offsets
    when it holds structs (a ``struct`` query's checkpoint)."""
    if offset.get(STAMP) is not None:
        raise ConfigError("schema_evolution", f"{evolution}: {other_format('struct', name)}")


def other_format(was: str, now: str) -> str:
    """Why a checkpoint written by a ``row_format=was`` query does not go on with ``now``."""
    return (f"the checkpoint was written by a row_format={was} query, this one is "
            f"row_format={now}: start it on a new checkpoint")
