"""The library's refusal of a tokenizer folder, as the tokenizer-config tests ask it."""
from __future__ import annotations

import pytest

from packtool.errors import PacktoolInputError
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.encode import load_tokenizer


def refused_loading(folder: str) -> PacktoolInputError:
    """The error load_tokenizer raises for the tokenizer folder `folder` (it must raise one)."""
    with pytest.raises(PacktoolInputError) as e:
        load_tokenizer(folder, TokenizeConfig(tokenizer=folder))
    return e.value
