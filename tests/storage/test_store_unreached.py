"""A store that cannot be reached (an endpoint that refuses: here an unused port on 127.0.0.1; a
bucket in another region) is one line naming the flag (the library argument) whose URI it is,
with the fix (AWS_ENDPOINT_URL, the region, the credentials chain), before any work: it named
no argument (`s3://bkt/.manifest.json: cannot stat it (...)`, flag null) or, for -o, a key the
user never gave (issue 23). Each case makes one real request, which Arrow's SDK retries for a
few seconds: one case per place a URI is given. Every library reader of a packed output (verify,
inspect, SlabManifest.read, hf.SlabDataset, the Megatron dataset, train) names its argument too."""
from __future__ import annotations

import json
import socket

import pytest
from cli_main import run_main
from conftest import GPT2, GSM8K, S3_ENV

import packtool
from packtool.errors import PacktoolError
from packtool.storage import StorageError, unreached


@pytest.fixture
def no_store(monkeypatch, tmp_path):
    """AWS's standard chain pointing at a port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for k, v in {**S3_ENV, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.chdir(tmp_path)
    import packtool.tokenize.pipeline as pl
    monkeypatch.setattr(pl, "_build", lambda *a, **k: pytest.fail("tokenized before the store was reached"))


TOK = ["--tokenizer", GPT2, "--prompt-field", "question", "--response-field", "answer", "--no-progress"]
CLI = {  # the flag (or argument) said -> the command line
    "INPUTS": ["pack", "s3://bkt/in.jsonl", *TOK, "-o", "out", "--cache-dir", "c"],
    "--output": ["pack", GSM8K, *TOK, "-o", "s3://bkt/out", "--cache-dir", "c"],
    "--cache-dir": ["pack", GSM8K, *TOK, "-o", "out", "--cache-dir", "s3://bkt/c"],
    "DIR": ["verify", "s3://bkt/out"],
}
FIX = "AWS_ENDPOINT_URL"


@pytest.mark.parametrize("flag", CLI)
def test_the_command_line_names_the_flag_of_a_store_not_reached(no_store, monkeypatch, capsys, tmp_path, flag):
    assert run_main(monkeypatch, ["--json", *CLI[flag]]) == [2]
    err = json.loads(capsys.readouterr().out)["error"]
    msg = err["message"]
    assert err["type"] == "StorageError" and f"{flag} names a store that cannot be reached (no answer" in msg, msg
    assert FIX in msg and "\n" not in msg
    assert err["flag"] in (flag, None) and (err["flag"] == flag or flag in ("INPUTS", "DIR"))  # positionals: no flag
    assert not any(p.name in ("out", "c") for p in tmp_path.iterdir())  # nothing made


LIBRARY = {
    "inputs": lambda: packtool.pack(["s3://bkt/in.jsonl"], output="out", cache_dir="c", tokenize=CFG),
    "output": lambda: packtool.pack([GSM8K], output="s3://bkt/out", cache_dir="c", tokenize=CFG),
}
CFG = packtool.TokenizeConfig(tokenizer=GPT2, prompt_field="question", response_field="answer")


@pytest.mark.parametrize("argument", LIBRARY)
def test_the_library_names_the_argument_of_a_store_not_reached(no_store, argument):
    with pytest.raises(StorageError) as e:
        LIBRARY[argument]()
    msg = str(e.value)
    assert f"{argument} names a store that cannot be reached (no answer" in msg and FIX in msg, msg
    assert getattr(e.value, "flag", None) is None


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
    assert isinstance(e, PacktoolError)
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
