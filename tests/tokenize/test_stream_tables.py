"""L3 (stop 46): a `datasets.IterableDataset` without features whose source yields Arrow tables
(an Arrow-formatted batched map, the columns unknown until read) was read as Python rows, each
table turned into dicts and back into Arrow (late_columns.stream_batches: the late-column rule
needs every key), ~30x its own read. Such a stream is now read as the tables its source gives,
each with its own columns and held to the same rule; a stream of Python rows (from_generator, a
row map) is read as before, batch by batch.

The class: both kinds of features-less stream, each with its bytes the file's (one-row batches
and larger), a column first held, or lacked, by a later table (the same refusal naming the
row), an empty stream (the same refusal as the file's), and the Arrow stream never turned into
rows."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest
from test_arrow_ingest import pack_digests, rows, write_jsonl

from packtool.errors import PacktoolInputError

datasets = pytest.importorskip("datasets", reason="the hf extra (datasets) is not installed")
datasets.disable_progress_bars()


def _table(rs: list[dict]) -> pa.Table:
    """Rows as one table whose columns are the union of their keys (None where a row lacks one)."""
    keys = list(dict.fromkeys(k for r in rs for k in r))
    return pa.table({k: [r.get(k) for r in rs] for k in keys})


def rows_stream(rs: list[dict], tables: int = 3):
    return datasets.IterableDataset.from_generator(lambda: iter(rs))


def arrow_stream(rs: list[dict], tables: int = 3):
    """The same rows from a source of Arrow tables (`tables` of them, each with its own columns)."""
    size = max(1, -(-len(rs) // tables))
    src = datasets.Dataset.from_dict({"j": [json.dumps(r) for r in rs] or ["null"]}).to_iterable_dataset()
    made = lambda t: _table([r for r in map(json.loads, t.column("j").to_pylist()) if r is not None])  # noqa: E731
    return src.with_format("arrow").map(made, batched=True, batch_size=size, remove_columns=["j"])


STREAMS = {"Python rows": rows_stream, "Arrow tables": arrow_stream}


@pytest.mark.parametrize("stream", STREAMS)
def test_the_streams_have_no_features(stream):
    assert STREAMS[stream]([{"input_ids": [1]}]).features is None


@pytest.mark.parametrize("batch_size", [1, 7, 1024])
@pytest.mark.parametrize("stream", STREAMS)
def test_a_stream_without_features_gives_the_file_bytes(tmp_path, stream, batch_size):
    ids = [r for r in rows(600, seed=7) if len(r) > 1]  # a labeled one-token row trains nothing: refused
    rs = [{"input_ids": r, "loss_mask": [1] * len(r) if i % 2 else [0] * (len(r) // 2) + [1] * (len(r) - len(r) // 2)}
          for i, r in enumerate(ids)]
    path = write_jsonl(tmp_path / "t.jsonl", {"input_ids": ids, "loss_mask": [r["loss_mask"] for r in rs]})
    ref = pack_digests([path], tmp_path, "file", batch_size=batch_size)
    assert ref and pack_digests(STREAMS[stream](rs), tmp_path, "stream", batch_size=batch_size) == ref


@pytest.mark.parametrize("late_has_it", [True, False], ids=["first held late", "lacked late"])
@pytest.mark.parametrize("stream", STREAMS)
def test_a_later_tables_column_is_held_to_the_first_rows(tmp_path, stream, late_has_it):
    n = 500
    early = {"input_ids": [100, 101, 102]} if late_has_it else {"input_ids": [100, 101, 102], "loss_mask": [0, 1, 1]}
    late = {"input_ids": [11, 12, 13], "loss_mask": [0, 0, 1]} if late_has_it else {"input_ids": [11, 12, 13]}
    with pytest.raises(PacktoolInputError) as e:
        pack_digests(STREAMS[stream]([dict(early) for _ in range(n)] + [late]), tmp_path, "late", batch_size=64)
    msg = str(e.value)
    assert "\n" not in msg and "loss_mask" in msg and e.value.row == n, msg


@pytest.mark.parametrize("stream", STREAMS)
def test_an_empty_stream_is_refused_as_an_empty_file(tmp_path, stream):
    (tmp_path / "e.jsonl").write_text("")
    with pytest.raises(PacktoolInputError) as ref:
        pack_digests([str(tmp_path / "e.jsonl")], tmp_path, "file")
    with pytest.raises(PacktoolInputError) as e:
        pack_digests(STREAMS[stream]([]), tmp_path, "empty")
    assert type(e.value) is type(ref.value) and "\n" not in str(e.value)
    assert str(e.value).split(": ", 1)[-1] == str(ref.value).split(": ", 1)[-1], (str(e.value), str(ref.value))


def test_an_arrow_stream_is_never_turned_into_rows(tmp_path, monkeypatch):
    """Its tables are read as they are: datasets' batches (dicts of rows) are asked for the first
    row's columns alone (a one-row peek), never for the read."""
    rs = [{"input_ids": r} for r in rows(300, seed=8)]
    ref = pack_digests(rows_stream(rs), tmp_path, "rows")
    asked, inner = [], datasets.IterableDataset.iter

    def spy(self, batch_size, *a, **k):
        asked.append(batch_size)
        return inner(self, batch_size, *a, **k)
    monkeypatch.setattr(datasets.IterableDataset, "iter", spy)
    assert pack_digests(arrow_stream(rs), tmp_path, "tables") == ref
    assert asked and set(asked) == {1}, asked
