"""What a new user types that packtool used to answer badly: stdin, a mistyped path taken for a
Hugging Face dataset name, field flags that a forced --shape ignores, verify/inspect pointed
at a missing folder or at a shard, help text whose `[extra]` was eaten as markup, and
megatron-core's import notices on every `train`. Each error is one line (test_bad_inputs'
harness: exit status, no traceback, user files untouched, nothing left behind)."""
from __future__ import annotations

import shutil
import warnings

import pytest
from conftest import GPT2, GSM8K
from test_bad_inputs import expect_error, runner

from packtool.cli.app import _without_backend_notices, app

GSM_ARGS = ["--prompt-field", "question", "--response-field", "answer"]


def _pack_args(tmp_path, *inputs, extra=()):
    return ["pack", *inputs, "--tokenizer", GPT2, "-o", str(tmp_path / "out"), "--no-progress",
            "--cache-dir", str(tmp_path / "cache"), *extra]


def test_stdin_dash_is_refused_with_the_fix(tmp_path):
    shutil.copy(GSM8K, tmp_path / "gsm.jsonl")
    line = expect_error(tmp_path, _pack_args(tmp_path, "-", extra=GSM_ARGS), 2, "-:", "stdin", "save the data to a file")
    assert "datasets" not in line and "Repo id" not in line


@pytest.mark.parametrize("spec", ["gsm.jsonl.zstd", "./train", "nope.csv", "sub/missing"])
def test_missing_path_is_not_looked_up_as_a_dataset_name(tmp_path, monkeypatch, spec):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    line = expect_error(tmp_path, _pack_args(tmp_path, spec, extra=GSM_ARGS), 2, spec, "input file not found")
    assert "load_dataset" not in line and "--config" not in line


def test_missing_absolute_path_is_not_found(tmp_path):
    spec = str(tmp_path / "gone" / "data.jsonl.zst")
    expect_error(tmp_path, _pack_args(tmp_path, spec), 2, spec, "input file not found")


@pytest.mark.parametrize("flags,needles", [
    (["--shape", "text", *GSM_ARGS], ["--shape text", "--prompt-field", "--shape fields"]),
    (["--shape", "chat", "--chat-template", "chatml", "--text-field", "question"], ["--shape chat", "--text-field"]),
    (["--shape", "alpaca", *GSM_ARGS], ["--shape alpaca", "drop them"]),
])
def test_field_flags_a_forced_shape_ignores_are_refused(tmp_path, flags, needles):
    shutil.copy(GSM8K, tmp_path / "gsm.jsonl")
    expect_error(tmp_path, _pack_args(tmp_path, str(tmp_path / "gsm.jsonl"), extra=flags), 2, *needles)


def test_auto_shape_still_takes_text_and_prompt_fields_together(tmp_path):
    """One run may mix GSM8K (prompt/response) and documents (--text-field): not a contradiction."""
    shutil.copy(GSM8K, tmp_path / "gsm.jsonl")
    (tmp_path / "docs.jsonl").write_text('{"body": "a plain document"}\n')
    r = runner.invoke(app, _pack_args(tmp_path, str(tmp_path / "gsm.jsonl"), str(tmp_path / "docs.jsonl"),
                                      extra=[*GSM_ARGS, "--text-field", "body", "-C", "1024"]))
    assert r.exit_code == 0, r.stdout + r.stderr


@pytest.mark.parametrize("what", ["missing", "a_file"])
def test_verify_and_inspect_name_a_missing_folder_or_a_file(tmp_path, monkeypatch, what):
    monkeypatch.chdir(tmp_path)
    p = tmp_path / what
    needle = "no such folder" if what == "missing" else "a file, not a packtool output folder"
    if what == "a_file":
        p.write_text("hello")
    line = expect_error(tmp_path, ["inspect", str(p)], 2, str(p), needle)
    assert "re-run" not in line
    line = expect_error(tmp_path, ["verify", str(p)], 2, str(p), needle)  # nothing to check: exit 2 (S28-14)
    assert "re-run" not in line


def test_help_shows_the_extras_in_brackets():
    r = runner.invoke(app, ["pack", "--help"], env={"COLUMNS": "250"})
    assert r.exit_code == 0
    assert "packtool[ray]" in r.stdout and "packtool[hf]" in r.stdout, r.stdout
    assert "Progress bars on stderr" in r.stdout


def test_train_hides_only_megatrons_backend_notices():
    def noisy():
        warnings.warn("Transformer Engine and Apex are not installed. Falling back to Torch optimizers.")
        warnings.warn("Apex is not installed. Falling back to Torch Norm")
        warnings.warn("full scope is deprecated. Use empty cuda_graph_scope to capture the whole layer.")
        warnings.warn("something packtool's user should see")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _without_backend_notices(noisy)()
    assert [str(w.message) for w in seen] == ["something packtool's user should see"]


def test_ctrl_c_says_so_in_one_line(tmp_path, monkeypatch):
    import packtool.packing

    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(packtool.packing, "pack", interrupted)
    shutil.copy(GSM8K, tmp_path / "gsm.jsonl")
    r = runner.invoke(app, _pack_args(tmp_path, str(tmp_path / "gsm.jsonl"), extra=GSM_ARGS))
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 130 and len(lines) == 1 and "interrupted (Ctrl-C)" in lines[0], r.stderr
    assert "Traceback" not in r.stdout + r.stderr


@pytest.mark.parametrize("columns", [80, 100, 160])
def test_inspect_tables_never_cut_a_figure_on_a_narrow_terminal(tmp_path, columns):
    """At 80 columns the worst-slabs table printed "44.4…" and "physi…", --compare "effici…"."""
    import numpy as np
    rng = np.random.default_rng(0)
    lengths = tmp_path / "lengths.npy"
    np.save(lengths, rng.integers(20, 9000, 400))
    r = runner.invoke(app, ["inspect", "--lengths", str(lengths), "-C", "4096", "--overflow", "split",
                            "--tp", "2", "--cp", "2", "--fp8", "blockwise", "--compare"],
                      env={"COLUMNS": str(columns)})
    assert r.exit_code == 0, r.stdout + r.stderr
    assert "…" not in r.stdout, r.stdout
    assert max(len(ln) for ln in r.stdout.splitlines()) <= columns
    for header in ("physical", "fill %", "efficiency", "waste"):
        assert header in r.stdout
    assert ("widen the terminal" in r.stdout) == (columns < 110)


def test_csv_packs_like_the_same_rows_as_json_lines(tmp_path):
    import csv
    import json

    import pyarrow.parquet as pq
    with open(GSM8K) as f:
        rows = [json.loads(line) for line in f][:40]
    with open(tmp_path / "gsm.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["question", "answer"])
        w.writeheader()
        w.writerows(rows)
    (tmp_path / "gsm.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ids = []
    for name in ("gsm.csv", "gsm.jsonl"):
        out = tmp_path / f"out-{name}"
        r = runner.invoke(app, ["pack", str(tmp_path / name), "--tokenizer", GPT2, *GSM_ARGS, "-C", "2048",
                                "-o", str(out), "--no-progress", "--cache-dir", str(tmp_path / "cache")])
        assert r.exit_code == 0, r.stdout + r.stderr
        ids.append(pq.read_table(out).column("input_ids").to_pylist())
    assert ids[0] == ids[1]


def test_csv_empty_answer_is_named_like_a_missing_json_key(tmp_path):
    (tmp_path / "qa.csv").write_text('question,answer\n"What is 1+1?",2\n"And 2+2?",\n')
    expect_error(tmp_path, _pack_args(tmp_path, str(tmp_path / "qa.csv"), extra=GSM_ARGS), 2,
                 "qa.csv", "row 1", "answer is null, missing or empty", "--on-empty skip")


@pytest.mark.parametrize("where,needle", [("nodir/report.html", "does not exist"),
                                          ("out/report.html", "inside a packed output folder"),
                                          ("out", "is a folder")])
def test_inspect_html_path_refused_before_any_work(tmp_path, monkeypatch, where, needle):
    """--html into the packed folder made the next `verify` fail and `pq.read_table` read HTML."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(GSM8K, tmp_path / "gsm.jsonl")
    r = runner.invoke(app, _pack_args(tmp_path, str(tmp_path / "gsm.jsonl"), extra=[*GSM_ARGS, "-C", "2048"]))
    assert r.exit_code == 0, r.stdout + r.stderr
    expect_error(tmp_path, ["inspect", "out", "--html", where], 2, where, needle, "--html")
    assert runner.invoke(app, ["verify", "out"]).exit_code == 0


_LENGTHS = ["--lengths", "{lengths}", "-C", "4096"]


@pytest.mark.parametrize("args", [["plan", *_LENGTHS, "--json"], ["inspect", *_LENGTHS], ["inspect", *_LENGTHS, "--json"],
                                  ["pack", "--help"], ["verify", "--help"], []])
def test_stdout_closed_by_its_reader_is_quiet(tmp_path, args):
    """`packtool ... | head` (a command's tables or typer's help): exit 141 (SIGPIPE's status),
    no `error: Broken pipe`, and never exit 1, which `verify` means as "problems found"."""
    import os
    import subprocess
    import sys

    import numpy as np
    lengths = tmp_path / "lengths.npy"
    np.save(lengths, np.random.default_rng(2).integers(10, 3000, 200))
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first byte is written
    p = subprocess.run([sys.executable, "-m", "packtool.cli", *(a.format(lengths=lengths) for a in args)],
                       stdout=w, stderr=subprocess.PIPE, text=True, timeout=300)
    os.close(w)
    assert p.returncode == 141, p.stderr
    assert "error" not in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_dry_run_with_an_output_says_nothing_was_written(tmp_path):
    shutil.copy(GSM8K, tmp_path / "gsm.jsonl")
    r = runner.invoke(app, _pack_args(tmp_path, str(tmp_path / "gsm.jsonl"), extra=[*GSM_ARGS, "--dry-run"]),
                      env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.stdout + r.stderr
    assert "--dry-run: nothing was written" in r.stdout and not (tmp_path / "out").exists()


def test_done_line_commands_paste_as_they_are_for_a_path_with_spaces(tmp_path):
    shutil.copy(GSM8K, tmp_path / "gsm.jsonl")
    out = tmp_path / "my out [1]"
    r = runner.invoke(app, ["pack", str(tmp_path / "gsm.jsonl"), "--tokenizer", GPT2, *GSM_ARGS, "-o", str(out),
                            "--no-progress", "--cache-dir", str(tmp_path / "cache")], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.stdout + r.stderr
    assert f"`packtool verify '{out}'`" in r.stdout and f"`packtool inspect '{out}'`" in r.stdout
