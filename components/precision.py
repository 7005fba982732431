"""LM-head precision: the dtype in which the final hidden-state -> vocabulary matmul is computed."""

from __future__ import annotations

import contextlib
import functools

from components.registry import Registry


class HeadPrecision:
    """Base of the `precision` axis."""

    fp32_head: bool

    def head_logits(self, hidden, weight, bias=None):
        raise NotImplementedError


PRECISIONS: Registry[HeadPrecision] = Registry("precision", HeadPrecision)


@PRECISIONS.register("lm_head")
class LmHeadPrecision(HeadPrecision):
    """logits = hidden @ W^T computed in fp32 (fp32_head) or bf16, in generator AND trainer alike.

    ScaleRL: an fp32 head lifts A from 0.52 to 0.61, because bf16 logits make the generator's and
    trainer's token probabilities disagree. On one side only it is worse than on neither, so both
    roles call this. TF32 matmuls would silently undo it on GPUs: they are off for the fp32 matmul.

    Args:
        fp32_head: True for an fp32 head (ScaleRL's, the default), False for bf16.
    """

    def __init__(self, fp32_head: bool = True) -> None:
        self.fp32_head = fp32_head

    @property
    def head_dtype(self):
        import torch

        return torch.float32 if self.fp32_head else torch.bfloat16

    def head_logits(self, hidden, weight, bias=None):
        """(..., D) hidden, (V, D) weight -> (..., V) logits in `head_dtype`.

        Outside any autocast region (autocast would run an fp32 matmul in bf16), and for the fp32
        head with TF32 off in the forward and backward matmuls alike (see ieee_linear).
        """
        import torch

        dtype = self.head_dtype
        bias = None if bias is None else bias.to(dtype)
        with torch.autocast(device_type=hidden.device.type, enabled=False):
            if self.fp32_head:
                return ieee_linear(hidden.to(dtype), weight.to(dtype), bias)
            return torch.nn.functional.linear(hidden.to(dtype), weight.to(dtype), bias)


@contextlib.contextmanager
def tf32_disabled():
    """Run fp32 matmuls as true fp32 (IEEE), restoring the caller's setting afterwards.

    Uses torch's per-backend `fp32_precision` setting where it exists (torch >= 2.9): reading the
    legacy `allow_tf32` flag after anyone set the new one raises in recent torch, so the legacy flag
    is only the fallback for older versions.
    """
    import torch

    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        previous = matmul.fp32_precision
        matmul.fp32_precision = "ieee"
        try:
            yield
        finally:
            matmul.fp32_precision = previous
        return
    previous = matmul.allow_tf32
    matmul.allow_tf32 = False
    try:
        yield
    finally:
        matmul.allow_tf32 = previous


def tf32_off_now() -> bool:
    """Whether fp32 matmuls run as true fp32 at this moment (tests read it inside the head matmul)."""
    import torch

    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        setting = matmul.fp32_precision
        if setting == "none":  # inherits the global setting
            setting = torch.backends.fp32_precision
        return setting != "tf32"
    return not matmul.allow_tf32


def ieee_linear(hidden, weight, bias=None):
    """F.linear with TF32 disabled in its forward and in its backward matmuls.

    The guard around a forward call alone would leave the backward (run later by loss.backward())
    to the global setting; this autograd function holds it for the gradients too.
    """
    return _ieee_linear_function().apply(hidden, weight, bias)


@functools.cache
def _ieee_linear_function():
    """The autograd function, built on first use so that importing the registry stays torch-free."""
    import torch

    class IEEELinear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, hidden, weight, bias):
            ctx.save_for_backward(hidden, weight)
            ctx.has_bias = bias is not None
            with tf32_disabled():
                return torch.nn.functional.linear(hidden, weight, bias)

        @staticmethod
        def backward(ctx, grad_output):
            hidden, weight = ctx.saved_tensors
            grad_hidden = grad_weight = grad_bias = None
            with tf32_disabled():
                if ctx.needs_input_grad[0]:
                    grad_hidden = grad_output @ weight
                if ctx.needs_input_grad[1]:
                    # (V, N) @ (N, D): the gradient summed over every leading position
                    grad_weight = (grad_output.reshape(-1, grad_output.shape[-1]).T
                                   @ hidden.reshape(-1, hidden.shape[-1]))
            if ctx.has_bias and ctx.needs_input_grad[2]:
                grad_bias = grad_output.reshape(-1, grad_output.shape[-1]).sum(0)
            return grad_hidden, grad_weight, grad_bias

    return IEEELinear
