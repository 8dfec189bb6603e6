"""Inputs on object storage (s3:// on the in-process endpoint): one object, a prefix, a glob, in
every readable format incl. compressed JSON Lines, give the shards of the same files packed
from local disk."""
from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from conftest import GPT2, GSM8K, PEPS, TASKMASTER

from packtool.align import Alignment
from packtool.errors import PacktoolInputError
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.storage import locate
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.readers import resolve_inputs

TOK = TokenizeConfig(tokenizer=GPT2, prompt_field="question", response_field="answer")


def _local_files(tmp_path) -> dict[str, str]:
    """The same GSM8K rows as JSON Lines, gzip/zstd JSON Lines, Parquet and Arrow IPC."""
    t = pa.json.read_json(GSM8K) if hasattr(pa, "json") else None
    import pyarrow.json as pj
    t = pj.read_json(GSM8K)
    out = {"a.jsonl": GSM8K}
    pq.write_table(t, tmp_path / "b.parquet")
    feather.write_feather(t, str(tmp_path / "c.arrow"))
    import gzip
    (tmp_path / "d.jsonl.gz").write_bytes(gzip.compress(open(GSM8K, "rb").read()))
    with pa.CompressedOutputStream(str(tmp_path / "e.jsonl.zst"), "zstd") as f:
        f.write(open(GSM8K, "rb").read())
    out.update({n: str(tmp_path / n) for n in ("b.parquet", "c.arrow", "d.jsonl.gz", "e.jsonl.zst")})
    return out


def _upload(files: dict[str, str], prefix: str) -> None:
    for name, path in files.items():
        locate(f"{prefix}/{name}").write_bytes(open(path, "rb").read())


def _shards(out: str) -> list[bytes]:
    from packtool.slabs.format import SlabManifest
    m = SlabManifest.read(out)
    return [locate(m.shard_path(i)).read_bytes() for i in range(len(m.shards))]


@pytest.mark.parametrize("name", ["a.jsonl", "b.parquet", "c.arrow", "d.jsonl.gz", "e.jsonl.zst"])
def test_each_format_from_the_store_packs_like_the_local_file(s3, tmp_path, cache_dir, name):
    files = _local_files(tmp_path)
    _upload({name: files[name]}, f"{s3}/in")
    args = (Alignment(capacity=1024), PackingConfig("bfd", overflow="split"), TOK)
    pack([files[name]], *args, output=str(tmp_path / "local"), cache_dir=cache_dir)
    res = pack([f"{s3}/in/{name}"], *args, output=str(tmp_path / "remote"), cache_dir=cache_dir)
    assert res.summary.sequences == 200
    assert _shards(str(tmp_path / "remote")) == _shards(str(tmp_path / "local"))


def test_prefix_and_glob_expand_in_order_hidden_names_left_out(s3, tmp_path):
    files = _local_files(tmp_path)
    _upload(files, f"{s3}/in")
    locate(f"{s3}/in/_SUCCESS").write_bytes(b"")
    locate(f"{s3}/in/README.md").write_bytes(b"notes")
    got = [f.path for f in resolve_inputs([f"{s3}/in"])]
    assert got == [f"{s3}/in/{n}" for n in sorted(files)]
    assert [f.path for f in resolve_inputs([f"{s3}/in/*.jsonl*"])] == [f"{s3}/in/{n}" for n in
                                                                      ("a.jsonl", "d.jsonl.gz", "e.jsonl.zst")]
    with pytest.raises(PacktoolInputError, match="no such object or prefix"):
        resolve_inputs([f"{s3}/missing"])
    with pytest.raises(PacktoolInputError, match="glob matched no objects"):
        resolve_inputs([f"{s3}/in/*.csv"])
    with pytest.raises(PacktoolInputError, match="more than once"):
        resolve_inputs([f"{s3}/in/a.jsonl", f"{s3}/in/*.jsonl"])


def test_store_in_and_store_out_text_inputs(s3, tmp_path, cache_dir):
    _upload({"p.jsonl.gz": PEPS, "t.jsonl.gz": TASKMASTER}, f"{s3}/raw")
    args = (Alignment(capacity=2048), PackingConfig("bfd", overflow="split"), TokenizeConfig(tokenizer=GPT2, shape="text",
                                                                                            text_field="text"))
    loc = [PEPS]
    pack(loc, *args, output=str(tmp_path / "l"), cache_dir=cache_dir)
    pack([f"{s3}/raw/p.jsonl.gz"], *args, output=f"{s3}/packed", cache_dir=cache_dir)
    assert _shards(f"{s3}/packed") == _shards(str(tmp_path / "l"))
    man = locate(f"{s3}/packed/.manifest.json").read_bytes().decode()
    assert f"{s3}/raw/p.jsonl.gz" in man and "SECRET" not in man and os.environ["AWS_SECRET_ACCESS_KEY"] not in man


def test_an_object_replaced_while_it_is_read_is_refused_without_a_third_download(s3, tmp_path, cache_dir, monkeypatch):
    """The cache key hashes the object once (sha256 for cache.json in the same pass); after the
    read, a changed (size, mtime) re-hashes and refuses, an unchanged one costs one HEAD."""
    import packtool.tokenize.checksum as ck
    import packtool.tokenize.hf_input as hi
    import packtool.tokenize.request as rq
    uri = f"{s3}/in/a.jsonl"
    locate(uri).write_bytes(open(GSM8K, "rb").read())
    reads = []
    orig_fast, orig_again = ck.fast_digest, hi.digest_again
    monkeypatch.setattr(rq, "fast_digest", lambda p: reads.append(p) or orig_fast(p))
    args = (Alignment(capacity=1024), PackingConfig("bfd", overflow="split"), TOK)
    pack([uri], *args, output=str(tmp_path / "o1"), cache_dir=cache_dir)
    assert reads == [uri]  # hashed once; the recheck took the stat

    def replaced(p):
        locate(p).write_bytes(open(GSM8K, "rb").read() + b'{"question": "q", "answer": "a"}\n')
        return orig_again(p)
    monkeypatch.setattr(hi, "digest_again", replaced)
    with pytest.raises(PacktoolInputError, match="changed while it was being tokenized"):
        pack([uri], *args, output=str(tmp_path / "o2"), cache_dir=str(tmp_path / "c2"))


def test_an_object_replaced_by_one_of_its_size_in_the_same_second_is_hashed_again(s3, monkeypatch):
    """S49A-1: the recheck after tokenizing compared the object's (size, mtime); a store's mtime has
    one-second resolution, so an object replaced by another of its size within the second it was
    written passed as unchanged (a race a writer refreshing `latest.jsonl` met), and the cache entry
    kept the new version's rows under the old version's key, served to later runs. The version
    hashed is held by its ETag now. The second's resolution is made exact here (file_stat gives the
    same (size, mtime) for both versions), so the case does not hang on timing."""
    import packtool.storage.paths as paths
    import packtool.tokenize.checksum as ck
    uri = f"{s3}/in/a.jsonl"
    rows = b"".join(b'{"question": "alpha %03d", "answer": "alpha"}\n' % i for i in range(50))
    other = rows.replace(b"alpha", b"omega")
    one_second = lambda p: (len(rows), 1796451548000000000)  # noqa: E731
    monkeypatch.setattr(paths, "file_stat", one_second)
    monkeypatch.setattr(ck, "file_stat", one_second, raising=False)  # where the check asked it before
    locate(uri).write_bytes(rows)
    hashed = ck.fast_digest(uri)
    locate(uri).write_bytes(other)
    import xxhash
    assert hashed == xxhash.xxh3_128_hexdigest(rows)
    assert ck.digest_again(uri) == xxhash.xxh3_128_hexdigest(other)  # not the first version's digest
    assert ck.digest_again(uri) == xxhash.xxh3_128_hexdigest(other)
