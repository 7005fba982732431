"""Drawing a token from the head's logits: the one function both decode loops (recipe/generator.py's eager loop,
recipe/static_decode.py's static steps) sample with."""

from __future__ import annotations

import torch


def pick_tokens(logits: torch.Tensor, temperature: float, greedy: bool | torch.Tensor,
                uniform: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(A,) tokens and their float32 logprobs under softmax(logits / temperature), logits (A, V).

    greedy: True takes the argmax; an (A,) bool tensor takes it on its True rows and draws the others
    (inverse_cdf_sample of `uniform` (A,)); False draws every row.
    """
    logp_all = torch.log_softmax(logits / temperature, dim=-1)
    if isinstance(greedy, torch.Tensor):  # some rows greedy, the rest sampled: one batch for both
        token = torch.where(greedy, logp_all.argmax(dim=-1), inverse_cdf_sample(logp_all, uniform))
    elif greedy:
        token = logp_all.argmax(dim=-1)
    else:
        token = inverse_cdf_sample(logp_all, uniform)
    return token, logp_all.gather(-1, token[:, None]).squeeze(-1).float()


def inverse_cdf_sample(logp: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """(A,) tokens: the first v with u * sum_w p_w < sum_{w <= v} p_w, p = exp(logp) of each row (A, V).

    Sampling by the inverse CDF of one uniform per row and position (drawn up front, see recipe.generator.generate)
    gives the same distribution as torch.multinomial, and a row's draw does not depend on which
    other rows are still decoding. Evaluation relies on it: every evaluation of a run reuses the same
    uniforms (common random numbers), so a small policy change flips few answers and the curve's
    points differ by the policy's change more than by sampling noise.
    """
    cdf = logp.float().exp().cumsum(dim=-1)
    target = (uniform * cdf[:, -1])[:, None]  # scaled by the row's total: round-off never runs past it
    return torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp_max(cdf.shape[-1] - 1)
