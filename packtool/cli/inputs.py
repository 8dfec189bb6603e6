"""Input arguments the command line refuses before any work: stdin (`-`) and a missing path that
would otherwise be looked up as a Hugging Face dataset name. (Shape flags that contradict each
other are refused by TokenizeConfig, for the library too.)"""
from __future__ import annotations

import os

from packtool.errors import PacktoolConfigError, PacktoolInputError
from packtool.storage import is_uri, locate
from packtool.tokenize.hub_load import FILE_SUFFIXES
from packtool.tokenize.readers import stdin_refused


def check_input_specs(inputs: list[str], hf_flags: bool, name: str = "inputs") -> None:
    """Refuse `-` and a missing path before it is taken for a dataset name (`name`: the
    argument that gave them, spelled as its flag)."""
    for spec in inputs:
        if spec == "-":
            raise stdin_refused(name)
        if is_uri(spec):
            locate(spec)  # an unknown scheme or a URI with credentials: one line, now
            continue
        if hf_flags or os.path.exists(spec) or any(c in spec for c in "*?["):
            continue
        folder = os.path.dirname(spec)
        looks_like_path = (os.path.isabs(spec) or spec.startswith(("./", "../", "~"))
                           or spec.lower().endswith(FILE_SUFFIXES) or (folder != "" and os.path.isdir(folder)))
        if looks_like_path:
            raise PacktoolInputError("input file not found", path=spec)



def one_dataset(inputs: list[str], split: str | None, config: str | None, engine: str) -> None:
    """A dataset name or folder read by `datasets` (with --split/--config, or a name alone) is one
    input, read on this machine: the command line loads it before the library sees it."""
    given = "--split" if split else "--config" if config else None
    if len(inputs) != 1:  # only with a flag: a name alone is one input
        raise PacktoolConfigError(f"{given} reads one dataset name or folder, got {len(inputs)} inputs; pack each "
                                  f"dataset on its own, or pass files (Dataset.to_parquet) without {given}",
                                  flag=given)
    if engine != "local":
        what = given or f"a dataset name ({inputs[0]})"
        raise PacktoolConfigError(f"{what} is loaded by `datasets` on this machine, which --engine ray does not do; "
                                  f"drop --engine ray, or save the dataset to files (Dataset.to_parquet) and pass those",
                                  flag="--engine" if given is None else given)


def by_datasets(inputs: list[str], split: str | None, config: str | None, engine: str):
    """(inputs, split, config) for pack: a local folder with --split (and --config) goes to the
    library as the folder, so -o, --cache-dir and HF_DATASETS_CACHE are held to it as to any folder
    input (inside it, the next run read what packtool put there as the split's rows: S48A-6,
    RA-11; with --config too: RA-7); a name, or --config alone, is loaded here."""
    one_dataset(inputs, split, config, engine)
    if split and os.path.isdir(inputs[0]):
        return inputs, split, config
    from packtool.tokenize.hub_load import load_dataset
    return load_dataset(inputs[0], split, config), None, None
