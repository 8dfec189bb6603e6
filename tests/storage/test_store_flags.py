"""Stranger 35 S35-7/8/13: every path flag and argument of every command given an object-store
URI is checked once, before the work, in one line naming the flag (cli.store_flags): a place
that may lie on a store is refused when its URI names no bucket (`-o s3://` was `s3:: it holds
sub-prefixes: kt/`, `--cache-dir s3://` pyarrow's "Path cannot start with a separator") or a
bucket that does not exist (a cache on one failed once every input was tokenized); every
local-only path says it reads or writes a local file or folder (`plan --lengths s3://...` said
"no such file" of an object that may exist). The library meets the same rules where the
argument is used."""
from __future__ import annotations

import os
import uuid

import numpy as np
import pytest
from conftest import GPT2, GSM8K, gsm8k_packed
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.cli.flags import FLAG_OF, PATH_PARAMS
from packtool.cli.store_flags import LOCAL_WRITES, STORE_PARAMS

runner = CliRunner()


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    """An input, a packed output of it, a lengths file."""
    d = tmp_path_factory.mktemp("storeflags")
    np.save(d / "l.npy", np.array([5, 7, 9], dtype=np.int64))
    gsm8k_packed(d, 10, "in.jsonl", "-o", str(d / "packed"), "--cache-dir", str(d / "cache"))
    return d


def _argv(d, command: str, param: str, uri: str) -> list[str]:
    """`command` run with `uri` as `param`, its other arguments good ones."""
    inp, packed, cache = str(d / "in.jsonl"), str(d / "packed"), str(d / "cache")
    flag = {"directory": None, "data_dir": None, "inputs": None, "plan_file": "--plan"}.get(param, FLAG_OF.get(param))
    given = {param: uri}
    if command == "plan":
        base = ["plan", "--lengths", given.get("lengths", str(d / "l.npy")), "-C", "1024"]
        return base + (["-o", uri] if param == "output" else [])
    if command == "pack":
        base = ["pack", given.get("inputs", inp), "--tokenizer", given.get("tokenizer", GPT2), "-C", "1024", "-q",
                "-o", given.get("output", str(d / "new-out")), "--cache-dir", given.get("cache_dir", cache)]
        return base + ([flag, uri] if param not in ("inputs", "output", "cache_dir", "tokenizer") else [])
    if command == "inspect":
        return ["inspect", uri] if param == "directory" else \
            ["inspect", packed, "--html", uri] if param == "html" else ["inspect", flag, uri, "-C", "1024"]
    if command == "verify":
        return ["verify", given.get("directory", packed), "--source", given.get("source", inp), "-q",
                "--cache-dir", given.get("cache_dir", cache)] + \
            ([flag, uri] if param in ("tokenizer", "chat_template") else [])
    assert command == "train"
    return ["train", given.get("data_dir", packed), "--device", "cpu", "--steps", "1"] + \
        ([] if param == "data_dir" else [flag, uri])


CASES = [(c, p) for c, ps in sorted(PATH_PARAMS.items()) for p in sorted(ps)]


def test_every_store_place_is_a_path_parameter():
    """A parameter renamed in flags.PATH_PARAMS and not here would lose its store rule."""
    for command, params in {**STORE_PARAMS, **LOCAL_WRITES}.items():
        assert params <= PATH_PARAMS[command], (command, params)


@pytest.mark.parametrize("command,param", CASES, ids=[f"{c}-{p}" for c, p in CASES])
def test_a_uri_in_any_path_flag_is_one_line_before_the_work(place, s3, tmp_path, monkeypatch, command, param):
    """With a bucket in the account (S35-8's `kt/`): a store place given `s3://` names no bucket;
    a local-only one given an object's URI says it reads or writes a local file or folder."""
    monkeypatch.chdir(tmp_path)  # a URI taken for a path would make a folder `s3:` here
    monkeypatch.setenv("PACKTOOL_CACHE_DIR", str(tmp_path / "default-cache"))
    store = param in STORE_PARAMS.get(command, ())
    uri = "s3://" if store else f"{s3}/in/thing.npy"
    r = runner.invoke(app, _argv(place, command, param, uri))
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), r.output
    named = {"directory": "DIR", "data_dir": "DATA_DIR", "plan_file": "--plan"}.get(param, FLAG_OF.get(param))
    assert named in lines[0], lines[0]
    if store:
        assert "names no bucket" in lines[0] and "kt/" not in lines[0] and "s3::" not in lines[0], lines[0]
    else:
        verb = "writes" if param in LOCAL_WRITES.get(command, ()) else "reads"
        assert f"{verb} a local" in lines[0], lines[0]
    assert not os.path.lexists(tmp_path / "s3:") and not os.path.lexists(place / "new-out")


@pytest.mark.parametrize("command,param", [(c, p) for c, ps in sorted(STORE_PARAMS.items()) for p in sorted(ps)])
def test_a_missing_bucket_is_named_with_its_flag(place, s3, tmp_path, monkeypatch, command, param):
    """S35-7: a bucket that does not exist, for every place that may lie on a store, is said before
    the work (a cache there was found only after every input was tokenized)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PACKTOOL_CACHE_DIR", str(tmp_path / "default-cache"))
    import packtool.tokenize.pipeline as pl
    monkeypatch.setattr(pl, "_build", lambda *a, **k: pytest.fail("tokenized before the store was checked"))
    bucket = f"no-such-{uuid.uuid4().hex[:12]}"
    r = runner.invoke(app, _argv(place, command, param, f"s3://{bucket}/x"))
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.exit_code == 2 and len(lines) == 1, r.output
    named = {"directory": "DIR", "data_dir": "DATA_DIR"}.get(param, FLAG_OF.get(param))
    assert f"bucket {bucket} does not exist" in lines[0] and named in lines[0], lines[0]


def test_a_cache_on_the_store_is_probed_once_before_tokenizing(s3, tmp_path, monkeypatch):
    """The library: a missing bucket under `cache_dir=` is refused before any row is tokenized; a
    good prefix takes the probe, which leaves nothing there; PACKTOOL_CACHE_DIR (the local root
    that holds a store cache's mirror) is never a URI."""
    from packtool.errors import PacktoolCacheError
    from packtool.storage import locate
    from packtool.tokenize import TokenizeConfig, tokenize_to_cache
    import packtool.storage as storage
    import packtool.storage.probe as probe
    monkeypatch.setenv("PACKTOOL_CACHE_DIR", str(tmp_path / "local"))
    cfg = TokenizeConfig(tokenizer=GPT2, prompt_field="question", response_field="answer")
    import packtool.tokenize.pipeline as pl
    built = []
    orig = pl._build
    monkeypatch.setattr(pl, "_build", lambda *a, **k: built.append(1) or orig(*a, **k))
    with pytest.raises(PacktoolCacheError, match="bucket no-such-bkt-s35 does not exist.*cache_dir"):
        tokenize_to_cache([GSM8K], cfg, cache_dir="s3://no-such-bkt-s35/c")
    with pytest.raises(PacktoolCacheError, match="names no bucket"):
        tokenize_to_cache([GSM8K], cfg, cache_dir="s3://")
    assert built == []
    puts = []
    monkeypatch.setattr(probe, "_TAKES", set())
    real = storage.Location.delete
    monkeypatch.setattr(storage.Location, "delete", lambda self: puts.append(self.name) or real(self))
    tokenize_to_cache([GSM8K], cfg, cache_dir=f"{s3}/c")  # checked by every entry on the way: probed once
    assert built == [1] and [n for n in puts if n.startswith(storage.PROBE_TAG)].__len__() == 1
    assert not [i for i in locate(f"{s3}/c").list() if storage.PROBE_TAG in i.path]
    monkeypatch.setenv("PACKTOOL_CACHE_DIR", f"{s3}/c")
    with pytest.raises(PacktoolCacheError, match="PACKTOOL_CACHE_DIR=.* is a URI"):
        tokenize_to_cache([GSM8K], cfg)


def test_a_store_reason_is_cut_at_a_word():
    """S35-7: the AWS text was cut mid-word ("The spe")."""
    from packtool.storage.failures import _why
    text = _why(OSError("AWS Error NO_SUCH_BUCKET during CreateMultipartUpload operation: " + "specified " * 40))
    assert text.endswith(" …") and text[:-2].rsplit(" ", 1)[-1] == "specified"


def test_only_a_bucket_store_is_asked_for_its_bucket():
    """On HDFS (and Arrow's mock store) the first name is a folder a write may create: no refusal."""
    from packtool.storage import check_uri
    assert check_uri("mock://newdir/x", "output").shown == "mock://newdir/x"
