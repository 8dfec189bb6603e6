"""Every field of the manifest's provenance record (FORMAT.md, "The provenance record"), edited,
under `verify` and `verify --source` (stranger trial S30-11: an edited `input.fingerprint` and an
edited `input.files[0]` sha256 both passed, and the note blamed an input file whose sha256 still
matched). Each edit is one case: the exit code, the one line (a `manifest` problem naming the
field, or a note naming the cause), and no input file blamed that did not change. A
well-formed edit only the source can tell; a malformed one both tell; a field FORMAT.md says
cannot be checked passes both, silently. Last, the true causes: a file changed since pack,
a new tokenizers version, an older output that records no versions."""
from __future__ import annotations

import json
import shutil

import pytest
from conftest import GPT2, GSM8K
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.slabs.format import MANIFEST

runner = CliRunner()
ZEROS = "0" * 64


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    root = tmp_path_factory.mktemp("provenance")
    src = root / "gsm.jsonl"
    src.write_text("".join(open(GSM8K).readlines()[:24]))
    r = runner.invoke(app, ["pack", str(src), "--tokenizer", GPT2, "-C", "1024", "-o", str(root / "out"), "-q",
                            "--cache-dir", str(root / "cache")])
    assert r.exit_code == 0, r.output
    return root, src


def _field(path):
    """An edit of one manifest field: `path` as keys/indices, the new value from the old one."""
    def edit(fn):
        def run(man, root):
            *up, last = path
            where = man
            for k in up:
                where = where[k]
            if fn is _REMOVE:
                del where[last]
            else:
                where[last] = fn(where.get(last) if isinstance(where, dict) else where[last])
        return run
    return edit


def _REMOVE(v):
    return v


FILE0 = ("input", "files", 0)
# name: (edit, plain verify's (exit, field named), verify --source's (exit, field named or None))
WELL_FORMED = {
    "fingerprint zeros": (_field(("input", "fingerprint"))(lambda v: ZEROS), "input.fingerprint"),
    "file sha256 zeros": (_field(FILE0 + (2,))(lambda v: ZEROS), "input.files[0] sha256"),
    "file bytes +1": (_field(FILE0 + (1,))(lambda v: v + 1), "input.files[0] bytes"),
    "file path elsewhere": (_field(FILE0 + (0,))(lambda v: "/elsewhere/gsm.jsonl"), "input.files[0] path"),
    "file listed twice": (_field(("input", "files"))(lambda v: v + v), "input.files"),
    "tokenizers version": (_field(("input", "versions", "tokenizers"))(lambda v: "0.0.1"),
                           "input.versions.tokenizers"),
    "cache version": (_field(("input", "versions", "version"))(lambda v: v - 1), "input.versions.version"),
    # the source is tokenized with the record's options: another fingerprint, nothing else differs
    "tokenize option": (_field(("input", "tokenize", "on_empty"))(lambda v: "skip"), "input.fingerprint"),
    "tokenizer sha256": (_field(("tokenizer", "sha256"))(lambda v: ZEROS), "tokenizer.sha256"),
    "tokenizer config sha256": (_field(("tokenizer", "config_sha256"))(lambda v: ZEROS), "tokenizer.config_sha256"),
    "template sha256": (_field(("tokenizer", "template_sha256"))(lambda v: ZEROS), "tokenizer.template_sha256"),
    "eos id": (_field(("tokenizer", "eos_id"))(lambda v: v - 1), "tokenizer.eos_id"),
    "bos token": (_field(("tokenizer", "bos_token"))(lambda v: "<s>"), "tokenizer.bos_token"),
    "vocab size": (_field(("tokenizer", "vocab_size"))(lambda v: v + 7), "tokenizer.vocab_size"),
}
MALFORMED = {
    "fingerprint not hex": (_field(("input", "fingerprint"))(lambda v: "XYZ"), "input.fingerprint"),
    "fingerprint upper case": (_field(("input", "fingerprint"))(str.upper), "input.fingerprint"),
    "fingerprint removed": (_field(("input", "fingerprint"))(_REMOVE), "input.fingerprint"),
    "file sha256 short": (_field(FILE0 + (2,))(lambda v: "abc"), "input.files[0] sha256"),
    "file bytes negative": (_field(FILE0 + (1,))(lambda v: -1), "input.files[0] bytes"),
    "file not a triple": (_field(FILE0)(lambda v: v[:1]), "input.files[0]"),
    "files not a list": (_field(("input", "files"))(lambda v: "gsm.jsonl"), "input.files"),
    "versions not an object": (_field(("input", "versions"))(lambda v: "3"), "input.versions"),
    "tokenize option bad": (_field(("input", "tokenize", "shape"))(lambda v: "nonsense"), "input.tokenize"),
    "tokenizer sha256 not hex": (_field(("tokenizer", "sha256"))(lambda v: "zz"), "tokenizer.sha256"),
    "tokenizer path a number": (_field(("tokenizer", "path"))(lambda v: 5), "tokenizer.path"),
    "packtool version removed": (_field(("packtool_version",))(_REMOVE), "packtool_version"),
}
# FORMAT.md: labels and options the fingerprint does not cover; neither run can tell, neither says
NOT_CHECKABLE = {
    "batch size": _field(("input", "tokenize", "batch_size"))(lambda v: 7),
    "tokenize tokenizer path": _field(("input", "tokenize", "tokenizer"))(lambda v: "/elsewhere/tokenizer.json"),
    "tokenizer path": _field(("tokenizer", "path"))(lambda v: "/elsewhere/tokenizer.json"),
    "chat template name": _field(("tokenizer", "chat_template"))(lambda v: "chatml"),
    "packtool version": _field(("packtool_version",))(lambda v: "9.9.9"),
    "versions removed (an older output)": _field(("input", "versions"))(_REMOVE),
}
CASES = sorted([(n, "well-formed") for n in WELL_FORMED] + [(n, "malformed") for n in MALFORMED]
               + [(n, "not checkable") for n in NOT_CHECKABLE])


def _verify(root, out, source: bool):
    extra = ["--source", str(root / "gsm.jsonl"), "--tokenizer", GPT2] if source else []
    r = runner.invoke(app, ["verify", str(out), "--json", "--workers", "1", "--cache-dir", str(root / "c"), *extra])
    d = json.loads(r.stdout.strip().splitlines()[-1])
    return r.exit_code, d["problems"], d["notes"]


def _edited(packed, tmp_path, edit):
    root, _ = packed
    out = tmp_path / "out"
    shutil.copytree(root / "out", out)
    man = json.loads((out / MANIFEST).read_text())
    edit(man, root)
    (out / MANIFEST).write_text(json.dumps(man))
    return out


def _no_file_blamed(problems, notes):
    said = [p["message"] for p in problems] + notes
    assert not any("gsm.jsonl changed" in s or "the files gsm.jsonl" in s for s in said), said


@pytest.mark.parametrize("source", [False, True], ids=["verify", "verify --source"])
@pytest.mark.parametrize("case, kind", CASES)
def test_each_provenance_field_edit(packed, tmp_path, case, kind, source):
    root, _ = packed
    edit = {"well-formed": WELL_FORMED, "malformed": MALFORMED}.get(kind, {}).get(case, (None, None))
    out = _edited(packed, tmp_path, edit[0] or NOT_CHECKABLE.get(case))
    code, problems, notes = _verify(root, out, source)
    _no_file_blamed(problems, notes)
    if kind == "not checkable" or (kind == "well-formed" and not source):
        assert (code, problems, notes) == (0, [], []), (case, problems, notes)
        return
    field = edit[1]
    assert code == 1 and {p["check"] for p in problems} == {"manifest"}, (case, problems, notes)
    assert len(problems) == 1 and f"the manifest's {field} " in problems[0]["message"], (case, problems)
    if kind == "malformed" and source:  # the source's tokens compared (or not), the record not: said once
        assert len(notes) == 1 and "not compared" in notes[0], notes
    else:
        assert notes == [], notes


def test_a_file_changed_since_pack_is_named_with_both_hashes(packed, tmp_path):
    """Its JSON parses to the same rows (a space added): the tokens hold, the note names the file."""
    import hashlib
    root, src = packed
    out = _edited(packed, tmp_path, lambda man, root: None)
    before = src.read_text()
    was = hashlib.sha256(before.encode()).hexdigest()
    try:
        src.write_text(before.replace("}\n", "} \n", 1))
        code, problems, notes = _verify(root, out, True)
        now = hashlib.sha256(src.read_bytes()).hexdigest()
    finally:
        src.write_text(before)
    assert (code, problems, len(notes)) == (0, [], 1), (problems, notes)
    assert f"gsm.jsonl changed since pack (sha256 {now}, the manifest records {was})" in notes[0], notes


def test_a_new_tokenizers_version_is_said_not_called_damage(packed, tmp_path, monkeypatch):
    import tokenizers
    root, _ = packed
    out = _edited(packed, tmp_path, lambda man, root: None)
    was = json.loads((out / MANIFEST).read_text())["input"]["versions"]["tokenizers"]
    monkeypatch.setattr(tokenizers, "__version__", "0.0.0+test")
    code, problems, notes = _verify(root, out, True)
    _no_file_blamed(problems, notes)
    assert (code, problems, len(notes)) == (0, [], 1), (problems, notes)
    assert f"tokenizers 0.0.0+test (pack: {was})" in notes[0], notes


def test_an_older_output_without_versions_says_either(packed, tmp_path):
    """No `input.versions` (an older packtool): another fingerprint with nothing else differing
    is a version change or an edit; the note says both, the verdict stays the tokens'."""
    def edit(man, root):
        del man["input"]["versions"]
        man["input"]["fingerprint"] = ZEROS
    root, _ = packed
    out = _edited(packed, tmp_path, edit)
    assert _verify(root, out, False) == (0, [], [])
    code, problems, notes = _verify(root, out, True)
    _no_file_blamed(problems, notes)
    assert (code, problems, len(notes)) == (0, [], 1), (problems, notes)
    assert "either one of those changed since pack or the manifest's input.fingerprint was edited" in notes[0]


def test_a_tokenizer_changed_at_the_same_path_is_named_by_its_hash(packed, tmp_path):
    """The same --tokenizer path, other bytes (the same vocabulary, so the same tokens): the note
    names the tokenizer's content, not an input file."""
    import hashlib
    root, src = packed
    tok = tmp_path / "tokenizer.json"
    shutil.copy(GPT2, tok)
    # a cache of its own: the fixture's (same content, so the same key) would record GPT2's path
    r = runner.invoke(app, ["pack", str(src), "--tokenizer", str(tok), "-C", "1024", "-o", str(tmp_path / "out"),
                            "-q", "--cache-dir", str(tmp_path / "cache")])
    assert r.exit_code == 0, r.output
    was = hashlib.sha256(tok.read_bytes()).hexdigest()
    tok.write_text(tok.read_text() + "\n")
    now = hashlib.sha256(tok.read_bytes()).hexdigest()
    r = runner.invoke(app, ["verify", str(tmp_path / "out"), "--json", "--workers", "1", "--cache-dir",
                            str(root / "c"), "--source", str(src)])
    d = json.loads(r.stdout.strip().splitlines()[-1])
    _no_file_blamed(d["problems"], d["notes"])
    assert (r.exit_code, d["problems"], len(d["notes"])) == (0, [], 1), d
    assert f"tokenizer content (tokenizer.sha256 {now}, pack: {was})" in d["notes"][0], d["notes"]
