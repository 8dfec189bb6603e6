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

Two object doors read in batches whose columns may differ from the first's, and are held by the
same rule (`grows`): a `pyarrow.dataset.Dataset`, whose schema is its first file's (a later
file's own columns were read away), and a `datasets.IterableDataset` without features, told from
its first row. Their reads live here (`fragment_batches`, `stream_batches`): each batch is read
with the columns it holds (a stream whose source yields Arrow, as its tables), judged, then
projected; a column a batch lacks is nulls, which the row checks refuse as a row without it.
"""
from __future__ import annotations

from dataclasses import replace

import pyarrow as pa

from packtool.errors import PacktoolInputError, cli_flag, shown
from packtool.tokenize.nothing import has_value
from packtool.tokenize.shape_detect import Shape, detect_shape, held_message, unread_shapes

SCHEMALESS = ("jsonl", "json")  # the input kinds whose columns are the union over their rows
# how each kind's shape was told, and the fix beside "give every row the column"
_TOLD = {"file": ("file", "rows", "split the file at this row (each part is then told its own shape)"),
         "arrow-dataset": ("dataset", "file (a pyarrow dataset's schema is its first file's)",
                           "pass its files as separate inputs (each is then told its own shape)"),
         "hf-iterable": ("dataset", "row (an IterableDataset without features)",
                         "pass the rows holding it as a separate dataset (each is then told its own shape)")}


def grows(f) -> bool:
    """Whether a later batch of `f` may hold columns its first did not: a JSON file, a pyarrow
    dataset, an IterableDataset without features (`ArrowSource.grows`)."""
    return getattr(f, "kind", None) in SCHEMALESS or getattr(f, "grows", False)


def told_from(shape: Shape, f, columns: list[str], empty: frozenset[str]) -> Shape:
    """`shape` remembering the columns it was told from, for an input that `grows` (LateColumns)."""
    if not grows(f):
        return shape
    return replace(shape, told_from=tuple(columns), told_empty=tuple(sorted(empty)))


class LateColumns:
    """The judge one read of an input that `grows` hands each batch (`block`): picklable,
    so a Ray read task builds its own from the job's shape (`late_columns`)."""

    def __init__(self, path: str, shape: Shape, cfg, kind: str = "file") -> None:
        self.path, self.shape, self.cfg = path, shape, cfg
        self.what, self.first, self.fix = _TOLD.get(kind, _TOLD["file"])
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
        told = self.first.split(" (")[0]
        past = f"{said}, past the first {told} its shape was told from (columns {', '.join(sorted(self.known))})"
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
                f"{past}: shape {got.kind} reads {', '.join(read) or 'them'}, but this {self.what}'s rows are read "
                f"as shape {self.shape.kind} ({', '.join(self.shape.columns)}), told from its first {self.first}, "
                f"and would be packed without it: give every row the column, or {self.fix}", path=self.path,
                row=row, flag=cli_flag("shape"))
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
                note(f"{self.path}: columns {', '.join(c)} (shape {kind}) are not read: this {self.what} is packed as "
                     f"shape {self.shape.kind} ({', '.join(self.shape.columns)}), as asked")


def late_columns(f, shape: Shape, cfg) -> LateColumns | None:
    """The judge of an input's read, for one whose shape was told from its first batch (`grows`)."""
    if not (shape.told_from and grows(f)):
        return None
    return LateColumns(f.path, shape, cfg, f.kind if getattr(f, "grows", False) else "file")


def _projected(b, columns: list[str] | None, keep: list[str]):
    """`b` as the read asked: its `columns` (nulls where the batch lacks one), else `keep`'s."""
    names = b.column_names
    want = keep if columns is None else columns
    if all(c in names for c in want):
        return b.select(want)
    return pa.table({c: b.column(c) if c in names else pa.nulls(b.num_rows) for c in want})


def fragment_batches(dset, batch_size: int, columns: list[str] | None, judge: LateColumns | None = None):
    """A pyarrow dataset's batches, fragment by fragment, one row group at a time (a scanner
    over the whole dataset reads ahead: ~890 MiB held over a 637 MB file of 1M rows). With a
    judge, a fragment's own columns beyond the first's are read too, judged, then projected."""
    import pyarrow.dataset as pads
    keep, first, row = list(dset.schema.names), None, 0
    for frag in dset.get_fragments():
        new: list[str] = []
        if judge is not None:
            names = frag.physical_schema.names
            first = set(names) if first is None else first  # a schema given without them: as asked
            new = [n for n in names if n not in judge.known and n not in first and n not in keep]
        schema = pa.schema(list(dset.schema) + [frag.physical_schema.field(n) for n in new]) if new else dset.schema
        cols = None if columns is None or not new else list(columns) + new
        pieces = frag.split_by_row_group() if isinstance(frag, pads.ParquetFileFragment) else [frag]
        for piece in pieces:
            for b in piece.to_batches(schema=schema, columns=cols if new else columns, batch_size=batch_size,
                                      batch_readahead=0, fragment_readahead=0, use_threads=False):
                if new:
                    judge.block(b, row)
                    b = _projected(b, columns, keep)
                row += b.num_rows
                yield b


def stream_batches(ds, batch_size: int, columns: list[str] | None, judge: LateColumns, path: str):
    """An IterableDataset without features, as its source gives it: the Arrow tables of one that
    yields Arrow (`_source_tables`), else its rows, each batch's columns the union over its rows
    (its Arrow format keeps the first row's, or fails on a batch that mixes them); each judged,
    then projected."""
    tables = _source_tables(ds, batch_size)
    row = 0
    for table in _row_tables(ds, batch_size, path) if tables is None else tables:
        judge.block(table, row)
        row += table.num_rows
        yield _projected(table, columns, table.column_names)


def _row_tables(ds, batch_size: int, path: str):
    from datasets.features.features import cast_to_python_objects  # as its own Arrow format does
    row = 0
    for batch in ds.with_format(None).iter(batch_size=batch_size):
        n = len(next(iter(batch.values()), ()))
        try:
            yield pa.table(cast_to_python_objects(batch, only_1d_for_numpy=True))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise PacktoolInputError(f"rows {row}..{row + n - 1} cannot be read as Arrow columns "
                                     f"({str(e).splitlines()[0]}): give each column one type", path=path,
                                     row=row) from None
        row += n


def _source_tables(ds, batch_size: int):
    """The tables of a stream whose source yields Arrow (an Arrow-formatted batched map, which
    drops the features), as the source makes them, in pieces of at most `batch_size` rows; None
    for a stream of Python rows (from_generator, a row map), or one resumed from a state_dict
    (its place is counted in datasets' own batches). datasets has no public read of its
    source's tables: its Arrow format joins pieces of two tables into one batch, which fails
    where their columns differ (the late column itself), and its Python format turns every
    table into dicts, ~30x the read. Where its inner API is not as read here, None: rows."""
    from datasets.iterable_dataset import FormattedExamplesIterable, RebatchedArrowExamplesIterable
    if getattr(ds, "_starting_state_dict", None) or ds.features is not None:
        return None
    try:
        ex = ds._prepare_ex_iterable_for_iteration(batch_size=batch_size)
    except (AttributeError, TypeError):
        return None
    while isinstance(ex, FormattedExamplesIterable):  # formats only: no features to cast to
        ex = ex.ex_iterable
    if not isinstance(ex, RebatchedArrowExamplesIterable) or not getattr(ex.ex_iterable, "iter_arrow", None):
        return None
    return (pa.Table.from_batches([b]) for _, t in ex.ex_iterable.iter_arrow()
            for b in t.to_batches(max_chunksize=batch_size) if b.num_rows)


__all__ = ["LateColumns", "SCHEMALESS", "fragment_batches", "grows", "late_columns",
           "stream_batches", "told_from"]
