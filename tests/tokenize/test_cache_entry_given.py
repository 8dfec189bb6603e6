"""S47A-8: a tokenized cache entry given as the input (the folder `ls ~/.cache/packtool/tokenized`
shows, or its cache.json) was "cache.json: holds one JSON object ... not rows ... save the list
of rows inside it as such a file": a fix that has the user rewrite packtool's own record. It is
said as what it is (read_checks.one_object, where a lone JSON object is judged), as a packed
output given itself is."""
from __future__ import annotations

import os

import pytest
from conftest import GPT2, gsm8k_packed, upload_tree
from typer.testing import CliRunner

import packtool
from packtool.tokenize import TokenizeConfig

runner = CliRunner()


@pytest.fixture(scope="module")
def entry(tmp_path_factory):
    t = tmp_path_factory.mktemp("ce")
    gsm8k_packed(t, 5, "a.jsonl", "--dry-run", "--cache-dir", str(t / "c"))
    (name,) = os.listdir(t / "c")
    return str(t / "c" / name)


@pytest.fixture(scope="module")
def packed(entry, tmp_path_factory):
    """A packed output of the entry's rows: its .manifest.json is packtool's record too."""
    from packtool.cli.app import app
    out = str(tmp_path_factory.mktemp("po") / "out")
    r = runner.invoke(app, ["pack", os.path.join(os.path.dirname(os.path.dirname(entry)), "a.jsonl"), "--tokenizer",
                            GPT2, "-C", "1024", "-q", "-o", out, "--cache-dir", os.path.dirname(entry)])
    assert r.exit_code == 0, r.output
    return out


# S48A-3 / RA-14: the same entry on an object store (what --cache-dir s3://... writes), the prefix or
# its cache.json, and a packed output's .manifest.json named (local or store) were still "holds one
# JSON object ... save the list of rows inside it": judged by the record's own `format`, every door
GIVEN = {"the entry": ("entry", ""), "its cache.json": ("entry", "cache.json"),
         "the entry on a store": ("entry", "store/"), "its cache.json on a store": ("entry", "store/cache.json"),
         "a manifest": ("packed", ".manifest.json"), "a manifest on a store": ("packed", "store/.manifest.json")}
# F8 (S48A-3's rest): a path inside the entry (its flat/ or data/ folder, a file of either) was "holds
# data files packtool cannot read: offsets.npy" or "cannot tell the input shape": the entry's, said so
INSIDE = {"its flat/": ("entry", "flat"), "its data/": ("entry", "data"), "a flat/ file": ("entry", "flat/offsets.npy"),
          "a data/ part": ("entry", "data/part-00000.parquet"), "its flat/ on a store": ("entry", "store/flat/"),
          "a data/ part on a store": ("entry", "store/data/part-00000.parquet")}
GIVEN.update(INSIDE)
# RA-9 (s50): a link to a path inside the entry was judged by the link's name alone ("folder holds data
# files packtool cannot read: offsets.npy"), and a quoted glob of its files by the kinds it matched
# ("glob matched no ... files") before the entry was asked: the path it resolves to, and each match
INSIDE_TOO = {"a link to its flat/": ("entry", "link:flat"), "a link to a data/ part": ("entry", "link:data/part-00000.parquet"),
              "a glob of flat/'s files": ("entry", "glob:flat/*"), "a ** glob of its .npy files": ("entry", "glob:**/*.npy")}
GIVEN.update(INSIDE_TOO)


@pytest.mark.parametrize("given", list(GIVEN))
@pytest.mark.parametrize("door", ["cli", "library"])
def test_a_cache_entry_given_is_said_as_one(entry, packed, given, door, tmp_path, request):
    from packtool.cli.app import app
    tree, name = GIVEN[given]
    home = {"entry": entry, "packed": packed}[tree]
    if name.startswith("store/"):
        base = f"{request.getfixturevalue('s3')}/{tree}"
        upload_tree(home, base)
        spec = f"{base}/{name[len('store/'):]}"
    elif name.startswith("link:"):  # a link outside the entry to a path inside it
        spec = str(tmp_path / "mylink")
        os.symlink(os.path.join(home, name[len("link:"):]), spec)
    else:
        spec = os.path.join(home, name.removeprefix("glob:")) if name else home
    if door == "cli":
        r = runner.invoke(app, ["pack", spec, "--tokenizer", GPT2, "-C", "1024", "--dry-run", "-q",
                                "--cache-dir", str(tmp_path / "c2")])
        assert r.exit_code == 2, r.output
        said = r.stderr
    else:
        with pytest.raises(packtool.PacktoolError) as e:
            packtool.pack([spec], tokenize=TokenizeConfig(tokenizer=GPT2), dry_run=True, cache_dir=str(tmp_path / "c2"))
        said = str(e.value)
    what = "tokenized cache entry, not data" if tree == "entry" else "packed output's manifest, not data"
    assert what in said and "pack the inputs it was made from" in said and "save the list of rows" not in said, said


def test_store_objects_named_one_by_one_ask_each_prefix_above_once(entry, s3, monkeypatch):
    """RA-13: each store object named by its path asked every prefix above its parent again (three
    table markers and cache.json each), once per parent: objects under date prefixes paid every
    shared ancestor per day. Each prefix is asked once across the inputs, and only its cache.json;
    an object inside an entry named after them is still the entry's."""
    from collections import Counter

    from packtool.storage import location, locate
    from packtool.tokenize.readers import resolve_inputs
    uris = [f"{s3}/logs/2026/12/{k:02d}/x.jsonl" for k in range(4)]
    for u in uris:
        locate(u).write_bytes(b'{"text": "a"}\n')
    upload_tree(entry, f"{s3}/logs/2026/ce")
    asked: Counter = Counter()
    real = location.Location.info_of
    monkeypatch.setattr(location.Location, "info_of", lambda self, p: asked.update([p]) or real(self, p))
    assert len(resolve_inputs(uris, quiet=True)) == len(uris)
    with pytest.raises(packtool.PacktoolError, match="tokenized cache entry, not data"):
        resolve_inputs([*uris, f"{s3}/logs/2026/ce/data/part-00000.parquet"], quiet=True)
    above = {p: n for p, n in asked.items() if not p.endswith((".jsonl", ".parquet"))}
    bucket = s3.removeprefix("s3://")
    prefixes = {bucket, f"{bucket}/logs", f"{bucket}/logs/2026", f"{bucket}/logs/2026/12", f"{bucket}/logs/2026/ce",
                f"{bucket}/logs/2026/ce/data", *(u.removeprefix("s3://").rsplit("/", 1)[0] for u in uris)}
    # the first run asks each prefix once; the second (a new `seen`) once again, the entry's own once
    assert above == {f"{p}/cache.json": 1 if "/ce" in p else 2 for p in prefixes}, sorted(above.items())
