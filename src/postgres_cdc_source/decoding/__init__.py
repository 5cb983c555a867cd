"""Output-plugin decoders: the rows of a peek in, :class:`Begin`/:class:`Change`/:class:`Commit`
events out, with no I/O. The event model and the row rules both decoders share are in
:mod:`.changes`; :mod:`.pgoutput` and :mod:`.text_format` (test_decoding's output, its lines read
by :mod:`.text_lines` against the tables of :mod:`.text_tables`) parse; :mod:`.factory` picks one
for the configured plugin; :mod:`.schema_changes` follows the tables' columns for
``include_schema_changes``.
"""

from postgres_cdc_source.decoding.changes import (
    DELETE,
    INSERT,
    MESSAGE,
    TRUNCATE,
    UNCHANGED,
    UPDATE,
    Begin,
    Change,
    Commit,
    Decoder,
    Event,
    LoneMessage,
    MessageFilter,
    PeekRow,
    RawValue,
    Retyping,
    RowShape,
    TableFilter,
    build_change,
    decode_error,
    empty_change,
    message_change,
    message_event,
    message_prefix,
    route_values,
    row_json,
)

__all__ = [
    "DELETE",
    "INSERT",
    "MESSAGE",
    "TRUNCATE",
    "UNCHANGED",
    "UPDATE",
    "Begin",
    "Change",
    "Commit",
    "Decoder",
    "Event",
    "LoneMessage",
    "MessageFilter",
    "PeekRow",
    "RawValue",
    "Retyping",
    "RowShape",
    "TableFilter",
    "build_change",
    "decode_error",
    "empty_change",
    "message_change",
    "message_event",
    "message_prefix",
    "route_values",
    "row_json",
]
