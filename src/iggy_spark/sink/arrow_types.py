"""The Arrow type families the sink's encoder reads as text and as bytes (plain, large and view
layouts alike)."""

from __future__ import annotations

import pyarrow as pa

__all__ = ["is_binary", "is_text"]


def is_text(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t))


def is_binary(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_fixed_size_binary(t)
    )
