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


def test_fp32_head_runs_with_tf32_off_forward_and_backward_even_when_tf32_is_on_globally(monkeypatch):
    from components import precision as precision_module

    seen = []
    real_linear = torch.nn.functional.linear

    def spy_linear(*args, **kwargs):
        seen.append(("forward", precision_module.tf32_off_now()))
        return real_linear(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "linear", spy_linear)
    real_guard = precision_module.tf32_disabled
    guarded = []

    def spy_guard():
        guarded.append(True)
        return real_guard()

    monkeypatch.setattr(precision_module, "tf32_disabled", spy_guard)
    matmul = torch.backends.cuda.matmul
    previous = matmul.fp32_precision
    matmul.fp32_precision = "tf32"  # the new API: reading the legacy allow_tf32 flag now would raise
    try:
        hidden = torch.randn(2, 3, 8, dtype=torch.bfloat16, requires_grad=True)
        weight = torch.randn(5, 8, requires_grad=True)
        logits = LmHeadPrecision(fp32_head=True).head_logits(hidden, weight)
        assert logits.dtype == torch.float32
        assert not precision_module.tf32_off_now()  # restored after the call
        logits.square().sum().backward()
        assert matmul.fp32_precision == "tf32"
    finally:
        matmul.fp32_precision = previous
    assert seen == [("forward", True)]
    assert len(guarded) == 2  # the forward matmul and the backward matmuls
    # the gradients are those of the plain fp32 matmul
    reference_hidden = hidden.detach().float().requires_grad_()
    reference_weight = weight.detach().clone().requires_grad_()
    torch.nn.functional.linear(reference_hidden, reference_weight).square().sum().backward()
    assert torch.allclose(weight.grad, reference_weight.grad, atol=1e-4)
    assert torch.allclose(hidden.grad.float(), reference_hidden.grad, rtol=1e-2, atol=1e-2)  # rounded to bf16


def test_the_head_escapes_autocast():
    # Under autocast a plain fp32 matmul would run in bf16; the fp32 head must not.
    hidden, weight = torch.randn(4, 8), torch.randn(5, 8)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        assert torch.nn.functional.linear(hidden, weight).dtype == torch.bfloat16
        logits = LmHeadPrecision(fp32_head=True).head_logits(hidden, weight)
    assert logits.dtype == torch.float32
    assert torch.allclose(logits, hidden @ weight.T, atol=1e-5)
