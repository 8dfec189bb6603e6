"""`verify --source`: the source side of verify. The tokenization `pack` recorded (read back,
checked, with the flags given winning), the source re-tokenized into a fresh store, and the
manifest's provenance record (slabs/provenance.py) held to what that source gives: each input
file's path, size and sha256, the options, the tokenizer, the versions and the fingerprint
over them. A difference is said once, as its cause: a file that changed since pack (or
another file), other options or tokenizer, a newer packtool or tokenizers (a note; the token
comparisons decide the verdict), or a manifest whose record disagrees with itself (a
`manifest` problem naming the field)."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from packtool.slabs.format import FormatError, NotAnOutputError, read_manifest
from packtool.slabs.provenance import NOT_IN_FINGERPRINT, TOKENIZER_HASHES, TOKENIZER_IDENTITY, recorded_files
from packtool.verification.problems import ProblemLog

_EDITED = "the manifest was edited: re-run `packtool pack` (or restore the field)"
# how a note names each version the fingerprint keys on (tokenize.request.fingerprint_versions)
_VERSION_NAMES = {"format": "tokenized-cache format", "version": "tokenized-cache version",
                  "tokenizers": "tokenizers", "side_store": "side-column store version",
                  "side_values": "side-value rules version"}


@dataclass(frozen=True)
class SourceRecord:
    """What the --source gives for each fact of the manifest's provenance record."""
    fingerprint: str
    files: list[tuple] | None  # (path, bytes, sha256); bytes and sha256 None where not known
    tokenize: dict | None      # TokenizeConfig.as_dict() the source was tokenized with
    tokenizer: dict | None     # the tokenizer block pack would write (None: token ids, or not known)
    versions: dict             # tokenize.request.fingerprint_versions of the source's key
    hashed: bool               # files, tokenizer and versions read from the source's own cache


def source_record(source_dir: str | None, fingerprint: str | None, tokenize, files) -> SourceRecord | None:
    """The source's facts: from the tokenized cache behind `source_dir` (what `source_store`
    makes) when there is one, else from the fingerprint, options and paths the caller gave."""
    from packtool.errors import PacktoolError
    from packtool.tokenize.cache import tokenizer_meta
    from packtool.tokenize.flat_tokens import cache_of_store
    from packtool.tokenize.request import fingerprint_versions
    try:
        cache = cache_of_store(source_dir) if source_dir is not None else None
    except PacktoolError:  # a damaged or older cache: the tokens are compared, the record not
        cache = None
    if cache is not None:
        cfg = cache.meta.get("config") or {}
        versions = fingerprint_versions(bool(cfg.get("side_columns") or cfg.get("support_columns")))
        versions["tokenizers"] = cache.meta.get("tokenizers_version", versions["tokenizers"])
        return SourceRecord(fingerprint or cache.fingerprint, [tuple(f) for f in cache.input_files], cfg,
                            tokenizer_meta(cache.tokenizer_info), versions, True)
    if fingerprint is None:
        return None
    cfg = tokenize.as_dict() if tokenize is not None else None
    side = bool(cfg and (cfg.get("side_columns") or cfg.get("support_columns")))
    return SourceRecord(fingerprint, None if files is None else [(os.path.abspath(f), None, None) for f in files],
                        cfg, None, fingerprint_versions(side), False)


def check_input_record(man: dict, src: SourceRecord, log: ProblemLog, notes: list[str]) -> None:
    """Hold the manifest's provenance record to the source. The same fingerprint: every fact it
    covers must be the source's, so one that is not was edited. Another fingerprint: the cause
    is named (files, options, tokenizer, versions); with none left, the fingerprint was edited."""
    want = (man.get("input") or {}).get("fingerprint")
    if not want:
        return
    if src.fingerprint == want:
        for name, recorded, given in _covered_facts(man, src):
            if _plain(recorded) != _plain(given):
                log.add("manifest", f"the manifest's {name} is {recorded!r}, but the --source gives {given!r} "
                        f"with the input fingerprint the manifest records (the same files, options and "
                        f"tokenizer as pack): {_EDITED}", expected=given, found=recorded)
        return
    causes = _what_differs(man, src)
    said = (f"the source and tokenization options give input fingerprint {src.fingerprint}, the manifest "
            f"says {want}")
    if causes:
        notes.append(f"{said}: not the same files or options as `pack`: {'; '.join(causes)} "
                     f"(differences below would follow from that)")
    elif "versions" in man["input"]:
        log.add("manifest", f"the manifest's input.fingerprint is {want}, but the files (path, bytes, sha256), "
                f"options, tokenizer and versions it records are the --source's, which give "
                f"{src.fingerprint}: the manifest's input.fingerprint was edited (or an input.tokenize "
                f"option it keys on): re-run `packtool pack`",
                expected=src.fingerprint, found=want)
    else:
        notes.append(f"{said}: the files (path, bytes, sha256), options and tokenizer are the ones the manifest "
                     f"records, which records no tokenizers or tokenized-cache version (an older packtool "
                     f"packed it): either one of those changed since pack or the manifest's "
                     f"input.fingerprint was edited")


def _plain(v):
    """JSON's view of a value: a tuple and a list of the same items are the same record."""
    return json.loads(json.dumps(v, default=str))


def _covered_facts(man: dict, src: SourceRecord):
    """(manifest field, recorded, source's) for every fact the fingerprint covers."""
    rec = man["input"]
    files = recorded_files(man)
    if src.files is not None:
        if len(files) != len(src.files):
            yield "input.files", [f[0] for f in files], [f[0] for f in src.files]
        else:
            for i, (mine, theirs) in enumerate(zip(files, src.files)):
                for j, part in enumerate(("path", "bytes", "sha256")[:3 if src.hashed else 1]):
                    yield f"input.files[{i}] {part}", mine[j], theirs[j]
    if isinstance(rec.get("versions"), dict):
        for k in sorted(set(rec["versions"]) | set(src.versions)):
            yield f"input.versions.{k}", rec["versions"].get(k), src.versions.get(k)
    was = rec.get("tokenize") or {}
    for k, v in (src.tokenize or {}).items():
        if k in was and k not in NOT_IN_FINGERPRINT:
            yield f"input.tokenize.{k}", was[k], v
    if src.tokenizer is not None:
        tok = man.get("tokenizer") or {}
        for k in TOKENIZER_IDENTITY:
            yield f"tokenizer.{k}", tok.get(k), src.tokenizer.get(k)


def _what_differs(man: dict, src: SourceRecord) -> list[str]:
    """Each cause of another fingerprint, in one phrase: `tokenizer A (pack: B)`, `files ...`,
    `x.jsonl changed since pack (...)`, `tokenizers 0.22 (pack: 0.21)`: the thousand token
    mismatches that follow are explained by their cause in one line."""
    rec = man.get("input") or {}
    said = _options_differ(rec.get("tokenize") or {}, src.tokenize)
    tok = man.get("tokenizer") or {}
    if src.tokenizer is not None and tok and not any(s.startswith("tokenizer ") for s in said):
        said += [f"tokenizer content (tokenizer.{k} {src.tokenizer.get(k)}, pack: {tok.get(k)})"
                 for k in TOKENIZER_HASHES if tok.get(k) != src.tokenizer.get(k)][:1]
    said += _files_differ(recorded_files(man), src, bool(said))
    if isinstance(rec.get("versions"), dict):
        said += [f"{_VERSION_NAMES.get(k, k)} {src.versions.get(k)} (pack: {v})"
                 for k, v in sorted(rec["versions"].items()) if src.versions.get(k) != v]
    else:
        from packtool import __version__
        if man.get("packtool_version") != __version__:
            said.append(f"packtool {__version__} (pack: {man.get('packtool_version')})")
    return said


# tokenize options verify --source takes as flags of the same name (the fix a note can give)
_FLAGGED = {"chat_template", "tokenizer", "on_empty", "prompt_field", "response_field", "text_field", "shape"}


def _options_differ(was: dict, given: dict | None) -> list[str]:
    said = []
    for k, v in (given or {}).items():
        old = was.get(k)
        if k in was and _plain(old) != _plain(v) and not (
                k == "tokenizer" and v and old and os.path.realpath(v) == os.path.realpath(old)):
            said.append(f"{k} {v} (pack: {old}" + (f": pass --{k.replace('_', '-')} {old})" if k in _FLAGGED else ")"))
    return said


def _files_differ(packed: list[tuple], src: SourceRecord, other_cause: bool) -> list[str]:
    if src.files is None or not packed:
        return []
    paths, given = [f[0] for f in packed], [f[0] for f in src.files]
    if given != paths:
        gone = [p for p in paths if p not in given]
        new = [p for p in given if p not in paths]
        order = _names(paths, [])
        return ["files " + (f"in another order (pack read {', '.join(order[:8])}{' ...' if len(order) > 8 else ''}: "
                            f"give --source in that order)" if not gone and not new else
                            f"{', '.join(_names(new, gone)[:3]) or 'none'} given, "
                            f"{', '.join(_names(gone, new)[:3]) or 'none'} packed but not given")]
    if not src.hashed:  # paths only: the bytes cannot be told from the fingerprint
        return [] if other_cause else [f"the files {', '.join(_names(given, [])[:3])} are the ones pack read: "
                                       f"their content, or the manifest's input.fingerprint, changed since"]
    changed = []
    for (path, size, digest), (_, now_size, now_digest) in zip(packed, src.files):
        if digest is not None and digest != now_digest:
            changed.append(f"{_names([path], [])[0]} changed since pack (sha256 {now_digest}, the manifest "
                           f"records {digest})")
        elif size is not None and size != now_size:
            changed.append(f"{_names([path], [])[0]} changed since pack ({now_size} bytes, the manifest "
                           f"records {size})")
    return changed


def _names(paths: list[str], others: list[str]) -> list[str]:
    """Each file by its name, or by its whole path where the name alone would also name one of
    `others` (a/x.jsonl given, b/x.jsonl packed: "x.jsonl given, x.jsonl packed" reads as the same)."""
    clash = {os.path.basename(p) for p in others}
    return [p if os.path.basename(p) in clash else os.path.basename(p) for p in paths]


def recorded_tokenize(manifest: dict) -> dict:
    """The tokenization `pack` recorded in the manifest (empty for an older output), checked: a
    record TokenizeConfig refuses is a damaged manifest (FormatError, which verify reports as a
    problem: exit 1), never an error about a flag the user did not give."""
    from dataclasses import fields

    from packtool.errors import PacktoolError, spelled_as
    from packtool.tokenize.config import TokenizeConfig
    rec = (manifest.get("input") or {}).get("tokenize")
    damaged = "the manifest is edited or damaged: re-run `packtool pack`"
    if rec is None:
        return {}
    if not isinstance(rec, dict):
        raise FormatError(f"the manifest's input.tokenize is not an object; {damaged}")
    names = {f.name for f in fields(TokenizeConfig)}
    rec = {k: v for k, v in rec.items() if k in names}
    try:
        with spelled_as({n: n for n in names}):  # the record's keys, not the CLI's flags
            TokenizeConfig(**rec)
    except (PacktoolError, TypeError) as e:
        raise FormatError(f"the manifest's input.tokenize is not a record pack writes ({e}); {damaged}") from None
    return rec


def source_tokenize_for(directory: str, **flags):
    """`source_tokenize_config` of the output at `directory`, or None when its manifest is
    damaged: verify then reports that damage (exit 1, as without a source) and compares no
    tokens. A `directory` that is not there or is a file raises NotAnOutputError."""
    try:
        man = read_manifest(directory, "directory")
        recorded_tokenize(man)
    except NotAnOutputError:
        raise
    except FormatError:
        return None
    return source_tokenize_config(man, **flags)


def source_tokenize_config(manifest: dict, **flags):
    """The tokenization `pack` recorded in the manifest, with the flags given winning (None =
    not given). Older manifests without the record fall back to their tokenizer identity."""
    from dataclasses import fields

    from packtool.tokenize.config import TokenizeConfig
    base = dict(recorded_tokenize(manifest))
    if not base:
        info = manifest.get("tokenizer") or {}
        base["tokenizer"] = info.get("path")
        if info.get("chat_template") == "tokenizer_config.json" and info.get("path"):
            base["tokenizer"] = os.path.dirname(info["path"])  # the folder's own template
        else:
            base["chat_template"] = info.get("chat_template")
    base.update({k: v for k, v in flags.items() if v is not None})
    names = {f.name for f in fields(TokenizeConfig)}
    return TokenizeConfig(**{k: v for k, v in base.items() if k in names})


def source_store(inputs: list[str], tokenize, cache_dir: str | None = None,
                 progress: bool = False) -> tuple[str, str]:
    """Re-read and re-tokenize the source exactly as `pack` does, into a fresh temporary
    cache (never the cache being checked: a damaged one would vouch for itself), and return
    the FlatTokens directory the shard workers compare against, plus the input fingerprint.
    The temporary cache lives under the cache root (`cache_dir`, the same file system a
    cache was sized for) and is removed when this process exits. A cache on a store
    (`--cache-dir s3://...`) is read through its local mirror under the local root, so the
    temporary goes there too: nothing is put on the store, where no exit hook or sweep of this
    machine could prove it its own (S43-7); what an older packtool's verify left there goes."""
    import atexit

    from packtool.storage import is_uri
    from packtool.tokenize import default_cache_dir, tokenize_to_cache
    from packtool.tokenize.flat_tokens import flat_store_dir, flat_store_for
    from packtool.output.files import make_parents, remove_created
    from packtool.output.leftovers import owned_temp_dir, remove_tree
    from packtool.output.stale import clean_cache
    if cache_dir and is_uri(cache_dir):
        clean_store_leftovers(cache_dir)
        cache_dir = None
    from packtool.tokenize.cache_root import refuse_unwritable_root
    refuse_unwritable_root(cache_dir, "verify --source re-tokenizes the source into a temporary cache there")
    root = cache_dir or default_cache_dir()
    made = make_parents(root)  # verify leaves no --cache-dir folder it made (its cache is temporary)
    clean_cache(root)  # a killed verify's temporary cache goes with the next one
    fresh = owned_temp_dir(f".verify-source-{os.getpid()}-", root, made)

    def gone() -> None:
        remove_tree(fresh)
        remove_created(made)
    atexit.register(gone)
    try:
        cache = tokenize_to_cache(list(inputs), tokenize, cache_dir=fresh, progress=progress)
        flat_store_for(cache)
    except BaseException:
        gone()
        raise
    return flat_store_dir(cache), cache.fingerprint


_STORE_TMP = re.compile(r"^\.verify-source-\d+-[a-z0-9_]{8}\Z")  # owned_temp_dir's name, as output.stale
_ENTRY_KEY = re.compile(r"^[0-9a-f]{32}\Z")  # tokenize.cache: an entry's folder, its key


def clean_store_leftovers(store: str) -> int:
    """Delete the temporary caches an older packtool's `verify --source` put under a store cache
    root (`ROOT/.verify-source-PID-XXXXXXXX/KEY/...`, never removed there), each only when every
    object in it is a cache entry's file that its cache.json records, or the cache.json itself:
    packtool's own by name and content; anything else there is named and kept. The count removed."""
    import pyarrow.fs as pafs

    from packtool.notes import note
    from packtool.storage import locate
    from packtool.tokenize.store_cache import ENTRY_META, recorded_files as entry_files
    root = locate(store)
    gone, kept, found = 0, [], {}
    try:
        listed = root.list()  # one listing; a store's prefix shows no folders of its own
    except FileNotFoundError:
        return 0
    for i in listed:
        name, _, rel = i.path[len(root.path.rstrip("/")) + 1:].partition("/")
        if _STORE_TMP.match(name) and i.type == pafs.FileType.File:
            found.setdefault(name, []).append(rel)
    for name, rels in sorted(found.items()):
        tmp = root.join(name)
        by_key: dict[str, set[str]] = {}
        for rel in rels:
            key, _, inner = rel.partition("/")
            by_key.setdefault(key, set()).add(inner)
        ours = all(_ENTRY_KEY.match(k) and ENTRY_META in inner and
                   inner <= {ENTRY_META, *entry_files(tmp.join(k))} for k, inner in by_key.items())
        if not ours:
            kept.append(tmp.shown)
            continue
        for rel in sorted(rels, key=lambda r: r.endswith(ENTRY_META)):  # cache.json last: never a half entry
            tmp.join(*rel.split("/")).delete()
        try:  # the empty folder objects pyarrow puts for each level: every file in them was checked above
            tmp.fs.delete_dir(tmp.path)
        except OSError:
            pass
        gone += 1
    if gone:
        note(f"removed {gone} temporary cache(s) a `packtool verify --source` of an older packtool left in {root.shown}")
    if kept:
        note(f"kept {', '.join(kept[:3])}: named like `packtool verify --source`'s temporary cache, but it holds objects "
             f"that are not a cache entry's; remove it if it is not yours")
    return gone
