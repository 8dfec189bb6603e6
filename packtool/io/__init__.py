"""Input side of packtool: readers, input shapes, chat templates, tokenization, tokenized cache.

Public API (used by `packtool pack` / `plan`):
    tokenize_to_cache(inputs, cfg, cache_dir=None, progress=True) -> TokenizedCache
    TokenizedCache, TokenizerInfo, InputFileInfo, Rows, PacktoolInputError
"""
from packtool.io.cache import InputFileInfo, Rows, TokenizedCache
from packtool.io.errors import PacktoolInputError
from packtool.io.pipeline import default_cache_dir, tokenize_to_cache
from packtool.io.tokenize import TokenizerInfo

__all__ = ["tokenize_to_cache", "TokenizedCache", "TokenizerInfo", "InputFileInfo", "Rows",
           "PacktoolInputError", "default_cache_dir"]
