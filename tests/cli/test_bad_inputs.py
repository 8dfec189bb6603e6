"""Bad inputs and faults at the command line: each case asserts the exit status, exactly one
`error:` line naming what and where, no traceback, the user's files and a previous output
byte-identical afterwards, and no temporary folder, spill folder or lock left behind.

Classes here: the output path, wrong Parquet column types, chat templates (syntax, runtime,
runaway), rich markup in user text, damaged manifests and shards under verify / inspect /
train, usage. (Cache damage and silent data changes have their own corpus.)"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import GPT2, PEPS
from leftover_support import snapshot
from typer.testing import CliRunner

import packtool.tokenize.template_limits as template_limits
from packtool.cli.app import app
from packtool.output.folder import lock_path
from packtool.output.lock import lock_text
from packtool.slabs.names import MANIFEST

runner = CliRunner()
TEMP_MARKS = ("packtool-tmp", "packtool-spill", ".packtool.lock", ".tmp-")


# --- harness ---------------------------------------------------------------------------



def leftovers(root) -> list[str]:
    found = []
    for d, dirs, files in os.walk(root):
        found += [os.path.join(d, x) for x in dirs + files if any(m in x for m in TEMP_MARKS)]
    return found


def expect_error(root, args, code, *needles, json_out=False, env=None):
    """Run `packtool ARGS`; check the one error line and that nothing changed on disk."""
    before = snapshot(root)
    r = runner.invoke(app, args, env=env)
    text = r.stdout + r.stderr
    assert r.exit_code == code, text
    assert "Traceback" not in text, text
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    if json_out:
        obj = json.loads(r.stdout.strip().splitlines()[-1])
        assert obj["error"]["exit_code"] == code and obj["error"]["message"] in lines[0]
    assert snapshot(root) == before
    assert leftovers(root) == []
    return lines[0]


@pytest.fixture(scope="module")
def previous(tmp_path_factory):
    """A packtool output from a good run, packed once per module."""
    root = tmp_path_factory.mktemp("prev")
    out = root / "out"
    r = runner.invoke(app, ["pack", PEPS, "--tokenizer", GPT2, "-o", str(out), "-C", "4096",
                            "--overflow", "split", "--no-progress", "--cache-dir", str(root / "cache")])
    assert r.exit_code == 0, r.stdout + r.stderr
    return out


@pytest.fixture
def proj(tmp_path, previous, monkeypatch):
    """A user's project folder: code, data, a tokenizer copy and a previous output."""
    p = tmp_path / "proj"
    (p / "data").mkdir(parents=True)
    (p / "tok").mkdir()
    (p / "train.py").write_text("print('my code')\n")
    shutil.copy(PEPS, p / "data" / "peps.jsonl.gz")
    shutil.copy(GPT2, p / "tok" / "tokenizer.json")
    shutil.copytree(previous, p / "packed")
    monkeypatch.chdir(p)
    return p


def pack_args(p, *extra, data=None):
    return ["pack", str(data or p / "data" / "peps.jsonl.gz"), "--tokenizer", str(p / "tok" / "tokenizer.json"),
            "--cache-dir", str(p.parent / "cache"), "-C", "4096", "--overflow", "split",
            "--no-progress", *extra]


# --- the output path ------------------------------------------------------------------

@pytest.mark.parametrize("target,overwrite,needle", [
    (".", True, "working directory"),
    (".", False, "working directory"),
    ("..", True, "working directory"),
    ("data", True, "holds the input"),
    ("data/peps.jsonl.gz", True, "holds the input"),
    ("data/packed", False, "inside the input folder"),
    ("tok", True, "holds the input"),
    ("train.py", True, "not a folder"),
    ("train.py/out", False, "cannot be created"),
    ("packed", False, "--overwrite"),
])
def test_output_path_refused(proj, target, overwrite, needle):
    args = pack_args(proj, "-o", target, *(["--overwrite"] if overwrite else []),
                     data=proj / "data" if target == "data/packed" else None)
    expect_error(proj.parent, args, 2, needle, target.split("/")[0] if target != ".." else "")


def test_output_holding_the_cache_refused(proj):
    (proj / "work").mkdir()
    args = pack_args(proj, "-o", str(proj / "work"), "--overwrite")
    args[args.index("--cache-dir") + 1] = str(proj / "work" / "cache")
    expect_error(proj.parent, args, 2, "holds the tokenized cache", "work")


@pytest.mark.parametrize("n_foreign", [1, 3, 5])
@pytest.mark.parametrize("overwrite", [False, True])
def test_foreign_files_named(proj, n_foreign, overwrite):
    d = proj / "mine"
    d.mkdir()
    names = [f"notes{i}.txt" for i in range(n_foreign)]
    for n in names:
        (d / n).write_text("keep me")
    line = expect_error(proj.parent, pack_args(proj, "-o", "mine", *(["--overwrite"] if overwrite else [])),
                        2, "mine", "not a packtool output", names[0])
    if n_foreign > 3:
        assert f"and {n_foreign - 3} more" in line


def test_previous_output_with_a_foreign_file_not_replaced(proj):
    (proj / "packed" / "README.md").write_text("my notes on this run")
    expect_error(proj.parent, pack_args(proj, "-o", "packed", "--overwrite"), 2,
                 "packed", "also holds", "README.md")


def test_damaged_previous_output_not_replaced(proj):
    (proj / "packed" / MANIFEST).write_text("{not json")
    expect_error(proj.parent, pack_args(proj, "-o", "packed", "--overwrite"), 2,
                 "packed", "not a packtool output")


def test_second_writer_fails_at_once(proj):
    fd = os.open(lock_path(str(proj / "packed")), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.pwrite(fd, lock_text(4242), 0)  # what a running pack writes once it holds the flock
        before = snapshot(proj.parent)
        r = runner.invoke(app, pack_args(proj, "-o", "packed", "--overwrite"))
        assert r.exit_code == 2 and "another packtool pack (pid 4242)" in r.stderr
        assert r.stderr.count("error:") == 1 and "Traceback" not in r.stderr
        assert snapshot(proj.parent) == before
    finally:
        os.close(fd)
        os.unlink(lock_path(str(proj / "packed")))
    assert leftovers(proj.parent) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through read-only permissions")
def test_read_only_parent_refused_before_tokenizing(proj, tmp_path):
    ro = proj / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        expect_error(proj.parent, pack_args(proj, "-o", "ro/out"), 2, "ro/out", "cannot be written")
    finally:
        ro.chmod(0o755)


def test_output_error_as_json(proj):
    expect_error(proj.parent, pack_args(proj, "-o", ".", "--json"), 2, "working directory", json_out=True)


def test_missing_output_is_usage(proj):
    expect_error(proj.parent, pack_args(proj), 2, "--output is required")


# --- input column types ---------------------------------------------------------------

@pytest.mark.parametrize("name,table,needle", [
    ("int_text.parquet", {"text": [1, 2, 3]}, "column text holds int64"),
    ("struct_text.parquet", {"text": [{"a": 1}]}, "column text holds struct"),
    ("str_ids.parquet", {"input_ids": ["a", "b"]}, "input_ids holds string"),
    ("int_pc.parquet", {"prompt": [1, 2], "completion": [3, 4]}, "column prompt holds int64"),
    ("str_chat.parquet", {"messages": [[1, 2]]}, "column messages holds list<"),
])
def test_parquet_column_types(proj, name, table, needle):
    path = proj / "data" / name
    pq.write_table(pa.table(table), path)
    extra = ["--chat-template", "chatml"] if "messages" in table else []
    expect_error(proj.parent, pack_args(proj, "-o", "new", *extra, data=path), 2, name, "row 0", needle)


def test_jsonl_column_type_row_counted_from_file_start(proj):
    path = proj / "data" / "nums.jsonl"
    path.write_text('{"text": null}\n{"text": 7}\n')
    expect_error(proj.parent, pack_args(proj, "-o", "new", data=path), 2, "nums.jsonl", "row 1", "int64")


# --- tokenizer files ------------------------------------------------------------------

@pytest.mark.parametrize("config,tok_json,needle", [
    ("{bad", None, "tokenizer_config.json: cannot read as JSON"),
    ("[1, 2]", None, "tokenizer_config.json: is not a JSON object"),
    (None, "garbage", "tokenizer.json: cannot load tokenizer"),
])
def test_bad_tokenizer_files(proj, config, tok_json, needle):
    if config is not None:
        (proj / "tok" / "tokenizer_config.json").write_text(config)
    if tok_json is not None:
        (proj / "tok" / "tokenizer.json").write_text(tok_json)
    args = pack_args(proj, "-o", "new")
    args[args.index("--tokenizer") + 1] = str(proj / "tok")
    expect_error(proj.parent, args, 2, needle, "--tokenizer")


# --- chat templates -------------------------------------------------------------------

def _chat_file(p):
    path = p / "data" / "chats.jsonl"
    rows = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}] * 3
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("text,needles", [
    ("{% for m in messages %}{{ m.content }\n", ["syntax error at line 1", "bad.jinja"]),
    ("{% if %}", ["syntax error", "bad.jinja"]),
    ("{{ 1 / 0 }}", ["chats.jsonl, row 0", "ZeroDivisionError"]),
    ("{{ messages[5].content.upper() }}", ["chats.jsonl, row 0", "bad.jinja"]),
    ("{{ raise_exception('no [bold]system[/bold] [/x] here') }}", ["no [bold]system[/bold] [/x] here"]),
    ("{{ nothing_here() }}", ["chats.jsonl, row 0", "nothing_here"]),
    ("{% for a in range(100000) %}{% for b in range(100000) %}x{% endfor %}{% endfor %}",
     ["chats.jsonl, row 0", "range()"]),
    ("{{ 'x' * 10000000000 }}", ["chats.jsonl, row 0", "`*` would build 10,000,000,000 characters"]),
    ("{{ 10 ** 100000000 }}", ["chats.jsonl, row 0", "too large"]),
    ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", ["chats.jsonl, row 0", "RecursionError"]),
])
def test_chat_template_errors(proj, text, needles):
    data = _chat_file(proj)
    (proj / "bad.jinja").write_text(text)
    expect_error(proj.parent, pack_args(proj, "-o", "new", "--chat-template", str(proj / "bad.jinja"), data=data),
                 2, "--chat-template", *needles)


def test_chat_template_that_never_ends_is_stopped(proj, monkeypatch):
    monkeypatch.setattr(template_limits, "RENDER_SECONDS", 0.5)
    data = _chat_file(proj)
    (proj / "slow.jinja").write_text("{% set ns = namespace(n=0) %}{% for m in messages %}"
                                     "{% for a in range(999) %}{% for b in range(999) %}{% set ns.n = ns.n + 1 %}"
                                     "{% endfor %}{% endfor %}{% endfor %}{{ ns.n }}")
    monkeypatch.setattr(template_limits, "MAX_RANGE_ITEMS", 10**9)
    expect_error(proj.parent, pack_args(proj, "-o", "new", "--chat-template", str(proj / "slow.jinja"), data=data),
                 2, "chats.jsonl, row 0", "took over 0.5 s")


def test_chat_template_not_utf8(proj):
    data = _chat_file(proj)
    (proj / "bin.jinja").write_bytes(b"\xff\xfe{{ x }}")
    expect_error(proj.parent, pack_args(proj, "-o", "new", "--chat-template", str(proj / "bin.jinja"), data=data),
                 2, "bin.jinja", "cannot read the chat template")


# --- markup in user text ---------------------------------------------------------------

def test_brackets_in_a_path_print_whole(proj):
    missing = proj / "data" / "a[/x]b[bold].jsonl"
    expect_error(proj.parent, pack_args(proj, "-o", "new", data=missing), 2, "a[/x]b[bold].jsonl")


def test_brackets_in_an_output_path_print_whole(proj):
    args = pack_args(proj, "-o", "o[/x][bold]")
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and "Done: o[/x][bold]" in r.stdout, r.stderr
    for cmd in (["verify", "o[/x][bold]"], ["inspect", "o[/x][bold]"]):
        r = runner.invoke(app, cmd)
        assert r.exit_code == 0 and "o[/x][bold]" in r.stdout and "Traceback" not in r.stderr, r.stderr


def test_ray_hint_prints_whole(proj, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    expect_error(proj.parent, pack_args(proj, "-o", "new", "--engine", "ray"), 2, "pip install 'packtool[ray]'")


# --- damaged outputs: inspect and train refuse in one line, verify reports a problem -----

def _edit(m, path, value):
    *head, last = path
    for k in head:
        m = m[k]
    if value is KeyError:
        del m[last]
    else:
        m[last] = value


MANIFEST_CASES = {
    "list": ("raw", "[1, 2]", "format None"),
    "empty": ("raw", "", "cannot be read as JSON"),
    "truncated": ("raw", '{"format": "packtool-slabs", "sche', "cannot be read as JSON"),
    "config_null": (("config",), None, "config is null, not an object"),
    "config_str": (("config",), "abc", 'config is "abc", not an object'),
    "no_config": (("config",), KeyError, "config is absent, not an object"),
    "tp_str": (("config", "alignment", "tp"), "two", 'config.alignment.tp is "two", not an integer >= 1'),
    "shards_str": (("shards",), "abc", 'shards is "abc", not a list'),
    "shards_ints": (("shards",), [1, 2], "shards[0] is 1, not an object"),
    "shard_no_file": (("shards", 0, "file"), KeyError, "shards[0].file is absent"),
    "shard_escapes": (("shards", 0, "file"), "../secret/x.parquet", "not a plain file name"),
    "shard_absolute": (("shards", 0, "file"), "/etc/passwd", "not a plain file name"),
    "shard_bytes_str": (("shards", 0, "bytes"), "x", 'shards[0].bytes is "x", not a count'),
    "stats_str": (("stats",), "abc", 'stats is "abc", not an object'),
    "stats_list": (("stats",), [1], "stats is [1], not an object"),
    "sequences_str": (("stats", "sequences"), "x", 'stats.sequences is "x", not a count'),
    "overflow_str": (("stats", "overflow"), "x", 'stats.overflow is "x", not an object'),
    "tokenizer_str": (("tokenizer",), "abc", 'tokenizer is "abc", not an object'),
    "pad_id_str": (("tokenizer", "pad_id"), "x", 'tokenizer.pad_id is "x", not a token id'),
    "input_str": (("input",), "abc", 'input is "abc", not an object'),
}


@pytest.fixture
def damaged(tmp_path, previous, monkeypatch):
    def make(case):
        d = tmp_path / f"out_{case}"
        shutil.copytree(previous, d)
        path, value, _ = MANIFEST_CASES[case]
        if path == "raw":
            (d / MANIFEST).write_text(value)
        else:
            m = json.loads((d / MANIFEST).read_text())
            _edit(m, path, value)
            (d / MANIFEST).write_text(json.dumps(m))
        return d
    monkeypatch.chdir(tmp_path)
    return make


@pytest.mark.parametrize("case", sorted(MANIFEST_CASES))
def test_inspect_damaged_manifest(tmp_path, damaged, case):
    d = damaged(case)
    expect_error(tmp_path, ["inspect", str(d)], 2, f"out_{case}", "manifest.json", MANIFEST_CASES[case][2])


@pytest.mark.parametrize("case", sorted(MANIFEST_CASES))
def test_verify_damaged_manifest(tmp_path, damaged, case):
    d = damaged(case)
    before = snapshot(tmp_path)
    r = runner.invoke(app, ["verify", str(d), "--json"])
    assert r.exit_code == 1 and "Traceback" not in r.stdout + r.stderr
    rep = json.loads(r.stdout)
    assert not rep["ok"] and rep["counts"] == {"manifest": 1}
    assert MANIFEST_CASES[case][2] in rep["problems"][0]["message"]
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("case", ["shard_escapes", "config_null", "stats_str"])
def test_train_damaged_manifest(tmp_path, damaged, case):
    d = damaged(case)
    expect_error(tmp_path, ["train", str(d), "--device", "cpu", "--steps", "1"], 2, MANIFEST_CASES[case][2])


@pytest.mark.parametrize("damage,inspect_needle,verify_check", [
    # refused at open by its size (slabs/check), before any read of the bytes
    ("garbage", "the manifest says", "shard_unreadable"),
    ("truncate", "the manifest says", "shard_unreadable"),
    ("folder", "missing", "shard_missing"),
    ("remove", "missing", "shard_missing"),
])
def test_damaged_shard(tmp_path, previous, monkeypatch, damage, inspect_needle, verify_check):
    monkeypatch.chdir(tmp_path)
    d = tmp_path / "out"
    shutil.copytree(previous, d)
    shard = d / json.loads((d / MANIFEST).read_text())["shards"][0]["file"]
    if damage == "garbage":
        shard.write_bytes(b"not parquet at all")
    elif damage == "truncate":
        shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    else:
        shard.unlink()
        if damage == "folder":
            shard.mkdir()
    expect_error(tmp_path, ["inspect", str(d)], 2, shard.name, inspect_needle)
    r = runner.invoke(app, ["verify", str(d), "--json"])
    assert r.exit_code == 1 and verify_check in json.loads(r.stdout)["counts"]


@pytest.mark.parametrize("what", ["empty_folder", "a_file", "missing"])
def test_inspect_and_verify_not_an_output(tmp_path, monkeypatch, what):
    monkeypatch.chdir(tmp_path)
    p = tmp_path / what
    if what == "empty_folder":
        p.mkdir()
    elif what == "a_file":
        p.write_text("hello")
    expect_error(tmp_path, ["inspect", str(p)], 2, what, "not a packtool output")
    r = runner.invoke(app, ["verify", str(p)])
    # a folder is checked and fails (1); a path that is no folder is bad usage (2, README's table)
    assert r.exit_code == (1 if what == "empty_folder" else 2), r.output
    assert "not a packtool output" in r.output and "Traceback" not in r.output


@pytest.mark.parametrize("kind,content,needle", [
    ("--plan", b"garbage", "cannot be read as a plan file"),
    ("--plan", None, "no such file"),
    ("--lengths", None, "no such file"),
    ("--lengths", b"\x00\x01garbage", "is not a .npy file"),
])
def test_inspect_bad_plan_or_lengths(tmp_path, monkeypatch, kind, content, needle):
    monkeypatch.chdir(tmp_path)
    p = tmp_path / ("f.parquet" if kind == "--plan" else "f.npy")
    if content is not None:
        p.write_bytes(content)
    expect_error(tmp_path, ["inspect", kind, str(p)], 2, "f.", needle)


# --- usage, debug, internal errors -----------------------------------------------------

def test_inspect_needs_exactly_one_source(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    expect_error(tmp_path, ["inspect", "--json"], 2, "exactly one of", json_out=True)


def test_traceback_only_in_debug(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["plan", "--lengths", "nope.npy"])
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    r = runner.invoke(app, ["--debug", "plan", "--lengths", "nope.npy"])
    assert r.exit_code == 2 and "Traceback" in r.stderr and r.stderr.strip().splitlines()[-1].startswith("error:")
    r = runner.invoke(app, ["plan", "--lengths", "nope.npy"], env={"PACKTOOL_DEBUG": "1"})
    assert r.exit_code == 2 and "Traceback" in r.stderr


def test_internal_error_says_bug_exit_3(tmp_path, monkeypatch):
    import packtool.planning.lengths as core
    monkeypatch.chdir(tmp_path)

    def broken(*a, **k):
        raise KeyError("config")
    monkeypatch.setattr(core, "load_lengths", broken)
    line = expect_error(tmp_path, ["plan", "--lengths", "x.npy", "--json"], 3, "internal error", "KeyError",
                        "--debug", json_out=True)
    assert "'config'" in line
