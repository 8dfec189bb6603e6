"""Support rows of int64 ids reach the scorer as given: an id past int32 is not wrapped onto a
real token (2^32 + 5 scored as token 5) on its way to the kernel."""
from __future__ import annotations

import pytest
import torch

from test_online_support import TEMP, _rollouts, _thd, gpt  # noqa: F401  (gpt: the module's fixture)


@pytest.mark.parametrize("impl", ["torch", "dense"])
def test_an_int64_support_id_past_int32_is_not_wrapped_onto_a_real_token(gpt, impl):  # noqa: F811
    from packtool.align import Alignment
    from packtool.megatron.model import hidden_states
    from packtool.online.support import support_logprobs_thd
    b = _thd(_rollouts(seed=7), Alignment(capacity=256))
    rows = b.side_targets["support"].to(torch.int64)
    active = (b.loss_weight[0] != 0).nonzero()[:, 0]
    wide = rows.clone()
    hit = None
    for p in active.tolist():  # a row holding a second candidate beside the sampled token
        r = wide[0, p]
        j = [k for k in range(r.numel()) if r[k] >= 0 and r[k] != b.labels[0, p]]
        if j:
            hit = (p, j[0], int(r[j[0]]))
            break
    assert hit is not None
    p, j, tok = hit
    wide[0, p, j] = (1 << 32) + tok  # wraps to `tok` in int32
    h, W = hidden_states(gpt, b), gpt.output_layer.weight
    with torch.no_grad():
        b.side_targets["support"] = rows
        lp, _, _ = support_logprobs_thd(b, h, W, temperature=TEMP, impl=impl)
        b.side_targets["support"] = wide
        try:
            lp2, _, _ = support_logprobs_thd(b, h, W, temperature=TEMP, impl=impl)
        except (ValueError, RuntimeError) as e:  # refused: the id is outside the vocabulary
            assert "vocab" in str(e) or "support" in str(e)
            return
    assert not torch.equal(lp[0, p], lp2[0, p]), "the id past int32 was scored as the real token it wraps to"
