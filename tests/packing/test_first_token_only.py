"""S45A-7 (L2): a row whose only target is its first token trains nothing (a segment's first token is
never a target in a slab: FORMAT.md, loss_mask), and it was packed with no word, counted nowhere.
The rule (the owner's): where the row carries labels (a loss_mask or labels column, a chat template's
or a prompt/response shape's mask), a mask that trains nothing past the first token is the all-masked
case: refused under --on-empty error naming the row, skipped and counted under skip, as a row
whose every token is masked. Where the row has no labels (every token a target: plain token ids,
untemplated text), a row of one token is packed, counted in the manifest's
changes.sequences_untrained (and sequences_one_token) and said in pack's warning, never refused.
Both held over every input kind (JSON Lines, JSON, Parquet, CSV, a datasets folder, a chat
template whose mask does this) and every engine (local with one writer or threads, Ray)."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import GPT2, LOCAL_RAY_GROUP
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.slabs.names import MANIFEST

runner = CliRunner()

# the assistant's reply alone, in a generation block: a one-token reply is the row's first token
TEMPLATE = ("{%- for m in messages -%}{%- if m.role == 'assistant' -%}{% generation %}{{ m.content }}"
            "{% endgeneration %}{%- else -%}{{ m.content }}{%- endif -%}{%- endfor -%}")
GOOD_CHAT = {"messages": [{"role": "user", "content": "hello there"}, {"role": "assistant", "content": " fine"}]}

# kind -> (a good row, the row whose only target is its first token, file format, extra pack flags)
LABELED = {
    "loss_mask jsonl": ({"input_ids": [5, 6, 7], "loss_mask": [0, 1, 1]},
                        {"input_ids": [1, 2, 3], "loss_mask": [1, 0, 0]}, "jsonl", []),
    "loss_mask parquet": ({"input_ids": [5, 6, 7], "loss_mask": [0, 1, 1]},
                          {"input_ids": [1, 2, 3], "loss_mask": [1, 0, 0]}, "parquet", []),
    "labels json": ({"input_ids": [5, 6, 7], "labels": [-100, 6, 7]},
                    {"input_ids": [1, 2, 3], "labels": [1, -100, -100]}, "json", []),
    "labels datasets": ({"input_ids": [5, 6, 7], "labels": [-100, 6, 7]},
                        {"input_ids": [1, 2, 3], "labels": [1, -100, -100]}, "datasets", []),
    "one-token loss_mask": ({"input_ids": [5, 6, 7], "loss_mask": [0, 1, 1]}, {"input_ids": [7], "loss_mask": [1]},
                            "jsonl", []),
    "chat template": (GOOD_CHAT, {"messages": [{"role": "assistant", "content": " x"}]}, "jsonl",
                      ["--tokenizer", GPT2, "--chat-template", "TEMPLATE"]),
}
UNLABELED = {
    "tokens jsonl": ({"input_ids": [5, 6, 7]}, {"input_ids": [7]}, "jsonl", []),
    "tokens parquet": ({"input_ids": [5, 6, 7]}, {"input_ids": [7]}, "parquet", []),
    "tokens datasets": ({"input_ids": [5, 6, 7]}, {"input_ids": [7]}, "datasets", []),
    "text jsonl": ({"text": "a fine row here"}, {"text": " x"}, "jsonl", ["--tokenizer", GPT2, "--no-eos", "--no-bos"]),
    "text csv": ({"text": "a fine row here"}, {"text": " x"}, "csv", ["--tokenizer", GPT2, "--no-eos", "--no-bos"]),
}
ENGINES = {"local": ["--workers", "1"], "threads": ["--workers", "2"], "ray": ["--engine", "ray"]}


def _write(tmp_path, rows: list[dict], fmt: str) -> str:
    if fmt == "datasets":
        datasets = pytest.importorskip("datasets")
        path = str(tmp_path / "dd")
        datasets.Dataset.from_list(rows).save_to_disk(path)
        return path
    path = str(tmp_path / f"d.{fmt}")
    if fmt == "jsonl":
        open(path, "w").write("".join(json.dumps(r) + "\n" for r in rows))
    elif fmt == "json":
        open(path, "w").write(json.dumps(rows))
    elif fmt == "csv":
        open(path, "w").write("text\n" + "".join(f'"{r["text"]}"\n' for r in rows))
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def _pack(request, tmp_path, case, engine: str, *more, json_out: bool = True):
    good, bad, fmt, flags = case
    if fmt == "datasets" and engine == "ray":
        pytest.skip("a datasets folder is loaded on the driver: --engine ray refuses it (cli/inputs.py)")
    if engine == "ray":
        request.getfixturevalue("local_ray")
    (tmp_path / "t.jinja").write_text(TEMPLATE)
    flags = [str(tmp_path / "t.jinja") if f == "TEMPLATE" else f for f in flags]
    data = _write(tmp_path, [good, bad, good], fmt)
    out = str(tmp_path / "out")
    r = runner.invoke(app, [*(["--json"] if json_out else []), "pack", data, "-C", "64", "-o", out, "--overwrite",
                            "--cache-dir", str(tmp_path / "c"), "--no-progress", *flags, *ENGINES[engine], *more])
    return r, data, out


def _engine(engine: str):
    return pytest.param(engine, marks=LOCAL_RAY_GROUP) if engine == "ray" else engine


@pytest.mark.parametrize("engine", [_engine(e) for e in ENGINES])
@pytest.mark.parametrize("kind", sorted(LABELED))
def test_a_labeled_row_training_only_its_first_token_is_all_masked(request, tmp_path, kind, engine):
    r, data, _ = _pack(request, tmp_path, LABELED[kind], engine)
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    err = json.loads(r.stdout.strip().splitlines()[-1])["error"]
    assert err["row"] == 1 and err["flag"] == "--on-empty", err
    assert "example with no loss tokens (all masked)" in err["message"], err
    assert "first token is never a target" in err["message"] and "--on-empty skip" in err["message"], err


@pytest.mark.parametrize("engine", [_engine(e) for e in ENGINES])
@pytest.mark.parametrize("kind", sorted(LABELED))
def test_a_labeled_row_training_only_its_first_token_is_skipped_and_counted(request, tmp_path, kind, engine):
    r, _, out = _pack(request, tmp_path, LABELED[kind], engine, "--on-empty", "skip")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["skipped_rows"] == {"empty": 0, "all_masked": 1}, d["skipped_rows"]
    assert d["changes"]["rows_skipped_all_masked"] == 1 and d["changes"]["sequences_untrained"] == 0, d["changes"]
    assert json.load(open(os.path.join(out, MANIFEST)))["stats"]["skipped_rows"]["all_masked"] == 1


def _warning(r) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("warning: ")]
    assert len(lines) == 1, r.stderr
    return lines[0]


@pytest.mark.parametrize("engine", [_engine(e) for e in ENGINES])
@pytest.mark.parametrize("kind", sorted(UNLABELED))
def test_an_unlabeled_row_of_one_token_is_packed_counted_and_said(request, tmp_path, kind, engine):
    r, data, out = _pack(request, tmp_path, UNLABELED[kind], engine)
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["sequences"] == 3 and d["skipped_rows"] == {"empty": 0, "all_masked": 0}, d
    assert (d["changes"]["sequences_untrained"], d["changes"]["sequences_one_token"]) == (1, 1), d["changes"]
    st = json.load(open(os.path.join(out, MANIFEST)))["stats"]
    assert (st["changes"]["sequences_untrained"], st["changes"]["sequences_one_token"]) == (1, 1), st["changes"]
    r, _, _ = _pack(request, tmp_path, UNLABELED[kind], engine, json_out=False)  # the warning is the summary's
    assert r.exit_code == 0, r.output
    line = _warning(r)
    assert "1 row(s) of one token" in line and "train nothing" in line and f"{os.path.basename(data)}" in line, line
    assert "row 1" in line, line
    v = runner.invoke(app, ["verify", out])
    assert v.exit_code == 0, v.output


@pytest.mark.parametrize("kind", ["tokens jsonl", "text jsonl"])
def test_verify_source_recounts_the_rows_of_one_token(request, tmp_path, kind):
    r, data, out = _pack(request, tmp_path, UNLABELED[kind], "local")
    assert r.exit_code == 0, r.output
    tok = UNLABELED[kind][3]
    v = runner.invoke(app, ["verify", out, "--source", data, *tok])
    assert v.exit_code == 0, v.output
    m = os.path.join(out, MANIFEST)
    man = json.load(open(m))
    man["stats"]["changes"]["sequences_one_token"] = 0
    man["stats"]["changes"]["sequences_untrained"] = 0
    open(m, "w").write(json.dumps(man))
    v = runner.invoke(app, ["--json", "verify", out, "--source", data, *tok])
    assert v.exit_code == 1 and "sequences_one_token" in v.output, v.output
