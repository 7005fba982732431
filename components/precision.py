"""LM-head precision: the dtype in which the final hidden-state -> vocabulary matmul is computed."""

from __future__ import annotations

import contextlib

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
    """

    def __init__(self, fp32_head: bool = True) -> None:
        self.fp32_head = fp32_head

    @property
    def head_dtype(self):
        import torch

        return torch.float32 if self.fp32_head else torch.bfloat16

    def head_logits(self, hidden, weight, bias=None):
        """(..., D) hidden, (V, D) weight -> (..., V) logits in `head_dtype`."""
        import torch

        dtype = self.head_dtype
        bias = None if bias is None else bias.to(dtype)
        guard = tf32_disabled() if (self.fp32_head and hidden.is_cuda) else contextlib.nullcontext()
        with guard:
            return torch.nn.functional.linear(hidden.to(dtype), weight.to(dtype), bias)


@contextlib.contextmanager
def tf32_disabled():
    """Run fp32 matmuls as true fp32 (IEEE), restoring the caller's TF32 setting afterwards."""
    import torch

    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
