"""Columns of a JSON file that first hold a value past the rows its shape was told from.

JSON Lines and JSON arrays have no schema: a file's columns are the union over its rows, and
shape detection (`shape_detect.detect_shape`) reads them from its first rows only (the whole
file would be parsed twice). A column that first appears later (files joined with `cat`,
exports appended over time) was projected away without a word: a chat beside text rows, an
alpaca row's `history`, a `context` beside question/answer, dropped where the same row first
would have been refused. The tokenize read parses every key of every row anyway, so each block
is held here to the shape: the file's columns so far are detected again, and a column that
would have been refused, or read, had it come first is the same refusal, naming the row it
first holds a value in; one of another shape that an explicit choice leaves unread is the same
note. Parquet, Arrow, CSV/TSV and datasets carry their columns in a schema or header: their
shape is told from all of them.
"""
from __future__ import annotations

from dataclasses import replace

import pyarrow as pa

from packtool.errors import PacktoolInputError, cli_flag, shown
from packtool.tokenize.shape_detect import Shape, detect_shape, held_message, unread_shapes

SCHEMALESS = ("jsonl", "json")  # the input kinds whose columns are the union over their rows


def has_value(col) -> pa.Array | None:
    """Which rows hold something: null, "" and [] are nothing to render (LLaMA-Factory's own
    empty system / history); any other value (a number, an object) is content."""
    import pyarrow.compute as pc  # here: a pack of other shapes never loads it (25 ms)
    t = col.type
    if pa.types.is_null(t):
        return None
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pc.fill_null(pc.greater(pc.utf8_length(col), 0), False)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pc.fill_null(pc.greater(pc.list_value_length(col), 0), False)
    return col.is_valid()


def told_from(shape: Shape, f, columns: list[str], empty: frozenset[str]) -> Shape:
    """`shape` remembering the columns it was told from, for a schemaless file (LateColumns)."""
    if getattr(f, "kind", None) not in SCHEMALESS:
        return shape
    return replace(shape, told_from=tuple(columns), told_empty=tuple(sorted(empty)))


class LateColumns:
    """The judge one read of a schemaless file hands each parsed block (`block`): picklable,
    so a Ray read task builds its own from the job's shape (`late_columns`)."""

    def __init__(self, path: str, shape: Shape, cfg) -> None:
        self.path, self.shape, self.cfg = path, shape, cfg
        self.known = set(shape.told_from)
        self.noted: set[str] = set()

    def block(self, table: pa.Table, row0: int) -> None:
        """`table`: a block's rows, every key parsed, the first at file row `row0`."""
        new = [c for c in table.column_names if c not in self.known]
        if not new:
            return
        first = {}
        for c in new:
            col = table.column(c)
            has = has_value(col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col)
            if has is not None:
                at = has.to_numpy(zero_copy_only=False).nonzero()[0]
                if at.size:
                    first[c] = row0 + int(at[0])
        if first:
            self._judge(first)

    def _judge(self, first: dict[str, int]) -> None:
        cols = sorted(self.known | set(first))
        row = min(first.values())
        said = (f"column {next(iter(first))} first holds a value here" if len(first) == 1 else
                "columns " + ", ".join(f"{c} (row {r})" for c, r in sorted(first.items(), key=lambda x: x[1]))
                + " first hold values")
        past = f"{said}, past the first rows its shape was told from (columns {', '.join(sorted(self.known))})"
        try:  # a template exists or not: only a chat shape asks, and two shapes are refused first
            got = detect_shape(cols, self.cfg, self.path, True, frozenset(self.shape.told_empty))
        except PacktoolInputError as e:  # the refusal the file would get had the row come first
            text, lead = str(e), f"{shown(self.path)}: "
            raise PacktoolInputError(f"{past}: {text[len(lead):] if text.startswith(lead) else text}",
                                     path=self.path, row=row, flag=e.flag) from None
        held = [c for c in got.held if c not in self.shape.held and c in first]
        if held:
            raise PacktoolInputError(f"{past}: {held_message(held[0], got)}", path=self.path,
                                     row=first[held[0]], flag=cli_flag("shape"))
        if (got.kind, got.columns, got.side) != (self.shape.kind, self.shape.columns, self.shape.side):
            read = [c for c in got.columns if c not in self.shape.columns and c in first]
            raise PacktoolInputError(
                f"{past}: shape {got.kind} reads {', '.join(read) or 'them'}, but this file's rows are read as "
                f"shape {self.shape.kind} ({', '.join(self.shape.columns)}), told from its first rows, and "
                f"would be packed without it: give every row the column, or split the file at this row (each "
                f"part is then told its own shape)", path=self.path, row=row, flag=cli_flag("shape"))
        self._note(cols)
        self.known.update(first)

    def _note(self, cols: list[str]) -> None:
        """Another shape's columns under an explicit choice: the note a first row would have had."""
        from packtool.notes import note
        before = {k for k, _ in unread_shapes(sorted(self.known), self.shape, self.cfg,
                                              frozenset(self.shape.told_empty))}
        for kind, c in unread_shapes(cols, self.shape, self.cfg, frozenset(self.shape.told_empty)):
            if kind not in before and kind not in self.noted:
                self.noted.add(kind)
                note(f"{self.path}: columns {', '.join(c)} (shape {kind}) are not read: this file is packed as "
                     f"shape {self.shape.kind} ({', '.join(self.shape.columns)}), as asked")


def late_columns(f, shape: Shape, cfg) -> LateColumns | None:
    """The judge of a file's read, for a schemaless file whose shape was told from its first rows."""
    return LateColumns(f.path, shape, cfg) if shape.told_from and getattr(f, "kind", None) in SCHEMALESS else None


__all__ = ["LateColumns", "SCHEMALESS", "has_value", "late_columns", "told_from"]
