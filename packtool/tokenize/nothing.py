"""What a row's value holds nothing in: null, "" and [] (LLaMA-Factory's own empty system /
history) are nothing to render; any other value (a number, an object, whitespace) is content.

The one rule for a column read as Arrow (`has_value`: the shapes' held columns, the late-column
judge) and for a JSON value parsed by Python (`is_nothing`: the JSON array reader, which judges a
late key again only once it holds something), so a change to the rule reaches every door (RA-8:
the array reader kept its own copy). Standard library and pyarrow only: both readers import it.
"""
from __future__ import annotations

import pyarrow as pa


def is_nothing(v) -> bool:
    """A parsed JSON value that holds nothing: null, "" or []."""
    return v is None or (isinstance(v, (str, list)) and not v)


def has_value(col) -> pa.Array | None:
    """Which rows of an Arrow column hold something (`is_nothing`'s rule); None for a column of
    nulls only by type."""
    import pyarrow.compute as pc  # here: a pack of other shapes never loads it (25 ms)
    t = col.type
    if pa.types.is_null(t):
        return None
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pc.fill_null(pc.greater(pc.utf8_length(col), 0), False)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pc.fill_null(pc.greater(pc.list_value_length(col), 0), False)
    return col.is_valid()


__all__ = ["has_value", "is_nothing"]
