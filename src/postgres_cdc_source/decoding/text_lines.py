"""test_decoding's printed lines, piece by piece: names, columns and their values, commit
and message lines (:mod:`.text_format` has the whole format)."""

from __future__ import annotations

import re

from postgres_cdc_source.decoding.changes import UNCHANGED, RawValue

__all__ = [
    "BITS",
    "BOOL",
    "COMMIT_LINE",
    "HEADER",
    "HEX",
    "NO_TUPLE",
    "QUALIFIED",
    "TRUNCATE_LINE",
    "UNQUOTED",
    "Columns",
    "message_line",
    "parse_columns",
    "unquote_ident",
    "value_pattern",
]

Columns = list[tuple[str, str, RawValue]]
"""Columns as printed: ``(name, format_type name, raw value)``."""

# quote_identifier's output: a double-quoted name with "" inside, or a bare one.
_IDENT = r'(?:"(?:[^"]|"")*"|[^\s"\[\].:,]+)'
HEADER = re.compile(rf"table ({_IDENT})\.({_IDENT}): (INSERT|UPDATE|DELETE):")
TRUNCATE_LINE = re.compile(
    rf"table ((?:{_IDENT}\.{_IDENT}, )*{_IDENT}\.{_IDENT}): TRUNCATE:"
    r"(?: restart_seqs)?(?: cascade)?(?: \(no-flags\))?\Z"
)
QUALIFIED = re.compile(rf"({_IDENT})\.({_IDENT})(?:, |\Z)")
# ' name[type]:value'. The type ends at the first ']:' outside double quotes ('integer[]]:'),
# a value is bare or a '-quoted string with '' inside.
_COLUMN = re.compile(
    rf" ({_IDENT})\[((?:[^\"\]]|\"(?:[^\"]|\"\")*\"|\](?!:))+)\]:('[^']*(?:''[^']*)*'|[^' ][^ ]*)"
)
COMMIT_LINE = re.compile(r"COMMIT (\d+) \(at ([^)]+)\)\Z")
_MESSAGE = re.compile(rb"message: transactional: ([01]) prefix: ")
_MESSAGE_SIZE = re.compile(rb", sz: (\d+) content:")
HEX = "message-hex: "
_QUOTED = r"'([^']*(?:''[^']*)*)'"

UNQUOTED = frozenset({20, 21, 23, 26, 700, 701, 1700})  # print_literal's bare types
BOOL = 16
BITS = frozenset({1560, 1562})
NO_TUPLE = " (no-tuple-data)"


def unquote_ident(text: str) -> str:
    return text[1:-1].replace('""', '"') if text.startswith('"') else text


def _raw(token: str) -> RawValue:
    """A printed value -> the type output text pgoutput would have sent (None, UNCHANGED)."""
    first = token[0]
    if first == "'":
        return token[1:-1].replace("''", "'")
    if token == "null":
        return None
    if token == "unchanged-toast-datum":
        return UNCHANGED
    if first == "B" and token[1:2] == "'":  # bit string, B'101'
        return token[2:-1]
    return token  # number or boolean


def value_pattern(type_oid: int, capture: bool) -> str:
    """Regex for one printed value of a type: its text in a group (unless ``capture`` is off)."""
    if type_oid in UNQUOTED:
        inner = r"([^ ']+)"
    elif type_oid == BOOL:
        inner = r"(true|false)"
    elif type_oid in BITS:
        inner = r"B'([01]*)'"
    else:
        inner = _QUOTED
    if not capture:
        inner = inner.replace("(", "(?:", 1)
    return rf"(?:null|{inner})"


def parse_columns(line: str, pos: int) -> tuple[Columns, int]:
    """Parse printed columns from ``pos`` while they last: ``[(name, type, raw)]``, end."""
    columns = []
    match = _COLUMN.match(line, pos)
    while match is not None:
        columns.append((unquote_ident(match[1]), match[2], _raw(match[3])))
        pos = match.end()
        match = _COLUMN.match(line, pos)
    return columns, pos


def message_line(line: str) -> tuple[bool, str, bytes]:
    """A message line's (transactional?, prefix, content), from the line as test_decoding prints
    it or as the reader fetches it (``message-hex: `` and the hex of its bytes, which carries
    content that is not text).

    The prefix and content are printed raw, so either may hold the ``, sz: N content:`` that
    separates them: the separator is the first one whose ``N`` is the byte length of the rest
    of the line (the content is its last ``N`` bytes).
    """
    raw = bytes.fromhex(line[len(HEX):]) if line.startswith(HEX) else line.encode()
    head = _MESSAGE.match(raw)
    if head is None:
        raise ValueError("unrecognized message line")
    for size in _MESSAGE_SIZE.finditer(raw, head.end()):
        if len(raw) - size.end() == int(size[1]):
            return head[1] == b"1", raw[head.end():size.start()].decode(), raw[size.end():]
    raise ValueError("message content does not match its printed size")
