"""What a tokenize run settles before it encodes anything, for both engines: the inputs, their
shapes, the tokenizer and template (`_setup`, with the notes said on every run, cached or not),
the cache key (`_fingerprint`, over the inputs' content, the shapes, the tokenizer's hashes and
the options that change the tokens) and the finished cache under that key, reused when it checks
out (`reusable_cache`), handed out naming this run's tokenizer and options from what the request
loaded (`CacheRequest.this_run`: one load, one hash per run). `CacheRequest` carries it all;
the encode pipeline (`pipeline`) builds the cache when there is none.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, replace

import tokenizers

from packtool.errors import PacktoolInputError, PacktoolOutputError, arg, missing, takes
from packtool.notes import note
from packtool.output.leftovers import mark, remove_tree, unmark
from packtool.storage import is_uri, join_uri
from packtool.tokenize.cache import TokenizedCache, cache_problem
from packtool.tokenize.cache_entry import CACHE_FORMAT, CACHE_VERSION, SIDE_STORE
from packtool.tokenize.cache_root import check_cache_dir, default_cache_dir, refuse_unwritable_root
from packtool.tokenize.checksum import fast_digest
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.encode import LoadedTokenizer, TokenizerInfo, load_tokenizer, refuse_absent_specials
from packtool.tokenize.folder_templates import refuse_gone
from packtool.tokenize.hf_input import batches_of, columns_of, key_of, resolve_sources
from packtool.tokenize.readers import InputFile
from packtool.tokenize.row_checks import TRL_MASKS
from packtool.tokenize.late_columns import told_from
from packtool.tokenize.same_inputs import note_same_inputs
from packtool.tokenize.shape_detect import Shape, detect_shape, unread_shapes
from packtool.tokenize.side_values import SIDE_VALUES
from packtool.tokenize.templates import Renderer, load_template


def fingerprint_versions(side: bool) -> dict:
    """The parts of the input fingerprint that change with packtool's cache layout or the
    tokenizers library, not with the inputs, options or tokenizer: pack records them in the
    manifest (`input.versions`), so that `verify --source` can tell a new version from an
    edited fingerprint."""
    v = {"format": CACHE_FORMAT, "version": CACHE_VERSION, "tokenizers": tokenizers.__version__}
    if side:  # how flat/ lays side columns out: a new layout, a new key
        v.update(side_store=SIDE_STORE, side_values=SIDE_VALUES)
    return v


def _fingerprint(files: list[InputFile], digests: list[str], cfg: TokenizeConfig,
                 info: TokenizerInfo | None, shapes: list[Shape], backend: tuple = ()) -> str:
    opts = cfg.as_dict()
    opts.pop("batch_size")          # changes row groups, not content
    opts.pop("tokenizer")           # identified by content hashes below
    opts.pop("chat_template")
    for k in ("side_columns", "support_columns"):  # none: the key of caches made before them
        if not opts[k]:
            opts.pop(k)
    versions = fingerprint_versions(bool(cfg.side_columns or cfg.support_columns))
    for k in ("side_store", "side_values"):  # inside the options: the key of caches made so far
        if k in versions:
            opts[k] = versions.pop(k)
    key = {
        **versions,
        # content, not size + mtime: an input edited in place keeping both is a new key
        "inputs": [[f.path, d] for f, d in zip(files, digests)],
        "shapes": [[s.kind, list(s.columns), s.templated] + ([list(s.side)] if s.side else []) for s in shapes],
        "tokenizer": [info.sha256, info.config_sha256, info.template_sha256, info.bos_id,
                      info.eos_id, info.pad_id] if info else None,
        "options": opts,
    }
    if any(s.told_from for s in shapes):  # entries built before every row's columns were held to the shape
        key["late_columns"] = 1
    if backend:  # tokenizer_config.json's keys applied to the backend (backend_keys); none: the old key
        key["tokenizer"].append([list(kv) for kv in backend])
    if info and info.special_tokens_map_sha256:  # where read (FolderSpecials); none: the old key
        key["tokenizer"].append(["special_tokens_map", info.special_tokens_map_sha256])
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def no_rows_error(path: str) -> PacktoolInputError:
    split = f", and {arg('split')} for a dataset" if takes("split") else ""  # verify has none (errors.takes)
    return PacktoolInputError(f"empty dataset (no rows): remove it from the inputs (or check the path{split})",
                              path=path)


def _setup(inputs, cfg: TokenizeConfig):
    files = resolve_sources(inputs)  # files, folders, globs, datasets and Arrow objects
    columns = [columns_of(f) for f in files]
    loaded: LoadedTokenizer | None = None
    if cfg.tokenizer:
        loaded = load_tokenizer(cfg.tokenizer, cfg)
    template = load_template(cfg.chat_template, loaded.folder_template if loaded else None)
    # the folder's template link to nothing, where its templates are the ones used: a shape that
    # would be templated with it is, and is refused naming the link (refuse_gone)
    gone = loaded.template_gone if loaded and cfg.chat_template is None else None
    for f, c in zip(files, columns):
        if not c:
            raise no_rows_error(f.path)
    empty = [_without_values(f, c, cfg) for f, c in zip(files, columns)]
    # a JSON file's later rows are held to the columns its shape was told from (late_columns)
    shapes = [told_from(detect_shape(c, cfg, f.path, template is not None or gone is not None, e), f, c, e)
              for f, c, e in zip(files, columns, empty)]
    refuse_gone(gone, shapes)
    for f, c, s, e in zip(files, columns, shapes, empty):
        _note_unread(f.path, c, s, cfg, e)
        if s.kind == "tokens" and all(m in s.columns for m in TRL_MASKS):  # read as one (token_rows)
            note(f"{f.path}: gives both assistant_masks and completion_mask: its targets are the tokens where "
                 f"both are 1, as TRL trains (completion_mask marks the whole completion, assistant_masks the "
                 f"assistant's tokens within it)")
    for f, s in zip(files, shapes):
        if s.kind != "tokens" and loaded is None:
            raise missing(PacktoolInputError, "tokenizer", f"shape {s.kind} needs {arg('tokenizer')}", path=f.path)
    if loaded is not None:
        loaded.info = replace(loaded.info, chat_template=template.name if template else None,
                              template_sha256=template.sha256 if template else None)
    if template is not None and any(s.kind in ("chat", "sharegpt") or s.templated for s in shapes):
        _note_header_in_loss(template, special_tokens(loaded.info if loaded else None))
    return files, shapes, loaded, template


def _without_values(f, columns: list[str], cfg) -> frozenset[str]:
    """The columns of a file's known shapes, when it has more than one, that are null on every
    row (an exporter's all-null column is no second shape). Read only then, those columns only,
    stopping once each holds a value; a stream is not read twice (nothing found)."""
    from packtool.tokenize.shape_detect import shape_columns
    cols = shape_columns(set(columns), cfg.text_field or "text")
    if not cols or not (isinstance(f, InputFile) or f.kind in ("arrow-table", "hf-dataset", "arrow-dataset")):
        return frozenset()
    left = set(cols)
    for batch in batches_of(f, 1 << 14, sorted(cols)):
        left = {c for c in left if batch.column(c).null_count == batch.num_rows}
        if not left:
            break
    return frozenset(left)


def _note_unread(path, columns, shape: Shape, cfg, empty: frozenset[str] = frozenset()) -> None:
    """Another shape's columns in a file packed as the shape the user chose are content left
    out: said on every run, cached or not, never dropped without a word."""
    for kind, cols in unread_shapes(columns, shape, cfg, empty):
        note(f"{path}: columns {', '.join(cols)} (shape {kind}) are not read: this file is packed as "
             f"shape {shape.kind} ({', '.join(shape.columns)}), as asked")


def special_tokens(info) -> dict[str, str]:
    """The special-token strings a template may use (bos_token, eos_token, pad_token)."""
    return {k: v for k, v in (("bos_token", info and info.bos_token), ("eos_token", info and info.eos_token),
                              ("pad_token", info and info.pad_token)) if v}


def _note_header_in_loss(template, special: dict) -> None:
    """Said on every run that uses such a template, cached or not (the loss masks are the same)."""
    if Renderer(template, special).ignores_generation_prompt():
        note(f"chat template {template.name} ignores add_generation_prompt, so each assistant "
             f"turn's role header is counted in the loss (nothing marks where the reply starts); "
             f"add an `{{% if add_generation_prompt %}}` branch that writes the assistant header, "
             f"or {{% generation %}} blocks around assistant content (docs/TOKENIZATION.md)")


@dataclass(frozen=True)
class CacheRequest:
    """What both engines resolve before tokenizing: the inputs, their shapes, the tokenizer
    and template, the fingerprint, and where its cache lives (and the cache, if finished)."""
    files: list
    shapes: list
    loaded: LoadedTokenizer | None
    template: object
    fingerprint: str
    root: str               # cache root directory
    final: str              # this fingerprint's directory
    existing: TokenizedCache | None
    digests: tuple = ()     # xxh3-128 of each input's content (the key), in `files` order
    cfg: TokenizeConfig | None = None  # this run's options, which a reused entry names

    def __post_init__(self) -> None:
        # Whoever found the finished entry (resolve_cache, or the pipeline's store pull through
        # dataclasses.replace) hands it out naming this run; idempotent, so replace may repeat it.
        if self.existing is not None:
            self.this_run(self.existing)

    @property
    def info(self) -> TokenizerInfo | None:
        return self.loaded.info if self.loaded else None

    def this_run(self, cache: TokenizedCache) -> TokenizedCache:
        """A reused entry, naming the tokenizer and options this run was given. The key holds
        the tokenizer's and template's content hashes, not their paths (nor `batch_size`), so
        an entry an earlier run built from a copy at another path is reused; its manifest must
        still name what this run was given (`verify --source` re-reads it from there). Only the
        paths differ: the hashes and ids are the key's. Named from the tokenizer and template
        this request already loaded and hashed: one load and one hash per run."""
        if not cache.reused or self.cfg is None:
            return cache
        cache.meta = {**cache.meta, "config": self.cfg.as_dict()}
        if cache.tokenizer_info is not None and self.loaded is not None:
            cache.tokenizer_info = replace(cache.tokenizer_info, path=self.loaded.info.path,
                                           chat_template=self.template.name if self.template else None)
        return cache


def input_digests(files: list) -> list[str]:
    """xxh3-128 of every input file's bytes (the cache key; re-checked after tokenizing); an
    object input's own fingerprint (hf_input.key_of)."""
    return [fast_digest(f.path) if isinstance(f, InputFile) else key_of(f)[1] for f in files]


def resolve_cache(inputs, cfg: TokenizeConfig, cache_dir: str | None, digest=None) -> CacheRequest:
    """Inputs, shapes, tokenizer and key; the finished cache for that key when every file it
    holds re-hashes to its record. A damaged one is set aside in one line and rebuilt.
    `digest(files)`: `input_digests`' values computed elsewhere (the Ray engine: in tasks).
    The cache root is checked first, as pack checks it: every entry that tokenizes (the
    library's tokenize_to_cache, both engines) passes here before it reads or writes."""
    given = cache_dir
    cache_dir = check_cache_dir(cache_dir, inputs if isinstance(inputs, (list, tuple)) else [inputs])
    files, shapes, loaded, template = _setup(inputs, cfg)
    if loaded is not None:  # the key and the manifest name what is done, as the flag would
        cfg = loaded.switches.settle(cfg)
        refuse_absent_specials(cfg, loaded.info, shapes)
    digests = (digest or input_digests)(files)
    note_same_inputs(files, digests)  # rows under two names: said (a copy may be an upsample)
    fp = _fingerprint(files, digests, cfg, loaded.info if loaded else None, shapes, loaded.backend if loaded else ())
    root = cache_dir or default_cache_dir()
    final = join_uri(root, fp[:32])  # a store entry (store_cache) is checked by its user
    existing = None
    if not is_uri(root):  # an entry is built here unless one is reused: the root must take it
        existing = reusable_cache(final, fp, lambda problem: refuse_unwritable_root(
            given, f"its entry for these inputs ({final}) is damaged ({problem}) and cannot be rebuilt there"))
        if existing is None:
            refuse_unwritable_root(given, "it holds no entry for these inputs and options (a cache that "
                                          "cannot be written serves only the entries it holds)")
    return CacheRequest(files, shapes, loaded, template, fp, root, final, existing, tuple(digests), cfg)


def reusable_cache(final: str, fingerprint: str, before_rebuild=None, named: str | None = None) -> TokenizedCache | None:
    """The cache at `final` if it exists and checks out; None (after saying why, once, and
    removing it) if it is damaged or stale; None if there is none. `before_rebuild(problem)`:
    asked before a damaged entry is said to be rebuilt and removed (it refuses where it cannot).
    `named`: the entry as the user knows it, said instead of `final` (a store entry, not the
    machine's mirror of it)."""
    if not os.path.lexists(final):
        return None
    problem = cache_problem(final, fingerprint)
    if problem is None:
        return TokenizedCache(final, reused=True)
    if os.path.islink(final) or not os.path.isdir(final):
        # packtool makes every entry a folder: this one is the user's (a link to a shared entry,
        # a file), and renaming it aside would put it under a name packtool then disowns
        what = "a symbolic link" if os.path.islink(final) else "not a folder"
        raise PacktoolOutputError(f"is damaged ({problem}) and is {what}, which packtool did not make, so it "
                                  f"left it: remove it or mend what it holds, and re-run", path=final)
    from packtool.output.entry_files import foreign_in_entry
    foreign = foreign_in_entry(final)
    if foreign:  # deleted whole, the entry would take them along: a user's file is never lost
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        raise PacktoolOutputError(f"is damaged ({problem}) and holds files packtool did not write there "
                                  f"({', '.join(foreign[:3])}{more}); packtool deletes a damaged entry whole, "
                                  f"so it left it: move them out of it and re-run", path=final)
    if before_rebuild is not None:
        before_rebuild(problem)
    note(f"tokenized cache {named or final} is damaged ({problem}); rebuilding it from the inputs")
    discard_cache(final)
    return None


def discard_cache(final: str) -> None:
    """Move a damaged cache aside (one rename: no reader sees it half-deleted), then delete it."""
    aside = f"{final}.damaged-{os.getpid()}"
    folder = os.path.isdir(final) and not os.path.islink(final)  # never mark through a link
    try:
        if folder:
            unmark(final)  # a marker a killed run left in it is replaced by this run's
            mark(final)  # before the rename: the set-aside name is never seen unproven (output.leftovers)
    except OSError:
        pass
    try:
        os.replace(final, aside)
    except OSError:
        if folder:
            unmark(final)  # another run moved or replaced it first: ours is no leftover there
        return
    remove_tree(aside)
