"""A Hugging Face dataset repo given as a plain folder (no --split) or store prefix is refused
(S44-14; L4: a prefix holding one, read as plain objects, packed every split).

What `hf download --repo-type dataset NAME --local-dir DIR` leaves (a README.md whose YAML
declares `configs:`, or split files such as data/train-*.parquet + data/test-*.parquet, or
per-config folders of them) read as a folder packs every configuration and every split: the
model trains on the test rows, and on a row once per configuration, without a word. Such a
folder is one line naming its configurations and splits and the flags that pick one, as a
DatasetDict (save_to_disk) folder is; `datasets.load_dataset` reads it with --split/--config.
A store prefix (given, or matched by a glob) is judged by the same rule from its listing; its
fix names that split's objects, since --split reads no store URI (store_split, with --split).
A folder whose files name one split at most (train-0.jsonl, train-1.jsonl) or none is data the
user gathered, read as before.
"""
from __future__ import annotations

import os
import re

from packtool.errors import PacktoolInputError, arg, cli_flag, takes

# The file/folder name words `datasets` infers a split from (datasets.data_files.SPLIT_KEYWORDS),
# bounded as its patterns bound them (start, `/` or one of "-._ 0-9" on each side).
_KEYWORDS = {"train": ("train", "training"), "validation": ("validation", "valid", "dev", "val"),
             "test": ("test", "testing", "eval", "evaluation")}
_WORD = {w: s for s, words in _KEYWORDS.items() for w in words}
_SPLIT_WORD = re.compile(r"(?:^|(?<=[-._ 0-9/]))(" + "|".join(sorted(_WORD, key=len, reverse=True))
                         + r")(?=[-._ 0-9/])")


# A folder partitioned by split the Spark / pyarrow / polars / DuckDB way (`split=train/`,
# `split=test/`: `partitionBy("split")`, `partition_cols=["split"]`, `PARTITION_BY (split)`), the
# value a split word. datasets' inference does not read such names (its patterns put every file in
# `train`), and the partition value is in no row packtool reads: the test rows could not be told
# apart downstream (S48A-14).
_PARTITION = re.compile(r"(?:^|/)([^/=]+)=(" + "|".join(sorted(_WORD, key=len, reverse=True)) + r")/")


def _split_of(rel: str) -> str | None:
    """The split a file is in by its path below the folder: its partition folder's value, else
    the split `datasets` would put it in (None: no split word)."""
    m = _PARTITION.search(rel) or _SPLIT_WORD.search(rel)
    return _WORD[m.group(m.lastindex)] if m else None


def _partition(rel: str) -> str | None:
    """The partition folder that gives `rel`'s split, as a path below the folder that reads that
    split alone (the partitions of other keys above it as `KEY=*`), or None: none gives it."""
    m = _PARTITION.search(rel)
    if m is None:
        return None
    above = [re.sub(r"=.*", "=*", c) if "=" in c else c for c in rel[:m.start()].split("/") if c]
    return "/".join([*above, f"{m.group(1)}={m.group(2)}"])


README_BYTES = 1 << 20  # a dataset card's YAML header is at its top


def _front_matter(text: str | None) -> str | None:
    """The YAML header of a README's text (None: no README, or none there)."""
    if text is None or not text.lstrip("\ufeff").startswith("---"):
        return None
    body = text.lstrip("\ufeff")[3:]
    end = re.search(r"^---\s*$", body, re.M)
    return body[:end.start()] if end else None


def _declared_configs(readme: str | None) -> list[tuple[str, list[tuple[str, str]], bool]] | None:
    """(name, [(split, path pattern)], default) per configuration a README's YAML declares; None
    when it declares none."""
    yaml_text = _front_matter(readme)
    if yaml_text is None or not re.search(r"^configs\s*:", yaml_text, re.M):
        return None
    try:
        import yaml
        configs = (yaml.safe_load(yaml_text) or {}).get("configs") or []
    except Exception:  # no PyYAML, or YAML datasets would refuse too: still a repo, named loosely
        configs = [{"config_name": n} for n in re.findall(r"config_name\s*:\s*['\"]?([^\s'\"]+)", yaml_text)]
    out = []
    for c in configs if isinstance(configs, list) else []:
        if not isinstance(c, dict):
            continue
        files = c.get("data_files")
        pairs: list[tuple[str, str]] = []
        for d in files if isinstance(files, list) else [files] if files else []:
            if isinstance(d, dict) and "split" in d:
                p = d.get("path")
                # a split of several patterns is every one of them (RA-15: its first alone is part of it)
                pairs += [(str(d["split"]), str(x)) for x in (p if isinstance(p, list) else [p]) if x] or \
                    [(str(d["split"]), "")]
            elif isinstance(d, str):  # a bare pattern is the train split
                pairs.append(("train", d))
        out.append((str(c.get("config_name", "default")), pairs, bool(c.get("default"))))
    return out or [("default", [], True)]


def chosen_config(configs: list, config: str | None):
    """The declared configuration (of `_declared_configs`) `datasets.load_dataset(repo, config)`
    reads: the one given, else its default as datasets' MetadataConfigs.get_default_config_name
    tells it (the only one, the one named "default" or the one marked `default: true`; two of
    those: none). None: none is read without --config. The README's side of `_config_name`,
    for a repo datasets is not given (a store prefix's, a no-split refusal's)."""
    if config is not None:
        return next((c for c in configs if c[0] == config), None)
    marked = [c for c in configs if len(configs) == 1 or c[0] == "default" or c[2]]
    return marked[0] if len(marked) == 1 else None


def split_patterns(configuration, split: str) -> list[str]:
    """Every path pattern a declared configuration gives `split` (none: it does not declare it)."""
    return [p for s, p in configuration[1] if s == split and p]


def refuse_repo_folder(folder: str, files: list[str]) -> None:
    """Refuse `folder` (a folder input read without a split; `files`: the data files below it)
    when it is a dataset repo: its README declares configurations, or its files' names hold
    two splits or more."""
    _refuse(folder, [os.path.relpath(f, folder).replace(os.sep, "/") for f in files], _readme(folder), local=True)


def _readme(folder: str) -> str | None:
    """The head of a local folder's README.md (None: none)."""
    try:
        with open(os.path.join(folder, "README.md"), encoding="utf-8", errors="replace") as f:
            return f.read(README_BYTES)
    except OSError:
        return None


def refuse_repo_prefix(prefix, files: list, listed: set[str]) -> None:
    """The same rule for a store prefix read whole (`prefix`: its Location; `files`: the data
    objects below it; `listed`: every object path the listing saw, so a README.md is read only
    where there is one). `--split` reads no store URI: the fix is that split's objects."""
    base = prefix.path.rstrip("/") + "/"
    _refuse(prefix.shown.rstrip("/"), [f.path[len(base):] for f in files if f.path.startswith(base)],
            _prefix_readme(prefix, listed), local=False)


def _prefix_readme(prefix, listed: set[str]) -> str | None:
    """The head of a store prefix's README.md, read only where the listing saw one."""
    if prefix.path.rstrip("/") + "/README.md" not in listed:
        return None
    with prefix.join("README.md").open_input() as f:
        return f.read(README_BYTES).decode("utf-8", "replace")


def _split_pattern(rel: str) -> str:
    """A glob that reads `rel`'s split: its path up to the split word's end, then `*` (a
    folder it names is read whole)."""
    m = _SPLIT_WORD.search(rel)
    return rel[:m.end()] + "*" if m else rel


def _refuse(folder: str, rels: list[str], readme: str | None, local: bool) -> None:
    """The one rule (`folder`: as shown; `rels`: its data files' paths below it, `/`-separated)."""
    configs = _declared_configs(readme)
    if configs is None:
        by_split: dict[str, str] = {}
        for rel in sorted(rels):
            s = _split_of(rel)
            if s is not None:
                by_split.setdefault(s, rel)
        if len(by_split) < 2:
            return
        splits = sorted(by_split)
        pick = "train" if "train" in by_split else splits[0]
        if _partition(by_split[pick]) is not None:  # --split would read every partition: name the folder
            _refuse_partitions(folder, {s: _partition(r) or r for s, r in by_split.items()}, pick, local)
        what = f"splits {', '.join(splits)} by its file names ({', '.join(by_split[s] for s in splits)})"
        config = None
        patterns = [_split_pattern(by_split[pick])]
    else:
        default = chosen_config(configs, None) or configs[0]  # none: the first, named by --config
        splits = sorted({s for _, pairs, _ in configs for s, _ in pairs}) or ["train"]
        names = [s for s, _ in default[1]]
        pick = "train" if "train" in names else (names[0] if names else splits[0])
        what = (f"configurations {', '.join(c[0] for c in configs)}; splits {', '.join(splits)}, "
                f"declared in its README.md")
        config = default[0] if len(configs) > 1 else None
        patterns = split_patterns(default, pick)
    kind = "folder" if local else "prefix"
    lead = (f"a Hugging Face dataset repo {kind} ({what}): read as a plain {kind} it would pack every "
            f"configuration and split, the test rows too; ")
    # flag: none of its own (--split was not given): the CLI names the argument that gave the folder
    if not local or not takes("split"):  # --split reads no store URI; verify --source has no --split
        things = "files" if local else "objects"
        one = " ".join(os.path.join(folder, p) if local else f"{folder}/{p}" for p in patterns) or \
            f"the {pick} split's {things} of one configuration"
        raise PacktoolInputError(f"{lead}pass that split's {things} alone ({one})", path=folder)
    library = cli_flag("split") is None
    flags = f"{arg('split', pick)}" + (f"{',' if library else ''} {arg('config', config)}" if config else "")
    if library:
        flags += " with the folder"
    files_too = f", or name that split's files ({' '.join(os.path.join(folder, p) for p in patterns)})" \
        if patterns else ""
    raise PacktoolInputError(f"{lead}pass {flags}{files_too}", path=folder)


def _refuse_partitions(folder: str, parts: dict[str, str], pick: str, local: bool) -> None:
    """A folder or prefix partitioned by split, read whole (`parts`: split -> its partition)."""
    kind = "folder" if local else "prefix"
    one = os.path.join(folder, parts[pick]) if local else f"{folder}/{parts[pick]}/"
    raise PacktoolInputError(f"a {kind} partitioned by split ({', '.join(parts[s] for s in sorted(parts))}, as "
                             f"Spark, pyarrow or DuckDB write them): read as a plain {kind} it would pack every "
                             f"split, the test rows too, and no row says its split; pass that split's partition "
                             f"alone ({one})", path=folder)


def refuse_partitioned_split(folder: str, split: str) -> None:
    """`--split` on a local folder partitioned by split (`split=train/` + `split=test/`): datasets
    reads no split from such names, so every partition would be read as the one split asked for
    (S48A-14). A README declaring `configs:` says which files are which: datasets follows it."""
    if _declared_configs(_readme(folder)) is not None:
        return
    parts: dict[str, str] = {}
    for d, subs, _ in os.walk(folder):
        subs[:] = sorted(x for x in subs if not x.startswith("."))
        for x in subs:
            rel = os.path.relpath(os.path.join(d, x), folder).replace(os.sep, "/") + "/"
            if (m := _PARTITION.search(rel)) is not None:
                parts.setdefault(_WORD[m.group(2)], _partition(rel))
    if len(parts) < 2:
        return
    pick = _WORD.get(split, split)
    pick = pick if pick in parts else "train" if "train" in parts else sorted(parts)[0]
    raise PacktoolInputError(f"{arg('split', split)}: the folder is partitioned by split "
                             f"({', '.join(parts[s] for s in sorted(parts))}, as Spark, pyarrow or DuckDB write "
                             f"them), which datasets does not read as splits: it would read every partition as "
                             f"that split, the test rows too; pass that split's partition alone "
                             f"({os.path.join(folder, parts[pick])}) without {arg('split')}",
                             path=folder, flag=cli_flag("split"))


# the dataset repo modules whose files packtool's readers read as `datasets` would, and the
# options of their configuration that would read them otherwise (then `datasets` reads them)
_OWN_READ = {"json": ("field",), "parquet": ("columns", "filters")}


def split_files(folder: str, split: str, config: str | None) -> list[str] | None:
    """The files `datasets.load_dataset(folder, config, split=split)` reads for a local dataset
    repo folder of JSON (Lines) or Parquet files: packtool's readers read them, so `--split` on
    the folder gets the checks and the refusals (rows, lines, late columns) the same files get by
    name, and datasets writes no Arrow conversion into its cache (S47A-14, S47A-15). The files
    are found by datasets' own rules (its README `configs:`, its split patterns), which write
    nothing. None where datasets must read it: another format, a configuration that casts
    features or picks a field, a split or configuration it does not name (its own error then)."""
    try:
        from datasets.load import dataset_module_factory
    except ImportError:
        return None
    try:
        module = dataset_module_factory(folder)
    except Exception:  # datasets' own error, said by its load_dataset as before
        return None
    options = _OWN_READ.get(module.module_path.rsplit(".", 1)[-1])
    params = module.builder_configs_parameters
    cfg = {c.name: c for c in (params.builder_configs or [])}.get(_config_name(params, config))
    if options is None or cfg is None or getattr(cfg, "features", None) is not None or any(
            getattr(cfg, o, None) is not None for o in options):
        return None
    data_files = cfg.data_files or {}
    if hasattr(data_files, "resolve"):  # a README's `configs:` give patterns below the folder
        try:
            data_files = data_files.resolve(module.builder_kwargs.get("base_path", folder), None)
        except Exception:  # a pattern matching nothing: datasets' own error
            return None
    files = {str(k): [str(f) for f in v] for k, v in data_files.items()}
    return files.get(split) or None


def _config_name(params, config: str | None) -> str | None:
    """The configuration `datasets.load_dataset(folder, config)` reads: the one given, else the
    README's default (`default: true`, or named "default"), else the only one: the one owner of
    that choice for split_files and left_out (RA-4: left_out took the README's first)."""
    configs = [c.name for c in (params.builder_configs or [])]
    return config or params.default_config_name or (configs[0] if len(configs) == 1 else None)


def left_out(folder: str, split: str, config: str | None, files: list[str]) -> list[str]:
    """The split's files of a kind packtool reads (or refuses by name) that datasets' patterns
    match and its one-format-per-split rule drops (S48A-1: a `train-00002.csv` or `.jsonlines`
    beside two `.jsonl` files was not read, with no word, where naming the split's files read it).
    Only where the split's patterns are datasets' defaults or a README configuration's own."""
    from datasets.data_files import DataFilesDict, get_data_patterns, sanitize_patterns
    from datasets.load import dataset_module_factory

    from packtool.tokenize.file_kinds import kind_of, unreadable
    module = dataset_module_factory(folder)
    base = module.builder_kwargs.get("base_path", folder)
    meta = module.builder_configs_parameters.metadata_configs or {}
    if meta:
        one = meta.get(_config_name(module.builder_configs_parameters, config), {})
        if "data_files" not in one or one.get("data_dir"):
            return []
        patterns = sanitize_patterns(one["data_files"])
    else:
        patterns = get_data_patterns(base)
    try:
        raw = DataFilesDict.from_patterns(patterns, base_path=base)
    except Exception:  # a pattern matching nothing: datasets' own error came first
        return []
    kept = set(files)
    return [str(f) for f in raw.get(split, []) if str(f) not in kept and (kind_of(str(f)) or unreadable(str(f)))]


def generation_cause(e: BaseException) -> str:
    """What a `datasets` DatasetGenerationError hides in its cause chain (the JSON parse error,
    the cast that failed), in one line: its own text is "An error occurred while generating the
    dataset"."""
    inner = e
    while inner.__cause__ is not None or (inner.__context__ is not None and not inner.__suppress_context__):
        inner = inner.__cause__ or inner.__context__
    text = " ".join(str(inner).split()) or type(inner).__name__
    return text if len(text) <= 240 else text[:240].rsplit(" ", 1)[0] + " …"
