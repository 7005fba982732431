"""Off-policy schedule descriptions and the LM-head precision component."""

import pytest
import torch

from components.off_policy import PipelineRlMode, PpoOffPolicyMode
from components.precision import LmHeadPrecision


def test_staleness_bounds():
    # PPO-off-policy-k: the j-th of k steps trains on data j versions old -> at most k - 1.
    assert PpoOffPolicyMode(k=8).max_staleness == 7 and not PpoOffPolicyMode(k=8).asynchronous
    assert PpoOffPolicyMode(k=1).max_staleness == 0  # on-policy
    # PipelineRL-k: the trainer waits rather than use a token more than k versions old.
    assert PipelineRlMode(k=8).max_staleness == 8 and PipelineRlMode(k=8).asynchronous
    with pytest.raises(ValueError):
        PpoOffPolicyMode(k=0)


def test_fp32_head_computes_logits_in_fp32_even_from_bf16_hidden_states():
    hidden = torch.randn(2, 3, 8, dtype=torch.bfloat16)
    weight = torch.randn(11, 8, dtype=torch.bfloat16)
    logits = LmHeadPrecision(fp32_head=True).head_logits(hidden, weight)
    assert logits.dtype == torch.float32 and logits.shape == (2, 3, 11)
    torch.testing.assert_close(logits, hidden.float() @ weight.float().T)


def test_bf16_head_really_computes_in_bf16():
    hidden = torch.randn(4, 16)
    weight = torch.randn(32, 16)
    logits = LmHeadPrecision(fp32_head=False).head_logits(hidden, weight)
    assert logits.dtype == torch.bfloat16
    torch.testing.assert_close(logits, (hidden.bfloat16() @ weight.bfloat16().T))
    # and it differs from the fp32 result by bf16 rounding, i.e. it is not an fp32 matmul relabelled
    assert (logits.float() - hidden @ weight.T).abs().max() > 1e-4
