"""Stage 1, tokenize: input files in, a tokenized cache out.

Readers (`readers`), input shapes (`shapes`), chat templates (`templates`,
`native_templates`), the tokenizer (`encode`), pre-tokenized rows (`token_rows`), the cache,
its Parquet parts and its flat token store (`cache`, `cache_parts`, `flat_tokens`, written while
tokenizing by `flat_builder`), the
threaded pipeline that ties them (`pipeline`, with its writers `sink`, read-ahead `prefetch`
and bar `bar`), what a run settles before it encodes: inputs, shapes, tokenizer, the cache key
and the cache to reuse (`request`), and this stage's options (`config.TokenizeConfig`). Imports
nothing from later stages (docs/DESIGN.md).
"""
import importlib

from packtool.errors import PacktoolInputError

# Names load on first use: a reader of packed output imports `tokenize.checksum` (the shard
# checksums) and must not load the tokenizers library, the pipeline or its numba kernels
_EXPORTS = {
    "tokenize_to_cache": "pipeline", "default_cache_dir": "cache_root", "TokenizeConfig": "config",
    "TokenizedCache": "cache", "InputFileInfo": "cache", "Rows": "cache", "TokenizerInfo": "encode",
}

__all__ = ["tokenize_to_cache", "TokenizeConfig", "TokenizedCache", "TokenizerInfo",
           "InputFileInfo", "Rows", "PacktoolInputError", "default_cache_dir"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'packtool.tokenize' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"packtool.tokenize.{module}"), name)
    globals()[name] = value
    return value
