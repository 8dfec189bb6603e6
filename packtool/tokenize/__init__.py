"""Stage 1, tokenize: input files in, a tokenized cache out.

Readers (`readers`), input shapes (`shapes`), chat templates (`templates`,
`native_templates`), the tokenizer (`encode`), pre-tokenized rows (`token_rows`), the cache,
its Parquet parts and its flat token store (`cache`, `cache_parts`, `flat_tokens`), the
threaded pipeline that ties them (`pipeline`, with its writers `sink`, read-ahead `prefetch`
and bar `bar`), and this stage's options (`config.TokenizeConfig`). Imports nothing from later stages (docs/DESIGN.md).
"""
from packtool.errors import PacktoolInputError
from packtool.tokenize.cache import InputFileInfo, Rows, TokenizedCache
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.encode import TokenizerInfo
from packtool.tokenize.pipeline import default_cache_dir, tokenize_to_cache

__all__ = ["tokenize_to_cache", "TokenizeConfig", "TokenizedCache", "TokenizerInfo",
           "InputFileInfo", "Rows", "PacktoolInputError", "default_cache_dir"]
