"""Every consumer checks what it reads (issue 23, class 2): the corpus of damaged outputs
(the corruptions of verify's checks, tests/verification/test_verify_corruption.py, plus
manifests that lie) fed to every consumer of a packed output: `packtool train` (CPU), the
Megatron dataset, `packtool.hf`, `packtool inspect` and the standalone reader in FORMAT.md.
Each refuses (one line, packtool's own error type, exit 2 on the CLI) or is proven harmless:
what it hands on is identical to what it hands on for the clean output.

Every damaged output is a copy of one small clean pack, built once per session; content
edits come twice: as the file would be (the checksum catches them) and re-signed (bytes,
checksum and rows updated in the manifest), so that the per-row checks must catch them."""
from __future__ import annotations

import json
import os
import re
import shutil

import numpy as np
import pytest
from slab_support import (PAD, edit_checksum, find_row, format_reader, load_rows, read_manifest, save_manifest,
                          save_rows, write_pack)

from packtool.align import Alignment
from packtool.errors import PacktoolError
from packtool.planning.core import PackingConfig

pytest.importorskip("torch")
typer = pytest.importorskip("typer")
from typer.testing import CliRunner  # noqa: E402

ALIGN = Alignment(cp=2, capacity=256)
# the same rows packed to a fixed length: slabs that end in a fill segment (source_index -1)
FIXED = "clean-fixed"
FIXED_ALIGN = Alignment(cp=2, capacity=256, fixed_length=256)
# few distinct lengths (segments to swap), some over U (split chunks), some not a multiple of 8 once
# padded to s=4 (so that slabs packed for cp=2 are not also laid out for cp=4)
LENGTHS = np.random.default_rng(3).integers(1, 50, 240) * 8 - np.random.default_rng(4).choice([3, 6], 240)
SHARD0, SHARD1 = "slabs-00000.parquet", "slabs-00001.parquet"


# --- the corpus --------------------------------------------------------------------------

def _edit(shard, fn, sign=True):
    def run(out):
        import pyarrow.parquet as pq
        groups = [g.num_rows for g in (pq.ParquetFile(os.path.join(out, shard)).metadata.row_group(i)
                                       for i in range(pq.ParquetFile(os.path.join(out, shard)).num_row_groups))]
        cols = load_rows(out, shard)
        n = len(cols["input_ids"])
        fn(cols)
        groups[0] -= n - len(cols["input_ids"])  # a dropped row leaves the first group
        _save_groups(out, shard, cols, groups, sign)
    return run


def _save_groups(out, shard, cols, groups, sign):
    """save_rows, keeping the shard's row groups: the edit is the only difference."""
    import pyarrow.parquet as pq
    from slab_support import resign
    from packtool.slabs.schema import SCHEMA
    path = os.path.join(out, shard)
    save_rows(out, shard, cols, sign=False)
    t = pq.read_table(path)
    with pq.ParquetWriter(path, SCHEMA, compression="zstd") as w:
        start = 0
        for n in groups:
            w.write_table(t.slice(start, n))
            start += n
    if sign:
        resign(out, shard)


def _manifest(fn):
    def run(out):
        m = read_manifest(out)
        fn(m)
        save_manifest(out, m)
    return run


def _multi(cols):
    return find_row(cols, lambda r: len(r["seq_lens"]) >= 2 and r["cu_seqlens_padded"][1] > r["seq_lens"][0])


def _shift_cu_padded(c):
    r = _multi(c)
    c["cu_seqlens_padded"][r][1] -= 2
    c["cp_offsets"][r][1] = c["cu_seqlens_padded"][r][1] // ALIGN.cp


def _loss_on_pad(c):
    r = _multi(c)
    c["loss_mask"][r][int(c["seq_lens"][r][0])] = 1
    c["num_loss_tokens"][r] += 1


def _loss_on_first(c):
    c["loss_mask"][0][0] = 1
    c["num_loss_tokens"][0] += 1


def _pad_token(c):
    r = _multi(c)
    c["input_ids"][r][int(c["seq_lens"][r][0])] = 7


def _changed_token(c):
    c["input_ids"][0][1] = (int(c["input_ids"][0][1]) + 1) % 900 + 3


def _token_range(c):
    c["input_ids"][0][1] = 5000  # vocab_size is 1000


def _loss_value(c):
    k = int(np.flatnonzero(c["loss_mask"][0])[0])
    c["loss_mask"][0][k] = 2
    c["num_loss_tokens"][0] += 1


def _num_loss(c):
    c["num_loss_tokens"][0] += 1


def _drop_row(c):
    for k in c:
        del c[k][0]


def _cu_seqlens(c):
    c["cu_seqlens"][_multi(c)][1] += 1


def _cp_offsets(c):
    c["cp_offsets"][0][1] += 1


def _layout_pad(c):
    c["layout_pad"][0] += 4
    c["tail_pad"][0] -= 4


def _dp_rank(c):
    c["dp_rank"][0] = 3


def _slab_index(c):
    c["slab_index"][0] = c["slab_index"][1]


def _chunk_order(c):
    r, k = next((r, k) for r in range(len(c["chunk_index"])) for k, x in enumerate(c["chunk_index"][r]) if x == 1)
    c["source_offset"][r][k] += 4


def _duplicate_segment(c):
    """A segment's tokens and identity replaced by another of the same length (coverage)."""
    seen = {}
    for r, lens in enumerate(c["seq_lens"]):
        for k, n in enumerate(lens.tolist()):
            if c["chunk_index"][r][k] == 0 and n < ALIGN.usable:
                if n in seen and seen[n][0] != r:
                    (r0, k0) = seen[n]
                    p0, p1 = int(c["cu_seqlens_padded"][r0][k0]), int(c["cu_seqlens_padded"][r][k])
                    c["input_ids"][r][p1:p1 + n] = c["input_ids"][r0][p0:p0 + n]
                    c["loss_mask"][r][p1:p1 + n] = c["loss_mask"][r0][p0:p0 + n]
                    for col in ("source_index", "chunk_index", "source_offset"):
                        c[col][r][k] = c[col][r0][k0]
                    c["num_loss_tokens"][r] = int(c["loss_mask"][r].sum())
                    return
                seen.setdefault(n, (r, k))
    raise AssertionError("no equal-length pair; enlarge the fixture")


def _truncate(out):
    p = os.path.join(out, SHARD1)
    data = open(p, "rb").read()
    open(p, "wb").write(data[: len(data) // 2])


def _flip(out):
    p = os.path.join(out, SHARD0)
    data = bytearray(open(p, "rb").read())
    for i in range(len(data) // 2, len(data) // 2 + 4):
        data[i] ^= 0xFF
    open(p, "wb").write(bytes(data))


def _unlisted_half(out):
    """The issue's case: half the slabs in a shard the manifest does not list."""
    m = read_manifest(out)
    gone = m["shards"][len(m["shards"]) // 2:]
    m["shards"] = m["shards"][: len(m["shards"]) // 2]
    m["stats"]["slabs"] -= sum(s["rows"] for s in gone)
    save_manifest(out, m)


def _extra_column(out):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from slab_support import resign
    p = os.path.join(out, SHARD0)
    t = pq.read_table(p)
    pq.write_table(t.append_column("notes", pa.array(["x"] * t.num_rows)), p)
    resign(out, SHARD0)


def _column_type(out):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from slab_support import resign
    p = os.path.join(out, SHARD0)
    t = pq.read_table(p)
    i = t.schema.get_field_index("num_tokens")
    pq.write_table(t.set_column(i, "num_tokens", t.column(i).cast(pa.int64())), p)
    resign(out, SHARD0)


def _nest(out):
    with open(os.path.join(out, ".manifest.json"), "w") as f:
        f.write('{"format": "packtool-slabs", "schema_version": 1, "x": ' + "[" * 100000 + "]" * 100000 + "}")


def _edit_alignment(**kw):
    def fn(m):
        a = {**m["config"]["alignment"], **kw}
        new = Alignment(tp=a["tp"], cp=a["cp"], sp=a["sp"], fp8=a["fp8"], capacity=a["capacity"],
                        fixed_length=a["fixed_length"], convention=a["convention"])
        a.update(s=new.s, t=new.t, usable=new.usable)  # a consistent edit: only the slabs disagree
        m["config"]["alignment"] = a
    return _manifest(fn)


def _set(path, value):
    def fn(m):
        *head, last = path
        d = m
        for k in head:
            d = d[k]
        d[last] = value(d[last]) if callable(value) else value
    return _manifest(fn)


def _fill_chunk(c):
    """The fill segment's chunk_index, -1, made a chunk number (verify's segment_fields)."""
    r = find_row(c, lambda r: r["source_index"][-1] < 0)
    c["chunk_index"][r][-1] = 2


def _fill_as_next_chunk(c):
    """The fill segment (seq_lens 0) numbered as the next chunk of a real row: every source row
    still once, its chunks 0, 1, ... (coverage holds), but a real segment of 0 tokens."""
    def whole(r):  # a row's only chunk: chunk 0 shorter than U (a cut row's chunk 0 holds U tokens)
        return np.flatnonzero((r["chunk_index"] == 0) & (r["seq_lens"] < FIXED_ALIGN.usable))
    r = find_row(c, lambda r: r["source_index"][-1] < 0 and whole(r).size > 0)
    k = int(whole({col: v[r] for col, v in c.items()})[0])
    src, n = int(c["source_index"][r][k]), int(c["seq_lens"][r][k])
    c["source_index"][r][-1], c["chunk_index"][r][-1], c["source_offset"][r][-1] = src, 1, n


def _negative_offset(c):
    r = find_row(c, lambda r: (r["chunk_index"] == 0).any())
    c["source_offset"][r][int(np.flatnonzero(c["chunk_index"][r] == 0)[0])] = -4


def _one_more(*cols):
    """A trailing fill entry (-1) in `cols` of a slab: every source row still appears once, but
    the slab's per-segment lists no longer hold one entry per segment of seq_lens."""
    def edit(c):
        for col in cols:
            c[col][0] = np.append(c[col][0], -1).astype(c[col][0].dtype)
    return edit


CONTENT = {  # verify check -> an edit of one shard's rows
    "cu_seqlens_padded": (SHARD1, _shift_cu_padded), "loss_on_pad": (SHARD1, _loss_on_pad),
    "loss_on_first_token": (SHARD1, _loss_on_first), "pad_token": (SHARD0, _pad_token),
    "token_id_range": (SHARD0, _token_range), "loss_mask_value": (SHARD0, _loss_value),
    "num_loss_tokens": (SHARD0, _num_loss), "dropped_row": (SHARD0, _drop_row),
    "cu_seqlens": (SHARD1, _cu_seqlens), "cp_offsets": (SHARD0, _cp_offsets),
    "layout": (SHARD0, _layout_pad), "dp": (SHARD0, _dp_rank), "slab_index": (SHARD0, _slab_index),
    "chunk_order": (SHARD0, _chunk_order), "duplicate_segment": (SHARD0, _duplicate_segment),
    "source_tokens": (SHARD0, _changed_token),
    "segment_count:source_index": (SHARD0, _one_more("source_index", "chunk_index")),
    "segment_count:chunk_index": (SHARD0, _one_more("chunk_index")),
    "segment_count:source_offset": (SHARD0, _one_more("source_offset")),
    "array_length:cp_offsets": (SHARD0, _one_more("cp_offsets")),
    "segment_fields:negative-offset": (SHARD0, _negative_offset),
    f"{FIXED}/segment_fields:fill-chunk": (SHARD0, _fill_chunk),
    f"{FIXED}/segment_fields:fill-as-next-chunk": (SHARD0, _fill_as_next_chunk),
}
def _null_in(col):
    """A null in slab 0's `col`: one list entry (a token id, a segment's length...) or the scalar."""
    def edit(c):
        if isinstance(c[col][0], np.ndarray):
            a = c[col][0].astype(object)
            a[0] = None
            c[col][0] = a
        else:
            c[col][0] = None
    return edit


def _slab_columns():
    from packtool.slabs.schema import SCHEMA
    return SCHEMA.names


# S41-6: another format or schema version, a DP plan the slabs do not follow, alignment fields of
# the wrong type: verify rejects each, so every consumer (the standalone reader too) must refuse it
MANIFEST_EDITS = {
    "manifest:format-other": _set(("format",), "other"),
    "manifest:schema_version-3": _set(("schema_version",), 3),
    "manifest:dp-2-unplanned": _set(("config", "packing", "dp"), 2),
    "manifest:capacity-str": _set(("config", "alignment", "capacity"), lambda v: str(v)),
    "manifest:tp-bool": _set(("config", "alignment", "tp"), True),
    "manifest:fp8-unknown": _set(("config", "alignment", "fp8"), "fp4"),
}


def _manifest_text(pattern, insert):
    """The manifest's text with `insert` put after the first match of `pattern` (its JSON kept)."""
    def run(out):
        path = os.path.join(out, ".manifest.json")
        text = open(path, encoding="utf-8").read()
        edited = re.sub(pattern, lambda m: m.group(0) + insert, text, count=1)
        assert edited != text, pattern
        open(path, "w", encoding="utf-8").write(edited)
    return run


# S46B-3: a key given twice in one object (json keeps the last: here the real value, so the first,
# wrong one hides), at every depth, and a UTF-8 BOM before the manifest: verify and packtool's
# readers refuse each, and FORMAT.md's standalone reader read them
MANIFEST_TEXT_EDITS = {
    "manifest:twice-format": _manifest_text(r"\A\{", '"format": "other", '),
    "manifest:twice-alignment-cp": _manifest_text(r'"alignment": \{', '"cp": 4, '),
    "manifest:twice-stats-slabs": _manifest_text(r'"stats": \{', '"slabs": 1, '),
    "manifest:twice-shard-rows": _manifest_text(r'"shards": \[\s*\{', '"rows": 1, '),
    "manifest:utf8-bom": lambda out: _bom(os.path.join(out, ".manifest.json")),
}


def _bom(path):
    data = open(path, "rb").read()
    open(path, "wb").write(b"\xef\xbb\xbf" + data)


# S31-1: a null anywhere in a slab, in every column of the schema (list entries and scalars)
NULLS = {f"null:{col}": _edit(SHARD0, _null_in(col)) for col in _slab_columns()}
CORRUPTIONS = {
    **NULLS,
    **{f"{k}:as-is": _edit(s, f, sign=False) for k, (s, f) in CONTENT.items()},
    **{f"{k}:re-signed": _edit(s, f) for k, (s, f) in CONTENT.items()},
    "shard_size+checksum:truncated": _truncate,
    "checksum:flipped-bytes": _flip,
    "shard_missing": lambda out: os.remove(os.path.join(out, "slabs-00002.parquet")),
    "shard_extra:copy": lambda out: shutil.copy(os.path.join(out, SHARD0), os.path.join(out, "slabs-00099.parquet")),
    "shard_extra:unlisted-half": _unlisted_half,
    "shard_extra:stray-file": lambda out: open(os.path.join(out, "notes.txt"), "w").write("x"),
    "shard-listed-twice": _manifest(lambda m: m["shards"].append(dict(m["shards"][0]))),
    "schema:extra-column": _extra_column,
    "schema:column-type": _column_type,
    "shard_counts:rows": _set(("shards", 0, "rows"), lambda v: v + 1),
    "shard_counts:tokens": _set(("shards", 1, "loss_tokens"), lambda v: v + 1),
    "manifest_stats:real_tokens": _set(("stats", "real_tokens"), lambda v: v + 5),
    "manifest_stats:overflow": _set(("stats", "overflow", "chunks"), lambda v: v + 1),
    "manifest_stats:slabs": _set(("stats", "slabs"), lambda v: v + 1),
    "manifest:missing": lambda out: os.remove(os.path.join(out, ".manifest.json")),
    "manifest:alignment-t": _set(("config", "alignment", "t"), 8),
    "manifest:no-shards": _manifest(lambda m: m.__setitem__("shards", [])),
    "slab_alignment:tp4-sp": _edit_alignment(tp=4, sp=True),
    "slab_alignment:fp8": _edit_alignment(fp8="mxfp8"),
    "segment_alignment:cp4": _edit_alignment(cp=4),
    "capacity:128": _edit_alignment(capacity=128),
    "lie:count-1e15": _set(("stats", "sequences"), 10 ** 15),
    "lie:rows-1e15": _set(("shards", 0, "rows"), 10 ** 15),
    "lie:negative": _set(("shards", 0, "tokens"), -5),
    "lie:nesting-100000": _nest,
    "lie:tokenizer-null": _set(("tokenizer",), None),
    "lie:vocab_size-lowered": _set(("tokenizer", "vocab_size"), 10),
    # ids over the largest the manifest records for their shard (below vocab_size): a trainer that
    # sized its vocabulary by the record would index past it
    "lie:max_token_id-lowered": _set(("shards", 0, "max_token_id"), lambda v: v - 1),
    # S46B-1b: a record above the shard's largest id: verify's shard_counts; a reader cannot tell
    # it before every row group is decoded, and builds no batch from it (FORMAT.md, "What a reader
    # checks", the list of verify's own): refused at open (past vocab_size) or harmless
    "lie:max_token_id-raised": _set(("shards", 0, "max_token_id"), lambda v: v + 1),
    "lie:tp-1e15": _set(("config", "alignment", "tp"), 10 ** 15),
    "lie:dp-1e15": _set(("config", "packing", "dp"), 10 ** 15),
    "manifest:pad_id": _set(("tokenizer", "pad_id"), lambda v: v + 5),
    "overflow:chunks-under-error": _set(("config", "packing", "overflow"), "error"),
    # S41-6: manifest edits every packtool consumer refused and FORMAT.md's standalone reader read
    **MANIFEST_EDITS,
    **MANIFEST_TEXT_EDITS,
}
# verify itself cannot tell these from the clean output (it needs --source): harmless or refused
NEEDS_SOURCE = {"source_tokens:re-signed"}


# --- the consumers -----------------------------------------------------------------------

def _dataset(out):
    from packtool.megatron.dataset import PackedSlabDataset
    ds = PackedSlabDataset(out, grad_accum=4, micro_batch_tokens=1024)
    got = []
    for st in ds.steps(max_steps=ds.steps_per_epoch()):
        for mb in st.micro_batches:
            got.append(None if mb is None else (mb.input_ids.numpy().tobytes(), mb.loss_weight.numpy().tobytes(),
                                                mb.labels.numpy().tobytes(), mb.seg_real.tobytes()))
        got.append(st.loss_tokens)
    return got


def _hf(out):
    from packtool.hf import SlabCollator, SlabDataset
    ds = SlabDataset(out)
    col = SlabCollator()
    got = []
    for i in range(0, len(ds), 3):
        b = col([ds[j] for j in range(i, min(i + 3, len(ds)))])
        got.append(tuple(b[k].numpy().tobytes() for k in ("input_ids", "labels", "position_ids")))
    return got


def _hf_arrow(out, tmp):
    """`SlabDataset.to_hf()`: `datasets` converts the shards itself, rows packtool never hands out."""
    from packtool.hf import SlabDataset
    t = SlabDataset(out).to_hf(cache_dir=os.path.join(tmp, "hf")).with_format("numpy")
    return [(r["input_ids"].tobytes(), r["loss_mask"].tobytes()) for r in t]


def _cli(app, args):
    r = CliRunner().invoke(app, args)
    if r.exit_code != 0:
        errors = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
        assert r.exit_code == 2 and len(errors) == 1 and "Traceback" not in r.output, r.output
        raise Refused(errors[0])
    return r.output


class Refused(Exception):
    """A CLI consumer's exit 2 with its one `error:` line."""


def _train(out, tmp):
    pytest.importorskip("megatron.core")
    from packtool.cli.failure import guarded
    from packtool.megatron.train_cli import train_command
    app = typer.Typer()
    app.command("train")(guarded(train_command))
    app.command("noop")(lambda: None)
    log = os.path.join(tmp, "train.jsonl")
    _cli(app, ["train", out, "--device", "cpu", "--steps", "1", "--layers", "1", "--hidden", "32", "--heads", "2",
               "--ffn", "64", "--grad-accum", "1000", "--micro-batch-tokens", "1024", "--json-log", log,
               "--log-every", "100"])
    return [json.loads(x)["loss"] for x in open(log).read().splitlines()]


def _inspect(out, tmp):
    from packtool.cli.app import app
    d = json.loads(_cli(app, ["inspect", out, "--json"]))
    return {k: v for k, v in d.items() if "seconds" not in k and k not in ("directory", "path")}


def _reader(out):
    mod = format_reader()
    man = mod.open_output(out)
    got = []
    for s in man["shards"]:
        import pyarrow.parquet as pq
        for row in range(pq.read_metadata(os.path.join(out, s["file"])).num_rows):
            for r in range(man["config"]["alignment"]["cp"]):
                try:
                    ids, mask, cu, side = mod.read_slab_for_cp_rank(out, s["file"], row, r, man)
                except READER_ERRORS as e:  # S45B-1: every refusal of a slab names it (it said `row False`)
                    assert f"{s['file']} row {row}: " in str(e), str(e)
                    raise
                got.append((ids.tobytes(), mask.tobytes(), cu.tobytes(), sorted((k, v.tobytes()) for k, v in side.items())))
    return got


CONSUMERS = {"train": None, "megatron-dataset": lambda o, t: _dataset(o), "hf": lambda o, t: _hf(o),
             "inspect": _inspect, "standalone-reader": lambda o, t: _reader(o)}
# read through `datasets`, after packtool's checks: in the tests of what must be refused, not in
# the harmless-or-refused sweep (a `datasets` conversion per harmless damage)
ARROW = {"hf-to_hf": _hf_arrow}
# the standalone reader is an example with no error type of its own: any exception refuses
READER_ERRORS = (ValueError, OSError, KeyError, TypeError)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("corpus"))
    made: dict[str, str] = {}
    for base, align in (("clean", ALIGN), (FIXED, FIXED_ALIGN)):
        made[base], _ = write_pack(os.path.join(root, base), LENGTHS, align, PackingConfig("bfd", overflow="split"),
                                   shard_tokens=8192, group_tokens=2048)
        assert len(read_manifest(made[base])["shards"]) >= 3

    def get(name):
        if name not in made:
            d = os.path.join(root, re.sub(r"[^a-z0-9]+", "-", name))
            shutil.copytree(made[_base(name)], d)
            {**CORRUPTIONS, **LINKED}[name](d)
            made[name] = d
        return made[name]
    return get, {}


def _base(name):
    """The clean output a corruption is a copy of."""
    return FIXED if name.startswith(f"{FIXED}/") else "clean"


def _consume(consumer, out, tmp):
    try:
        return "ok", ({**CONSUMERS, **ARROW}[consumer] or _train)(out, tmp)
    except Refused as e:
        return "refused", str(e)
    except PacktoolError as e:
        assert "\n" not in str(e)
        return "refused", str(e)
    except READER_ERRORS as e:
        if consumer != "standalone-reader":
            raise
        return "refused", str(e)


def _result(results, get, consumer, name, tmp):
    if (consumer, name) not in results:
        results[consumer, name] = _consume(consumer, get(name), tmp)
    return results[consumer, name]


@pytest.mark.parametrize("consumer", list(CONSUMERS))
@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_consumer_refuses_or_is_harmless(corpus, corruption, consumer, tmp_path):
    get, results = corpus
    if corruption in NEEDS_SOURCE:  # outside what verify rejects without --source: not a consumer's to see
        from packtool.verification.run import verify
        assert verify(get(corruption), workers=1).ok
        return
    if consumer == "train":
        # train reads through the Megatron dataset (its steps, nothing else): where the dataset
        # hands on exactly the clean output's batches, so does train, and a CPU run of a model
        # would add minutes to this test; where the dataset refuses, train must too, in one line
        kind, got = _result(results, get, "megatron-dataset", corruption, str(tmp_path))
        if kind == "ok" and got == _result(results, get, "megatron-dataset", _base(corruption), str(tmp_path))[1]:
            return
    else:
        kind, clean_result = _result(results, get, consumer, _base(corruption), str(tmp_path))
        assert kind == "ok", clean_result  # the clean output is read
    kind, got = _consume(consumer, get(corruption), str(tmp_path))
    if consumer == "train":
        assert kind == "refused", f"train used the damaged output ({corruption}) that the dataset refuses"
    elif kind == "ok":  # harmless: what it hands on is exactly the clean output's
        assert got == results[consumer, _base(corruption)][1], \
            f"{consumer} used the damaged output ({corruption}) without a word"


# S30-7/S30-8: damages verify rejects whose report or rows come out unchanged, so that the test
# above took them for harmless; a consumer must refuse them all the same (FORMAT.md, "What a
# reader checks"): inspect's clean report would send a user to train on them
MUST_REFUSE = ("cu_seqlens_padded:re-signed", "pad_token:re-signed", "token_id_range:re-signed",
               "loss_on_first_token:re-signed", "manifest:pad_id", "capacity:128", "cu_seqlens:re-signed",
               "lie:max_token_id-lowered", "schema:column-type", *MANIFEST_EDITS, *MANIFEST_TEXT_EDITS)


@pytest.mark.parametrize("consumer", ["inspect", "hf", "hf-to_hf", "standalone-reader"])
@pytest.mark.parametrize("corruption", MUST_REFUSE)
def test_consumer_refuses_what_verify_rejects(corpus, corruption, consumer, tmp_path):
    get, results = corpus
    kind, got = _result(results, get, consumer, corruption, str(tmp_path))
    assert kind == "refused", f"{consumer} read the damaged output ({corruption}) without a word"


# S33: every per-row rule of verify that the readers' checks skipped (FORMAT.md, "What a reader
# checks"): a fill segment's chunk_index, a real segment of 0 tokens that coverage counts, a negative
# source_offset, cp_offsets (the standalone reader's local cu offsets) and its length, slab_index,
# chunks under a policy that cuts none. Harmless to the Megatron batches, yet verify rejects them:
# every consumer refuses them all the same
SKIPPED_ROWS = ("cp_offsets:re-signed", "array_length:cp_offsets:re-signed", "slab_index:re-signed",
                "segment_fields:negative-offset:re-signed", "segment_count:source_offset:re-signed",
                f"{FIXED}/segment_fields:fill-chunk:re-signed", f"{FIXED}/segment_fields:fill-as-next-chunk:re-signed",
                "overflow:chunks-under-error")


# S44-8: manifest fields no consumer's slicing reads, yet verify and packtool's readers refuse them as
# a manifest that lies; FORMAT.md's standalone reader promised the same and read on
MANIFEST_LIES = {"lie:convention": _set(("config", "alignment", "convention"), "megatron"),
                 "lie:capacity-doubled": _set(("config", "alignment", "capacity"), lambda v: v * 2),
                 "lie:bos_id-huge": _set(("tokenizer", "bos_id"), 10**9),
                 "lie:eos_id-negative": _set(("tokenizer", "eos_id"), -3),
                 "lie:algorithm": _set(("config", "packing", "algorithm"), "nonsense"),
                 "lie:seed-text": _set(("config", "packing", "seed"), "x")}
CORRUPTIONS.update(MANIFEST_LIES)


def _tokenize_record(**kw):
    def fn(m):
        m.setdefault("input", {})["tokenize"] = {"on_empty": "error", "side_columns": [], **kw}
    return _manifest(fn)


def _skipped_under_error(m):
    m.setdefault("input", {})["tokenize"] = {"on_empty": "error", "side_columns": []}
    m["stats"]["skipped_rows"]["empty"] = 3


# verify's manifest_declared (slabs/declared.py): fields that repeat a policy or a declaration and
# disagree with it; train and the readers trained on them while verify rejected them
DECLARED = {"declared:side_columns-not-a-list": _tokenize_record(side_columns=5),
            "declared:side-column-undeclared": _tokenize_record(side_columns=["old_logprobs"]),
            "declared:chunks-under-error": _set(("stats", "overflow", "chunks"), 7),
            "declared:skipped-under-error": _manifest(_skipped_under_error),
            "declared:changes": _set(("stats", "changes", "tokens_dropped"), 5)}
CORRUPTIONS.update(DECLARED)


@pytest.mark.parametrize("consumer", [*(c for c in CONSUMERS if c not in ("train", "standalone-reader")), *ARROW])
@pytest.mark.parametrize("corruption", list(DECLARED))
def test_every_consumer_refuses_what_verify_calls_declared_wrongly(corpus, corruption, consumer, tmp_path):
    """FORMAT.md's standalone reader does not claim these (its list of checks): left out."""
    get, results = corpus
    from packtool.verification.run import verify
    rep = verify(get(corruption), workers=1)
    assert not rep.ok and "manifest_declared" in rep.counts, rep.counts
    kind, got = _result(results, get, consumer, corruption, str(tmp_path))
    assert kind == "refused", f"{consumer} read the damaged output ({corruption}) without a word"
    assert "the manifest was edited" in got, got


@pytest.mark.parametrize("consumer", [*(c for c in CONSUMERS if c != "train"), *ARROW])  # train: the dataset's
@pytest.mark.parametrize("corruption", [*SKIPPED_ROWS, *MANIFEST_LIES])  # MANIFEST_LIES: S44-8
def test_every_consumer_refuses_what_the_reader_checks_skipped(corpus, corruption, consumer, tmp_path):
    get, results = corpus
    from packtool.verification.run import verify
    assert not verify(get(corruption), workers=1).ok
    kind, got = _result(results, get, consumer, corruption, str(tmp_path))
    assert kind == "refused", f"{consumer} read the damaged output ({corruption}) without a word"

# S47B-3: every field verify holds the manifest to (slabs/fields.py's tables: its JSON type and its
# presence; slabs/format.check_numbers' ranges; the names and the seed's range config_from_dict
# takes), each broken alone: verify rejects each, so FORMAT.md's standalone reader must refuse it
# too (it read schema_version 1 with side columns, an unknown overflow name, a non-numeric
# stats.dp_imbalance, a seed past 2^63-1). Generated from the tables, so a field added to them is
# swept with no edit here.
def _manifest_form_lies():
    from packtool.slabs import fields
    from packtool.slabs.format import NUMBER_RANGES

    def wrong(rule):  # a JSON value of another type than the rule's
        return 5 if rule in (fields._str, fields._file) else "x"

    lies = {}

    def walk(path, spec, base=""):
        for k, rule in spec.items():
            at = (*path, k)
            name = base + ".".join(map(str, at))
            if isinstance(rule, dict):
                walk(at, rule, base)
                continue
            lies[f"form:{name}=wrong-type"] = _set(at, wrong(rule))
            if rule is not fields._later_count:  # absent in outputs written before the figure
                lies[f"form:{name}=absent"] = _manifest(lambda m, at=at: _pop(m, at))
            if rule in (fields._count, fields._later_count):
                lies[f"form:{name}=over-max-count"] = _set(at, fields.MAX_COUNT + 1)
    walk(("config",), fields.CONFIG)
    walk(("stats",), {k: v for k, v in fields.STATS.items() if not isinstance(v, fields.Counts)})
    walk(("tokenizer",), fields.TOKENIZER_IDS)
    walk(("shards", 0), fields.SHARD)
    walk(("side_columns", 0), fields.SIDE_COLUMN, base=SIDE_BASE)  # the side corpus's `lp` (float32, 1 wide)
    for key in ("side_nan", "side_inf"):
        lies[f"form:stats.{key}=wrong-type"] = _set(("stats", key), "x")
    for key, top in NUMBER_RANGES.items():
        part = "packing" if key == "dp" else "alignment"
        lies[f"form:config.{part}.{key}=over-range"] = _set(("config", part, key), top + 1)
    lies["form:tokenizer.vocab_size=over-range"] = _set(("tokenizer", "vocab_size"), 2 ** 31)
    lies["form:tokenizer.pad_id=over-vocab"] = _set(("tokenizer", "pad_id"), lambda v: 10 ** 6)
    for part, key in (("packing", "overflow"), ("packing", "algorithm"), ("alignment", "fp8"),
                      ("alignment", "convention")):
        lies[f"form:config.{part}.{key}=unknown-name"] = _set(("config", part, key), "zzz")
    lies["form:config.packing.seed=2^63"] = _set(("config", "packing", "seed"), 2 ** 63)
    lies["form:config.packing.seed=4001-digits"] = _set(("config", "packing", "seed"), 10 ** 4000)
    lies[f"form:{SIDE_BASE}schema_version=1"] = _set(("schema_version",), 1)  # version 1: refused whole (slabs.format.OLD_VERSION)
    # S48B-3: a count for no float side column (none such, an int one), a side column declared twice
    lies[f"form:{SIDE_BASE}stats.side_nan.zzz"] = _set(("stats", "side_nan", "zzz"), 0)
    lies[f"form:{SIDE_BASE}stats.side_inf.sup"] = _set(("stats", "side_inf", "sup"), 0)
    lies[f"form:{SIDE_BASE}side_columns=lp-twice"] = _manifest(lambda m: m["side_columns"].append(
        next(c for c in m["side_columns"] if c["name"] == "lp")))
    return lies


def _pop(m, path):
    d = m
    for k in path[:-1]:
        d = d[k]
    del d[path[-1]]


SIDE_BASE = "side/"  # a lie of the side corpus's manifest (`lp` and `sup` side columns), not the plain one's
MANIFEST_FORM = _manifest_form_lies()


@pytest.mark.parametrize("corruption", list(MANIFEST_FORM))
def test_the_standalone_reader_refuses_every_manifest_form_verify_rejects(corpus, side_corpus, corruption, tmp_path):
    from packtool.verification.run import verify
    out = str(tmp_path / "out")
    shutil.copytree(side_corpus("clean") if corruption.startswith(f"form:{SIDE_BASE}") else corpus[0]("clean"), out)
    MANIFEST_FORM[corruption](out)
    assert not verify(out, workers=1).ok, "verify took it: not a lie"
    with pytest.raises(READER_ERRORS):
        format_reader().open_output(out)


def _plus(col, n):
    def edit(c):
        c[col][0] += n
    return edit


def _widen_first_segment(c, row, by):
    """`by` pad positions more after slab `row`'s first segment: its tokens, offsets and T follow."""
    end = int(c["cu_seqlens_padded"][row][1])
    for col in ("input_ids", "loss_mask"):
        c[col][row] = np.insert(c[col][row], end, np.full(by, PAD if col == "input_ids" else 0)).astype(c[col][row].dtype)
    c["cu_seqlens_padded"][row][1:] += by
    c["cp_offsets"][row] = (c["cu_seqlens_padded"][row] // ALIGN.cp).astype(c["cp_offsets"][row].dtype)


def _pad_as_fill(c):
    """S39-1: a segment widened by s pads counted as fill_pad (no --fixed-length): T - fill_pad still
    the slab's length, so only the layout of its seq_lens tells the slab is over its capacity."""
    _widen_first_segment(c, 0, ALIGN.s)
    c["fill_pad"][0] += ALIGN.s


def _fill_moved_into_segment(c):
    """s tokens of a fixed-length slab's fill moved into its first segment: T and T - fill_pad as
    they may be, the padded lengths not the layout of its seq_lens."""
    r = find_row(c, lambda r: r["source_index"][-1] < 0 and r["fill_pad"] > FIXED_ALIGN.s)
    _widen_first_segment(c, r, FIXED_ALIGN.s)
    for col in ("input_ids", "loss_mask"):
        c[col][r] = c[col][r][:-FIXED_ALIGN.s]
    c["cu_seqlens_padded"][r][-1] -= FIXED_ALIGN.s
    c["cp_offsets"][r][-1] = c["cu_seqlens_padded"][r][-1] // FIXED_ALIGN.cp
    c["fill_pad"][r] -= FIXED_ALIGN.s


def _figures(shard, fn):
    """`fn`'s edit re-signed down to the manifest's token counts (each shard's `tokens`, `loss_tokens`
    and `stats`, from the slabs' figures as the readers' open scan sums them): only the row's own
    figures against its layout are left to tell the lie."""
    def run(out):
        import pyarrow.parquet as pq
        _edit(shard, fn)(out)
        m = read_manifest(out)
        for s in m["shards"]:
            t = pq.read_table(os.path.join(out, s["file"]),
                              columns=["num_tokens", "layout_pad", "tail_pad", "fill_pad", "num_loss_tokens"])
            s["tokens"] = sum(int(t[c].to_numpy().sum()) for c in ("num_tokens", "layout_pad", "tail_pad", "fill_pad"))
            s["loss_tokens"] = int(t["num_loss_tokens"].to_numpy().sum())
        m["stats"]["physical_tokens"] = sum(s["tokens"] for s in m["shards"])
        m["stats"]["loss_tokens"] = sum(s["loss_tokens"] for s in m["shards"])
        save_manifest(out, m)
    return run


# S39-1: every per-slab figure FORMAT.md derives from the row (the padded lengths, `layout_pad`,
# `tail_pad`, `fill_pad` as layout.compute_layout gives them for its seq_lens; `num_tokens`,
# `num_loss_tokens` as its sums), each a lie re-signed: verify rejects them all, so every consumer
# refuses them (the standalone reader went by T - fill_pad alone and handed out an over-capacity slab)
ROW_FIGURES = {"figure:num_tokens": _figures(SHARD0, _plus("num_tokens", 1)),
               "figure:num_loss_tokens": _figures(SHARD0, _plus("num_loss_tokens", 1)),
               "figure:layout_pad": _figures(SHARD0, _plus("layout_pad", 4)),
               "figure:tail_pad": _figures(SHARD0, _plus("tail_pad", 4)),
               "figure:layout_pad-for-tail_pad": _figures(SHARD0, _layout_pad),
               "figure:fill_pad-without-fixed-length": _figures(SHARD0, _plus("fill_pad", ALIGN.t)),
               "figure:pads-inside-a-segment-as-fill_pad": _figures(SHARD0, _pad_as_fill),
               f"{FIXED}/figure:fill-moved-into-a-segment": _figures(SHARD1, _fill_moved_into_segment)}
CORRUPTIONS.update(ROW_FIGURES)


@pytest.mark.parametrize("consumer", [*(c for c in CONSUMERS if c != "train"), *ARROW])  # train: the dataset's
@pytest.mark.parametrize("corruption", list(ROW_FIGURES))
def test_every_consumer_refuses_a_slab_whose_figures_are_not_its_layout(corpus, corruption, consumer, tmp_path):
    get, results = corpus
    from packtool.verification.run import verify
    assert not verify(get(corruption), workers=1).ok
    kind, got = _result(results, get, consumer, corruption, str(tmp_path))
    assert kind == "refused", f"{consumer} read the damaged output ({corruption}) without a word"
    assert (SHARD1 if corruption.startswith(f"{FIXED}/") else SHARD0) in got, got


def _dp_ranks_unequal(c):
    c["dp_rank"][0] = 1 - c["dp_rank"][0]


def _dp_microbatch_twice(c):
    """A slab given the step and micro-batch of another slab of its rank: two slabs of one micro-batch."""
    r = next(r for r in range(1, len(c["step"])) if c["dp_rank"][r] == c["dp_rank"][0])
    c["step"][r], c["microbatch"][r] = c["step"][0], c["microbatch"][0]


def _dp_steps_back(c):
    """Two slabs of one rank swap (step, microbatch): the plan as a set unchanged, the on-disk order not."""
    r0 = 0
    r1 = max(r for r in range(len(c["step"])) if c["dp_rank"][r] == c["dp_rank"][r0] and c["step"][r] != c["step"][r0])
    for col in ("step", "microbatch"):
        c[col][r0], c[col][r1] = c[col][r1], c[col][r0]


def _slab0(col, value):
    def run(c):
        c[col][0] = value
    return run


def _steps_swapped(c):
    """Two slabs swap steps: each still its own step, 0..n-1 once, but not the one its slab_index says."""
    c["step"][0], c["step"][1] = c["step"][1], c["step"][0]


# verify's `dp` rules under a DP plan (--dp 2): the Megatron dataset follows the plan's steps and ranks;
# without one ("dp1:", dp=1) each slab is micro-batch 0 of its own step, numbered by slab_index (S44-7)
DP_DAMAGES = {"dp:ranks-unequal": _dp_ranks_unequal, "dp:microbatch-twice": _dp_microbatch_twice,
              "dp:steps-out-of-order": _dp_steps_back, "dp:microbatch-negative": _slab0("microbatch", -7),
              "dp1:step-huge": _slab0("step", 2**30), "dp1:steps-swapped": _steps_swapped,
              "dp1:microbatch-negative": _slab0("microbatch", -7), "dp1:microbatch-one": _slab0("microbatch", 1)}


@pytest.fixture(scope="session")
def dp_corpus(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("dp_corpus"))
    clean = {dp: write_pack(os.path.join(root, f"base{dp}"), LENGTHS, ALIGN, PackingConfig("bfd", overflow="split", dp=dp),
                            shard_tokens=8192, group_tokens=2048)[0] for dp in (1, 2)}

    def get(name):
        d = os.path.join(root, re.sub(r"[^a-z0-9]+", "-", name))
        if not os.path.isdir(d):
            shutil.copytree(clean[_dp_of(name)], d)
            if not name.startswith("clean"):
                _edit(SHARD0, DP_DAMAGES[name])(d)
        return d
    return get


def _dp_of(name: str) -> int:
    return 1 if name.startswith(("dp1:", "clean1")) else 2


def _dp_dataset(out, dp):
    from packtool.megatron.dataset import PackedSlabDataset
    ds = PackedSlabDataset(out, dp_rank=0, dp_size=dp, grad_accum=4, micro_batch_tokens=1024)
    return sum(st.real_tokens for st in ds.steps(max_steps=ds.steps_per_epoch()))


def _dp_hf(out, dp):
    from packtool.hf import SlabDataset
    ds = SlabDataset(out, rank=0, world_size=dp)
    return [ds[i]["input_ids"].tobytes() for i in range(len(ds))]


@pytest.mark.parametrize("consumer", ["megatron-dataset", "hf", "inspect"])
@pytest.mark.parametrize("damage", ["clean", "clean1", *DP_DAMAGES])
def test_every_consumer_refuses_a_broken_dp_plan(dp_corpus, damage, consumer, tmp_path):
    """The standalone reader reads a slab by shard and row and no DP field: nothing to refuse."""
    from packtool.verification.run import verify
    out = dp_corpus(damage)
    report = verify(out, workers=1)
    assert report.ok == damage.startswith("clean") and set(report.counts) <= {"dp"}, report.counts
    dp = _dp_of(damage)
    read = {"megatron-dataset": lambda o: _dp_dataset(o, dp), "hf": lambda o: _dp_hf(o, dp),
            "inspect": lambda o: _inspect(o, str(tmp_path))}[consumer]
    if damage.startswith("clean"):
        read(out)
        return
    with pytest.raises((PacktoolError, Refused)) as e:  # inspect: the CLI's one line
        read(out)
    assert SHARD0 in str(e.value) and any(w in str(e.value) for w in ("step", "rank", "microbatch")), str(e.value)


# a slab's per-segment lists that disagree on its segment count: inspect pairs seq_lens with
# source_index entry by entry, the coverage check source_index with chunk_index and source_offset
SEGMENT_COUNTS = ("segment_count:source_index:re-signed", "segment_count:chunk_index:re-signed",
                  "segment_count:source_offset:re-signed")


@pytest.mark.parametrize("consumer", list(CONSUMERS))
@pytest.mark.parametrize("corruption", SEGMENT_COUNTS)
def test_every_consumer_refuses_a_slab_whose_segment_lists_disagree(corpus, corruption, consumer, tmp_path):
    get, results = corpus
    kind, got = _consume(consumer, get(corruption), str(tmp_path))
    assert kind == "refused", f"{consumer} read the damaged output ({corruption}) without a word"
    assert consumer == "standalone-reader" or ("source_index" in got and SHARD0 in got), got


@pytest.mark.parametrize("column", ["source_index", "chunk_index", "source_offset"])
def test_verify_says_a_segment_list_of_the_wrong_length(corpus, column):
    """verify's `array_length`: the slab's list, named with its shard and row; exit 1."""
    from packtool.cli.app import app
    get, _ = corpus
    r = CliRunner().invoke(app, ["verify", get(f"segment_count:{column}:re-signed"), "--workers", "1", "--json"])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    d = json.loads(r.output)
    assert set(d["counts"]) == {"array_length"}, d["counts"]  # no follow-on of its own skipping (a note)
    said = [p for p in d["problems"] if p["check"] == "array_length"]
    assert said and all((p["shard"], p["row"]) == (SHARD0, 0) for p in said), said
    assert {p["message"].split()[0] for p in said} == ({column} if column != "source_index" else
                                                       {"source_index", "chunk_index"}), said


@pytest.mark.parametrize("corruption", [c for c in CORRUPTIONS if c.startswith("lie:")])
def test_verify_says_a_lying_manifest_in_one_problem_with_exit_1(corpus, corruption):
    """verify lists problems (exit 1) where the consumers stop (exit 2): never an internal error,
    a RecursionError or an allocation sized by the lie."""
    from packtool.cli.app import app
    get, _ = corpus
    r = CliRunner().invoke(app, ["verify", get(corruption), "--workers", "1", "--json"])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    d = json.loads(r.output)
    assert not d["ok"] and set(d["counts"]) <= {"manifest", "manifest_stats", "shard_counts", "token_id_range"}, d


@pytest.mark.parametrize("corruption", list(MANIFEST_TEXT_EDITS))
def test_verify_says_what_makes_the_manifest_text_unreadable(corpus, corruption):
    """verify rejects it (exit 1) saying why: the key given twice, or the BOM (it said "Expecting
    value: line 1 column 1", which names neither)."""
    from packtool.cli.app import app
    get, _ = corpus
    r = CliRunner().invoke(app, ["verify", get(corruption), "--workers", "1", "--json"])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    said = " ".join(p["message"] for p in json.loads(r.output)["problems"])
    assert ("byte order mark" in said) if corruption.endswith("bom") else ("appears twice" in said), said


@pytest.mark.parametrize("alg", ["xxh3_128", "sha256"])
def test_a_readers_checksum_message_shows_hashes_that_differ(tmp_path, alg):
    """S30-12's twin in the readers' check: both digests were cut to 16 digits, so an entry
    changed in its last digit read as two equal prefixes."""
    from packtool.slabs.check import check_checksum
    from packtool.slabs.format import SlabManifest
    out, _ = write_pack(str(tmp_path), [40, 70, 90, 120], Alignment(capacity=256))
    said = edit_checksum(out, 0, alg)
    with pytest.raises(PacktoolError) as e:
        check_checksum(SlabManifest.read(out), 0)
    found, shown = str(e.value).split(f"{alg} is ", 1)[1].split(": the file")[0].split(", the manifest says ")
    assert found != shown and shown == said, str(e.value)


@pytest.mark.parametrize("consumer", [*(c for c in CONSUMERS if c != "train"), *ARROW])  # train: the dataset's
@pytest.mark.parametrize("corruption", list(NULLS))
def test_every_consumer_refuses_a_null_naming_shard_row_and_column(corpus, corruption, consumer, tmp_path):
    """A null token id read back as NaN ("cannot convert float NaN to integer", S31-1): refused
    in one line naming the shard, row and column, however deep in the slab it sits."""
    get, results = corpus
    kind, got = _consume(consumer, get(corruption), str(tmp_path))
    assert kind == "refused", f"{consumer} read the damaged output ({corruption}) without a word"
    col = corruption.split(":")[1]
    assert consumer == "standalone-reader" or (SHARD0 in got and "row 0" in got and repr(col) in got), got


@pytest.mark.parametrize("corruption", list(NULLS))
def test_verify_names_the_null(corpus, corruption):
    from packtool.cli.app import app
    get, _ = corpus
    r = CliRunner().invoke(app, ["verify", get(corruption), "--workers", "1", "--json"])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    d = json.loads(r.output)
    said = [p for p in d["problems"] if "null" in p["message"]]
    assert said and said[0]["shard"] == SHARD0 and said[0]["row"] == 0, said
    col = corruption.split(":")[1]
    assert repr(col) in said[0]["message"], said
    assert d["counts"] == {"schema": 1}, d["counts"]  # what the null leaves out said in a note: no follow-on lines


# --- side columns (FORMAT.md "Side columns"): a pack with `lp` (float32) and `sup` (K int32, support)

SIDE_DAMAGES = ("side_null", "side_null_row", "side_null_support_row", "side_null_support_value", "side_length",
                "side_fill_float", "side_fill_negative_zero", "side_fill_rows")  # a manifest fill: test_side_fill_rule
# verify's alone (FORMAT.md, "What a reader checks"): a compiled pass over every token's K candidates
VERIFY_ONLY = ("support_order", "support_absent", "support_twice", "support_empty_on_loss")


def _side_entry(name, key, value):
    """Side column `name`'s manifest entry with `key` edited (the shards as packed)."""
    def edit(out):
        m = read_manifest(out)
        next(c for c in m["side_columns"] if c["name"] == name)[key] = value
        save_manifest(out, m)
    return edit


def _renamed_both(out):
    """`lp` renamed in the manifest and in every shard, re-signed: consistent but for the entry
    the writer recorded in the column's field."""
    import pyarrow.parquet as pq
    from slab_support import resign
    _side_entry("lp", "name", "lp2")(out)
    for s in read_manifest(out)["shards"]:
        path = os.path.join(out, s["file"])
        t = pq.read_table(path)
        pq.write_table(t.rename_columns(["lp2" if n == "lp" else n for n in t.column_names]), path)
        resign(out, s["file"])


# S32 (stranger32 cases1 'support_to_values'): every edit of a side column's manifest entry.
# The kind (and a rename of both the entry and the column) is no part of the Arrow type: held to
# the entry the writer recorded in the column's field (slabs.schema.side_field_problem)
SIDE_ENTRY = {"side_entry:kind-support-to-values": _side_entry("sup", "kind", "values"),
              "side_entry:kind-values-to-support": _side_entry("lp", "kind", "support"),
              "side_entry:name": _side_entry("lp", "name", "lp2"),
              "side_entry:name-and-column": _renamed_both,
              "side_entry:width": _side_entry("sup", "width", 4),
              "side_entry:dtype": _side_entry("lp", "dtype", "float64"),
              "side_entry:fill": _side_entry("lp", "fill", 5.0),
              "side_entry:support-fill": _side_entry("sup", "fill", 0),
              # S47B-3: keys packtool never writes in that form (`row` only true, only on width 1:
              # side.SideColumn.to_dict) or at all: the standalone reader refused each (the field's
              # record differs), verify and packtool's readers read them (a key taken out: fields.py)
              "side_entry:row-false": _side_entry("lp", "row", False),
              "side_entry:row-true-wide": _side_entry("sup", "row", True),
              "side_entry:unknown-key": _side_entry("lp", "note", "x")}


def _nonfinite(values, counted=None, groups=1):
    """`values` (NaN / inf) written into `lp` on real tokens of the slabs, one a slab from the first
    with a pad, re-signed, the shard cut into `groups` row groups; `counted`: the manifest's
    stats.side_nan / side_inf of `lp` set to it (the input's count, as if the input held them)."""
    def run(out):
        import pyarrow.parquet as pq
        from side_support import pad_and_real, row_with_pad, set_column
        from slab_support import resign
        shard = read_manifest(out)["shards"][0]["file"]
        path = os.path.join(out, shard)
        t = pq.read_table(path)
        lp, r = t.column("lp").to_pylist(), row_with_pad(t)
        assert t.num_rows - r >= 2 * groups
        for k, v in enumerate(values):  # one slab; across groups: one a slab, the last in the last group
            row = r + k * (t.num_rows - r - 1) if groups > 1 else r
            lp[row][pad_and_real(t, row)[1] + (k if groups == 1 else 0)] = v
        pq.write_table(set_column(t, "lp", lp), path, compression="zstd", row_group_size=-(-t.num_rows // groups))
        resign(out, shard)
        if counted is not None:
            m = read_manifest(out)
            m["stats"]["side_nan"]["lp"], m["stats"]["side_inf"]["lp"] = counted
            save_manifest(out, m)
    return run


# S40-3: a NaN / inf in a float side column beyond the manifest's count of what the input held
# (stats.side_nan / side_inf): every consumer refuses it, as verify's side_nonfinite does
NONFINITE = {"nonfinite:nan-input-none": _nonfinite([float("nan")]),
             "nonfinite:inf-input-none": _nonfinite([float("-inf")]),
             "nonfinite:nan-above-count": _nonfinite([float("nan")] * 2, counted=(1, 0)),
             "nonfinite:inf-above-count": _nonfinite([float("inf")] * 3, counted=(0, 2)),
             # one in each of two row groups, each within the count: a reader that decodes both adds them up
             "nonfinite:nan-above-count-across-groups": _nonfinite([float("nan")] * 2, counted=(1, 0), groups=2)}
# what the input held (pack kept it as read, verify notes it): read by every consumer
NONFINITE_KEPT = {"nonfinite:nan-as-counted": _nonfinite([float("nan")], counted=(1, 0)),
                  "nonfinite:both-as-counted-across-groups": _nonfinite([float("nan"), float("inf")], counted=(1, 1),
                                                                         groups=2)}


def _alignment_lies():
    """S45B-1: each alignment field of the side corpus's manifest (tp=2 cp=2 sp on, packtool) edited
    alone to a value whose s, t or usable are not the recorded ones (s, t, usable left as packed):
    verify rejects each; every consumer, the standalone reader too, must refuse it, or a trainer that
    reads tp, fp8 or the convention from the manifest it "checked" is told a layout the slabs lack."""
    from packtool.align import CONVENTIONS, FP8_RECIPES
    packed = dict(tp=2, cp=2, sp=True, fp8="none", capacity=256, fixed_length=None, convention="packtool")
    derived = (lambda a: (a.s, a.t, a.usable))
    values = {"tp": [1, 4, 8], "cp": [1, 4], "sp": [False], "fp8": FP8_RECIPES, "convention": CONVENTIONS,
              "capacity": [255, 512], "fixed_length": [128]}
    lies = {f"alignment-lie:{k}={v}": _set(("config", "alignment", k), v) for k, vs in values.items() for v in vs
            if derived(Alignment(**{**packed, k: v})) != derived(Alignment(**packed))}
    # every field has a lie but sp: off gives tp=2 cp=2 the same s=4, t=lcm(4, 2)=4 (a layout the slabs have)
    assert {k.split(":")[1].split("=")[0] for k in lies} == set(values) - {"sp"}, lies
    return lies


ALIGNMENT_LIES = _alignment_lies()


@pytest.fixture(scope="session")
def side_corpus(tmp_path_factory):
    from side_support import plant_side, side_rows, write_input
    from slab_support import resign
    from packtool.packing import pack
    from packtool.tokenize.config import TokenizeConfig
    root = tmp_path_factory.mktemp("side_corpus")
    ids, lp, sup = side_rows(n=80, seed=3)
    clean = str(root / "clean")
    pack([write_input(str(root / "in.parquet"), ids, lp, sup)], Alignment(tp=2, cp=2, capacity=256),
         PackingConfig("bfd", overflow="split"),
         TokenizeConfig(shape="tokens", side_columns=("lp",), support_columns=("sup",)), output=clean,
         cache_dir=str(root / "cache"))
    made = {"clean": clean}

    def get(name):
        import pyarrow.parquet as pq
        edits = {**SIDE_ENTRY, **NONFINITE, **NONFINITE_KEPT, **ALIGNMENT_LIES}
        if name in edits and name not in made:
            d = str(root / re.sub(r"[^a-z0-9]+", "-", name))
            shutil.copytree(clean, d)
            edits[name](d)
            made[name] = d
        if name not in made:
            d = str(root / name)
            shutil.copytree(clean, d)
            shard = read_manifest(d)["shards"][0]["file"]
            t = pq.read_table(os.path.join(d, shard))
            pq.write_table(plant_side(t, name), os.path.join(d, shard), compression="zstd")
            resign(d, shard)
            made[name] = d
        return made[name]
    return get


@pytest.mark.parametrize("consumer", ["megatron-dataset", "hf", "inspect", "standalone-reader"])
@pytest.mark.parametrize("damage", SIDE_DAMAGES)
def test_every_consumer_refuses_side_column_damage_verify_rejects(side_corpus, damage, consumer, tmp_path):
    """S31-9: a null advantage reached the batch as NaN, a pad's value or the manifest's fill
    edited went through every consumer that verify rejects."""
    kind, got = _consume(consumer, side_corpus("clean"), str(tmp_path))
    assert kind == "ok", got
    kind, got = _consume(consumer, side_corpus(damage), str(tmp_path))
    assert kind == "refused", f"{consumer} read the damaged output ({damage}) without a word"
    assert consumer == "standalone-reader" or ("row" in got and ("'lp'" in got or "'sup'" in got)), got


@pytest.mark.parametrize("consumer", ["megatron-dataset", "hf", "hf-to_hf", "inspect", "standalone-reader"])
@pytest.mark.parametrize("damage", list(NONFINITE))
def test_every_consumer_refuses_nonfinite_side_values_beyond_the_manifest(side_corpus, damage, consumer, tmp_path):
    """S40-3: a NaN written into a side column after pack (re-signed) reached the loss through every
    consumer but verify. The standalone reader reads one slab: it holds each slab to the whole
    output's count, not the sum across slabs (FORMAT.md)."""
    if consumer == "standalone-reader" and damage.endswith("across-groups"):
        pytest.skip("a reader of one slab at a time holds no sum across slabs (FORMAT.md)")
    kind, got = _consume(consumer, side_corpus(damage), str(tmp_path))
    assert kind == "refused", f"{consumer} read the damaged output ({damage}) without a word"
    if consumer != "standalone-reader":
        word = "NaN" if "nan" in damage else "inf"
        assert "'lp'" in got and word in got and "stats.side_" in got and "packtool verify" in got, got
        assert SHARD0 in got and " row " in got and "position" in got, got


@pytest.mark.parametrize("consumer", ["megatron-dataset", "hf", "hf-to_hf", "inspect", "standalone-reader"])
@pytest.mark.parametrize("lie", list(ALIGNMENT_LIES))
def test_every_consumer_refuses_alignment_fields_that_do_not_give_the_recorded_multiples(side_corpus, lie,
                                                                                          consumer, tmp_path):
    from packtool.verification.run import verify
    rep = verify(side_corpus(lie), workers=1)
    assert not rep.ok and "the manifest was edited" in str(rep.to_dict()), rep.counts
    kind, got = _consume(consumer, side_corpus(lie), str(tmp_path))
    assert kind == "refused", f"{consumer} read the output whose manifest lies ({lie}) without a word"
    assert "config.alignment" in got, got


@pytest.mark.parametrize("consumer", ["megatron-dataset", "hf", "inspect", "standalone-reader"])
@pytest.mark.parametrize("kept", list(NONFINITE_KEPT))
def test_every_consumer_reads_the_nonfinite_values_the_input_held(side_corpus, kept, consumer, tmp_path):
    kind, got = _consume(consumer, side_corpus(kept), str(tmp_path))
    assert kind == "ok", got


@pytest.mark.parametrize("damage", [*NONFINITE, *NONFINITE_KEPT])
def test_verify_holds_nonfinite_side_values_to_the_manifest(side_corpus, damage):
    """verify fails what every reader refuses and takes what they read; its note says pack warned
    only of what the input held (S40-3: it said so of a NaN the manifest counts 0)."""
    from packtool.cli.app import app
    r = CliRunner().invoke(app, ["verify", side_corpus(damage), "--workers", "1", "--json"])
    d = json.loads(r.output)
    notes = " ".join(d.get("notes", []))
    if damage in NONFINITE:
        assert r.exit_code == 1 and set(d["counts"]) == {"side_nonfinite"}, r.output
    else:
        assert r.exit_code == 0 and "pack warned" in notes, r.output
    if damage.endswith("input-none"):
        assert "pack warned" not in notes, notes


@pytest.mark.parametrize("consumer", ["megatron-dataset", "hf", "inspect", "standalone-reader"])
@pytest.mark.parametrize("edit", list(SIDE_ENTRY))
def test_every_consumer_refuses_an_edited_side_column_entry(side_corpus, edit, consumer, tmp_path):
    kind, got = _consume(consumer, side_corpus(edit), str(tmp_path))
    assert kind == "refused", f"{consumer} read the output with an edited side column entry ({edit}) without a word"
    assert consumer == "standalone-reader" or ("'lp" in got or "'sup'" in got), got


@pytest.mark.parametrize("edit", list(SIDE_ENTRY))
def test_verify_rejects_an_edited_side_column_entry_with_exit_1(side_corpus, edit):
    from packtool.cli.app import app
    r = CliRunner().invoke(app, ["verify", side_corpus(edit), "--workers", "1", "--json"])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    said = [p["message"] for p in json.loads(r.output)["problems"]]
    assert any("'lp" in m or "'sup'" in m for m in said), said


@pytest.mark.parametrize("damage", SIDE_DAMAGES + VERIFY_ONLY)
def test_verify_rejects_side_column_damage_with_exit_1(side_corpus, damage):
    """S31-10: never exit 3 (a null row crashed the coverage check once its batch was skipped)."""
    from packtool.cli.app import app
    r = CliRunner().invoke(app, ["verify", side_corpus(damage), "--workers", "1", "--json"])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert all(k.startswith("side_") for k in json.loads(r.output)["counts"]), r.output


# --- a listed shard that is a link (issue 23 class 2, S35): one rule, slabs/open_rules.linked_shard,
# asked by every reader and by verify. A shard is a file of the output folder: a symbolic link to a
# regular file inside it reads that file (harmless, verify notes it); a link out of the folder or to
# nothing is refused. A link to another listed shard, symbolic or hard, holds that shard's bytes:
# its size and checksum refuse it. A hard link is the file itself (checked like any shard).

def _moved_and_linked(where, link):
    """SHARD1 moved to `where(out)` and a symbolic link `link(out, target)` put in its place."""
    def run(out):
        target = where(out)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.replace(os.path.join(out, SHARD1), target)
        os.symlink(link(out, target), os.path.join(out, SHARD1))
    return run


def _hard_linked_outside(out):
    os.makedirs(out + "-kept", exist_ok=True)
    os.link(os.path.join(out, SHARD1), os.path.join(out + "-kept", SHARD1))


def _hard_linked_to_shard0(out):
    os.remove(os.path.join(out, SHARD1))
    os.link(os.path.join(out, SHARD0), os.path.join(out, SHARD1))


def _symlinked_to_shard0(out):
    os.remove(os.path.join(out, SHARD1))
    os.symlink(SHARD0, os.path.join(out, SHARD1))


LINKED = {  # name -> (the damage, whether every consumer and verify take it)
    "link:inside-copy": (_moved_and_linked(lambda o: os.path.join(o, f".{SHARD1}.kept"), lambda o, t: os.path.basename(t)),
                         True),
    "link:outside-absolute": (_moved_and_linked(lambda o: os.path.join(o + "-kept", SHARD1), lambda o, t: t), False),
    "link:outside-relative": (_moved_and_linked(lambda o: os.path.join(o + "-kept", SHARD1),
                                                lambda o, t: os.path.relpath(t, o)), False),
    "link:dangling": (_moved_and_linked(lambda o: os.path.join(o + "-gone", SHARD1), lambda o, t: os.remove(t) or t),
                      False),
    "link:to-another-shard": (_symlinked_to_shard0, False),
    "hardlink:to-another-shard": (_hard_linked_to_shard0, False),
    "hardlink:outside-copy": (_hard_linked_outside, True),
}
LINKED_TAKEN = {k: taken for k, (_, taken) in LINKED.items()}
LINKED = {k: fn for k, (fn, _) in LINKED.items()}


def _slab_reader(out):
    """The standalone `SlabReader` (the index's open checks, then every row by number)."""
    from packtool.slabs.format import SlabManifest
    from packtool.slabs.reader import SlabIndex, SlabReader
    sm = SlabManifest.read(out)
    reader = SlabReader(sm, SlabIndex.build(sm))
    return [(r.input_ids.tobytes(), r.loss_mask.tobytes(), r.seg_padded.tobytes())
            for r in map(reader.row, range(len(reader.index)))]


def _verify(out):
    from packtool.verification.run import verify
    report = verify(out, workers=1)
    if not report.ok:
        raise PacktoolError(" | ".join(p.message for p in report.problems))
    return [n for n in report.notes if "symbolic link" in n]


# the standalone SlabReader and verify, beside the consumers above: each refusal a PacktoolError line
BY_RULE = {"slab-reader": _slab_reader, "verify": _verify}


def _take(consumer, out, tmp):
    if consumer not in BY_RULE:
        return _consume(consumer, out, tmp)
    try:
        return "ok", BY_RULE[consumer](out)
    except PacktoolError as e:
        assert "\n" not in str(e)
        return "refused", str(e)


@pytest.mark.parametrize("consumer", [*CONSUMERS, *ARROW, *BY_RULE])
@pytest.mark.parametrize("kind", list(LINKED))
def test_every_consumer_and_verify_agree_on_a_linked_shard(corpus, kind, consumer, tmp_path):
    """Each consumer takes exactly what verify takes, and what it hands on is then the clean
    output's; a refusal is one line naming the shard (and, for a symbolic link, saying so)."""
    get, results = corpus
    if consumer == "train" and LINKED_TAKEN[kind]:
        consumer = "megatron-dataset"  # train reads through the dataset: a CPU run would add minutes
    kind_got, got = _take(consumer, get(kind), str(tmp_path))
    if not LINKED_TAKEN[kind]:
        assert kind_got == "refused", f"{consumer} read an output whose shard is {kind} without a word: {got}"
        if consumer != "standalone-reader":
            assert SHARD1 in got, got
            if kind.startswith("link:") and kind != "link:to-another-shard":
                assert "symbolic link" in got, got
        return
    assert kind_got == "ok", got
    clean = _take(consumer, get("clean"), str(tmp_path))[1]
    if consumer == "verify":  # a note names the link inside the folder; nothing else differs
        assert clean == [] and len(got) == (kind == "link:inside-copy"), got
    else:
        assert got == clean, f"{consumer} read an output whose shard is {kind} as something else"
