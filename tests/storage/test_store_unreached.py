"""A store that cannot be reached (an endpoint that refuses: here an unused port on 127.0.0.1; a
bucket in another region) is one line naming the flag (the library argument) whose URI it is,
with the fix (AWS_ENDPOINT_URL, the region, the credentials chain), before any work: it named
no argument (`s3://bkt/.manifest.json: cannot stat it (...)`, flag null) or, for -o, a key the
user never gave (issue 23). Each case makes one real request, which Arrow's SDK retries for a
few seconds: one case per place a URI is given. Every library reader of a packed output (verify,
inspect, SlabManifest.read, hf.SlabDataset, the Megatron dataset, train) names its argument too.
Each is the kind of the argument that named it (README's exit table; L5): `output` for -o, `cache`
for --cache-dir, `input` for what is read, in --json and as the library's class (StorageOutputError,
a PacktoolOutputError; StorageCacheError, a PacktoolCacheError; StorageError, a PacktoolInputError):
it was `input` in the library whatever the argument, so `except PacktoolOutputError` missed an -o
store not reached."""
from __future__ import annotations

import json

import pytest
from cli_main import run_main
from conftest import GPT2, GSM8K

import packtool
from packtool.errors import PacktoolCacheError, PacktoolError, PacktoolInputError, PacktoolOutputError
from packtool.storage import STORE_ERRORS, StorageCacheError, StorageError, StorageOutputError, unreached


@pytest.fixture
def no_store(monkeypatch, tmp_path):
    """AWS's standard chain pointing at a port nothing listens on."""
    from conftest import closed_store
    closed_store(monkeypatch)
    monkeypatch.chdir(tmp_path)
    import packtool.tokenize.pipeline as pl
    monkeypatch.setattr(pl, "_build", lambda *a, **k: pytest.fail("tokenized before the store was reached"))


TOK = ["--tokenizer", GPT2, "--prompt-field", "question", "--response-field", "answer", "--no-progress"]
CFG = packtool.TokenizeConfig(tokenizer=GPT2, prompt_field="question", response_field="answer")


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """A small local output: verify --source reaches its --cache-dir only after reading one."""
    d = tmp_path_factory.mktemp("packed")
    packtool.pack([GSM8K], output=str(d / "out"), cache_dir=str(d / "cache"), tokenize=CFG)
    return str(d / "out")


# every argument of the command line that may name a store -> (the command line, the kind the
# README's exit table gives a refusal there: the argument's, `input` for what packtool reads)
CLI = {
    "INPUTS": (lambda out: ["pack", "s3://bkt/in.jsonl", *TOK, "-o", "out", "--cache-dir", "c"], "input"),
    "--output": (lambda out: ["pack", GSM8K, *TOK, "-o", "s3://bkt/out", "--cache-dir", "c"], "output"),
    "--cache-dir": (lambda out: ["pack", GSM8K, *TOK, "-o", "out", "--cache-dir", "s3://bkt/c"], "cache"),
    "DIR": (lambda out: ["verify", "s3://bkt/out"], "input"),
    "--source": (lambda out: ["verify", out, "--source", "s3://bkt/in.jsonl"], "input"),
    "verify --cache-dir": (lambda out: ["verify", out, "--source", GSM8K, "--cache-dir", "s3://bkt/c"], "cache"),
    "inspect DIR": (lambda out: ["inspect", "s3://bkt/out"], "input"),
    "DATA_DIR": (lambda out: ["train", "s3://bkt/out", "--device", "cpu"], "input"),
}
FIX = "AWS_ENDPOINT_URL"
# the class of a store refusal of each kind, and the kind's own class
CLASS = {"input": (StorageError, PacktoolInputError), "output": (StorageOutputError, PacktoolOutputError),
         "cache": (StorageCacheError, PacktoolCacheError)}


@pytest.mark.parametrize("place", CLI)
def test_the_command_line_names_the_flag_of_a_store_not_reached(packed, no_store, monkeypatch, capsys, tmp_path,
                                                                 place):
    argv, kind = CLI[place]
    flag = place.split()[-1]
    assert run_main(monkeypatch, ["--json", *argv(packed)]) == [2]
    err = json.loads(capsys.readouterr().out)["error"]
    msg = err["message"]
    assert f"{flag} names a store that cannot be reached (no answer" in msg, msg
    assert FIX in msg and "\n" not in msg
    assert (err["kind"], err["type"]) == (kind, CLASS[kind][0].__name__), err  # the kind of the argument
    assert err["flag"] in (flag, None) and (err["flag"] == flag or flag.isupper())  # positionals: no flag
    assert not any(p.name in ("out", "c") for p in tmp_path.iterdir())  # nothing made


# every library argument that may name a store -> (the call, the kind of a refusal there)
LIBRARY = {
    "inputs": (lambda: packtool.pack(["s3://bkt/in.jsonl"], output="out", cache_dir="c", tokenize=CFG), "input"),
    "output": (lambda: packtool.pack([GSM8K], output="s3://bkt/out", cache_dir="c", tokenize=CFG), "output"),
    "cache_dir": (lambda: packtool.pack([GSM8K], output="out", cache_dir="s3://bkt/c", tokenize=CFG), "cache"),
    "directory": (lambda: packtool.verify("s3://bkt/out"), "input"),
}


@pytest.mark.parametrize("argument", LIBRARY)
def test_the_library_names_the_argument_of_a_store_not_reached(no_store, argument):
    call, kind = LIBRARY[argument]
    with pytest.raises(STORE_ERRORS) as e:
        call()
    msg = str(e.value)
    assert f"{argument} names a store that cannot be reached (no answer" in msg and FIX in msg, msg
    assert getattr(e.value, "flag", None) is None
    _of_kind(e.value, kind)


def _of_kind(e: PacktoolError, kind: str) -> None:
    """`e` is the class of `kind` (a wrapper's `except PacktoolCacheError` catches a cache's), and
    of no other kind's."""
    assert e.kind == kind and isinstance(e, CLASS[kind]), (type(e).__mro__, kind)
    assert not any(isinstance(e, c[1]) for k, c in CLASS.items() if k != kind), type(e).__mro__


# what S3 says of a bucket in another region (no request needed to hold the rule to its words)
OTHER_REGION = [
    "When getting information for bucket 'bkt': AWS Error UNKNOWN (HTTP status 301) during HeadBucket operation",
    "AWS Error PermanentRedirect during GetObject operation: The bucket you are attempting to access must be "
    "addressed using the specified endpoint",
    "AWS Error AuthorizationHeaderMalformed: the region 'us-east-1' is wrong; expecting 'eu-west-1'",
]


@pytest.mark.parametrize("text", OTHER_REGION, ids=["301", "PermanentRedirect", "AuthorizationHeaderMalformed"])
def test_a_store_answering_for_another_region_names_the_argument_and_the_region(text):
    e = unreached(OSError(text), "s3://bkt/out", "output")
    assert isinstance(e, PacktoolOutputError)
    assert "output names a store that cannot be reached (it answers for another region" in str(e)
    assert "AWS_REGION" in str(e) and "?region=" in str(e)


def test_a_store_that_answers_is_left_to_its_answer():
    assert unreached(OSError("AWS Error ACCESS_DENIED during HeadBucket operation: Access Denied"),
                     "s3://bkt/out", "output") is None


def _train(uri):
    from packtool.megatron.loop import TrainConfig, train
    return train(TrainConfig(data_dir=uri, device="cpu"))


# every library entry that reads a packed output (a folder or store prefix), and the argument
# that gives it: each read the manifest through a Location that knew no argument, so a store not
# reached was "the store cannot be reached", where the CLI names DIR / DATA_DIR
READERS = {
    ("verify", "directory"): lambda uri: packtool.verify(uri),
    ("inspect", "directory"): lambda uri: packtool.inspect(uri),
    ("SlabManifest.read", "path"): lambda uri: packtool.SlabManifest.read(uri),
    ("hf.SlabDataset", "path"): lambda uri: __import__("packtool.hf", fromlist=["x"]).SlabDataset(uri),
    ("megatron PackedSlabDataset", "path"):
        lambda uri: __import__("packtool.megatron.dataset", fromlist=["x"]).PackedSlabDataset(uri),
    ("megatron train", "data_dir"): _train,
}


@pytest.mark.parametrize("call", READERS, ids=[c for c, _ in READERS])
def test_every_library_reader_of_an_output_names_its_argument_for_a_store_not_reached(no_store, call):
    name = call[1]
    with pytest.raises(StorageError) as e:
        READERS[call]("s3://bkt/out")
    msg = str(e.value)
    assert f"{name} names a store that cannot be reached (no answer" in msg and FIX in msg, msg
    assert "\n" not in msg and getattr(e.value, "flag", None) is None, msg
    _of_kind(e.value, "input")
