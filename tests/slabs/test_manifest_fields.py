"""S33-3, the class: every field of the manifest (the list derived from a real pack's manifest,
recursively: objects, list entries and leaves) made null, deleted or given another JSON type is
refused by every consumer at open, in one line naming the field and the manifest (verify: a
`manifest` problem, exit 1), or is a field no consumer's check reads: the provenance record,
which `verify` alone checks the form of (FORMAT.md "The provenance record"), proven unused by
the consumers below by deleting it whole; the standalone reader of FORMAT.md for the fields it
reads (READER). A manifest field this table has no rule for fails the test. Was: `stats.sequences: null` switched the coverage
check off (a slab deleted passed verify and was trained on), a deleted `stats` every stats
check; inspect crashed ("internal error") on the null."""
from __future__ import annotations

import json
import os
import re
import shutil

import pytest
from conftest import fixture_path
from side_support import side_rows, write_input
from slab_support import format_reader

from packtool.errors import PacktoolError
from packtool.slabs.names import MANIFEST

# FORMAT.md "The provenance record": read by `verify` alone (its form) and `verify --source`
PROVENANCE = re.compile(r"^(input\b|packtool_version$|tokenizer\.(path|sha256|config_sha256|template_sha256|"
                        r"special_tokens_map_sha256|chat_template|bos_token|eos_token|pad_token)$)")
# null is a value pack writes there (FORMAT.md): no fixed length, no BOS/EOS token, a hash or
# label the tokenizer has none of, an input file of a `datasets` object, an option not given
NULLABLE = re.compile(r"^(config\.alignment\.fixed_length|tokenizer\.(bos_id|eos_id|sha256|config_sha256|"
                      r"special_tokens_map_sha256|"
                      r"template_sha256|chat_template|bos_token|eos_token|pad_token|path)|input\.files\[\d+\]\[[12]\]|"
                      r"input\.tokenize\.(tokenizer|chat_template|prompt_field|response_field|text_field|add_bos|add_eos|"
                      r"bos_token|eos_token|pad_token|prompt_separator))$")
# absent in outputs of older packtool (FORMAT.md "The provenance record"): verify --source takes
# the flags alone / says in a note that the fingerprint may differ by a version
OLDER = re.compile(r"^(input\.(tokenize|versions)|tokenizer\.special_tokens_map_sha256)$")
# a well-formed record that only `verify --source` can tell from pack's (FORMAT.md): the files list
# one input shorter still lists [path, bytes, sha256] triples; the fingerprint keys on the inputs
WELL_FORMED = re.compile(r"^input\.files\[\d+\]$")
# absent in outputs of older packtool, read as such (FORMAT.md: ids then held only as they are read;
# truncate's sequences cut to no target and the rows of one token, slabs.fields.LATER_COUNTS, then not counted)
UNRECORDED = re.compile(r"^(shards\[\d+\]\.max_token_id|stats\.overflow\.untrained|"
                        r"stats\.changes\.(sequences_untrained|sequences_one_token))$")


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> str:
    """A real pack with every kind of field: a tokenizer, side columns of both kinds, split rows."""
    from packtool.align import Alignment
    from packtool.packing import pack
    from packtool.planning.core import PackingConfig
    from packtool.tokenize.config import TokenizeConfig
    root = tmp_path_factory.mktemp("fields")
    ids, lp, sup = side_rows(n=40, seed=5)
    inp = write_input(str(root / "in.parquet"), ids, lp, sup)
    out = str(root / "packed")
    pack([inp], Alignment(cp=2, capacity=256), PackingConfig("bfd", overflow="split"),
         TokenizeConfig(shape="tokens", tokenizer=fixture_path("tokenizers", "gpt2"), side_columns=("lp",),
                        support_columns=("sup",)), output=out, cache_dir=str(root / "cache"), shard_tokens=2048)
    return out


def _fields(x, path=()):
    """Every node below the root: (path of keys and list positions, value)."""
    items = x.items() if isinstance(x, dict) else enumerate(x) if isinstance(x, list) else ()
    for k, v in items:
        yield path + (k,), v
        yield from _fields(v, path + (k,))


def _name(path) -> str:
    out = ""
    for k in path:
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else k)
    return out


def _manifest(packed_dir: str) -> dict:
    with open(os.path.join(packed_dir, MANIFEST)) as f:
        return json.load(f)


def _wrong_type(v):
    return {str: 5, bool: "true", int: "5", float: "0.5", type(None): [], dict: [], list: {}}[type(v)]


MUTATIONS = {"null": lambda v: None, "missing": None, "wrong-type": _wrong_type}


def _damaged(packed_dir: str, tmp: str, path, mutation: str) -> str | None:
    """A copy of the output (shards hard-linked) with the field changed; None where the change
    leaves the manifest as it was (null where pack wrote null)."""
    m = _manifest(packed_dir)
    d = m
    for k in path[:-1]:
        d = d[k]
    if mutation == "missing":
        del d[path[-1]]
    else:
        new = MUTATIONS[mutation](d[path[-1]])
        if new == d[path[-1]] and type(new) is type(d[path[-1]]):
            return None
        d[path[-1]] = new
    out = os.path.join(tmp, "out")
    os.makedirs(out)
    for f in os.listdir(packed_dir):
        if f != MANIFEST:
            os.link(os.path.join(packed_dir, f), os.path.join(out, f))
    with open(os.path.join(out, MANIFEST), "w") as f:
        json.dump(m, f)
    return out


def _verify(out):
    from packtool.verification.run import verify
    rep = verify(out, workers=1)
    return "" if rep.ok else " | ".join(p.message for p in rep.problems)


def _dataset(out):
    from packtool.megatron.dataset import PackedSlabDataset
    PackedSlabDataset(out, grad_accum=4, micro_batch_tokens=1024)


def _hf(out):
    from packtool.hf import SlabDataset
    len(SlabDataset(out))


def _inspect(out):
    from packtool.inspection.packed import inspect_packed
    inspect_packed(out)


def _reader(out):
    mod = format_reader()
    try:
        mod.open_output(out)
    except ValueError as e:  # an example with no error type of its own
        return str(e)


CONSUMERS = {"verify": _verify, "megatron-dataset": _dataset, "hf": _hf, "inspect": _inspect,
             "standalone-reader": _reader}
# what FORMAT.md's standalone reader goes by (its `_typed`): it reads no other field
READER = re.compile(r"^(stats(\.(slabs|sequences))?|config(\.alignment(\.(cp|s|t|usable|fixed_length))?|\.packing"
                    r"(\.overflow)?)?|tokenizer(\.(vocab_size|pad_id))?|shards(\[\d+\](\.(file|rows|bytes|xxh3_128))?)?|"
                    r"side_columns(\[\d+\](\.(name|dtype|width|fill))?)?)$")


def _refusal(consumer: str, out: str) -> str:
    """The consumer's one-line refusal (packtool's own error type), or '' where it read the output."""
    try:
        said = CONSUMERS[consumer](out)
    except PacktoolError as e:
        said = str(e)
    return said or ""


@pytest.fixture(scope="module")
def damaged(packed, tmp_path_factory):
    """(field, mutation) -> the damaged copy, made once for every consumer."""
    made = {}
    root = tmp_path_factory.mktemp("damaged")

    def get(path, mutation):
        key = (_name(path), mutation)
        if key not in made:
            tmp = root / f"{len(made)}"
            tmp.mkdir()
            made[key] = _damaged(packed, str(tmp), path, mutation)
        return made[key]
    return get


def _checked(field: str, mutation: str, consumer: str) -> bool:
    if mutation == "null" and NULLABLE.match(field) or mutation in ("null", "missing") and OLDER.match(field):
        return False
    if mutation == "missing" and (WELL_FORMED.match(field) or UNRECORDED.match(field)):
        return False
    if consumer == "standalone-reader":
        return bool(READER.match(field))
    return consumer == "verify" or not PROVENANCE.match(field)  # the record: test_provenance_is_unused


@pytest.mark.parametrize("consumer", list(CONSUMERS))
@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_every_field_is_refused(packed, damaged, mutation, consumer):
    """Every field of the real manifest x this change x this consumer: refused in one line that
    names the field (or, for a field deleted with its object, the object)."""
    m = _manifest(packed)
    fields = [p for p, _ in _fields(m)]
    assert len(fields) > 80 and any(_name(p) == "stats.sequences" for p in fields)
    wrong = []
    for path in fields:
        field = _name(path)
        if not _checked(field, mutation, consumer):
            continue
        out = damaged(path, mutation)
        if out is None:  # null where pack wrote null
            continue
        said = _refusal(consumer, out)
        if mutation == "missing" and isinstance(path[-1], int):  # a list entry gone: the next takes its place
            named = _name(path[:-1]) in said or any(isinstance(v, str) and v in said
                                                    for _, v in _fields({"e": _value(m, path)}))
        else:  # the field, or its object and its key ("input.tokenize is not ... (batch_size must be")
            keys = [k for k in path if isinstance(k, str)]
            named = field in said or (".".join(keys[:-1]) in said and re.search(rf"\b{keys[-1]}\b", said))
        if not said or "\n" in said or not named:
            wrong.append(f"{field}: {said or 'read without a word'}")
    assert not wrong, f"{consumer}, {mutation}:\n" + "\n".join(wrong)


def test_provenance_is_unused_by_consumers(packed, tmp_path):
    """The provenance record deleted whole (input, packtool_version, the tokenizer's labels and
    hashes): every consumer reads exactly what it reads of the clean output (verify refuses it)."""
    m = _manifest(packed)
    for path in sorted((p for p, _ in _fields(m) if len(p) <= 2 and PROVENANCE.match(_name(p))), key=len, reverse=True):
        d = m
        for k in path[:-1]:
            d = d[k]
        d.pop(path[-1], None)
    out = str(tmp_path / "out")
    shutil.copytree(packed, out)
    with open(os.path.join(out, MANIFEST), "w") as f:
        json.dump(m, f)
    from packtool.hf import SlabDataset
    from packtool.megatron.dataset import PackedSlabDataset

    def read(d):
        ds = PackedSlabDataset(d, grad_accum=4, micro_batch_tokens=1024)
        steps = [(st.loss_tokens, [None if mb is None else mb.input_ids.numpy().tobytes() for mb in st.micro_batches])
                 for st in ds.steps(max_steps=ds.steps_per_epoch())]
        hf = SlabDataset(d)
        rows = [hf[i]["input_ids"].tobytes() for i in range(len(hf))]
        return steps, rows
    assert read(out) == read(packed)


def _value(m, path):
    for k in path:
        m = m[k]
    return m
