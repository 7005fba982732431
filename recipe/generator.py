"""Batched sampling with a KV cache that records the behaviour logprob of every sampled token.

One decode step for B sequences: hidden (B, D) from the model body (KV cache reused), logits (B, V)
from the `precision` component (fp32 or bf16 head: the same call the trainer makes), then sample
from softmax(logits / temperature) and record log p(token) in that same distribution. Those are
the behaviour logprobs (`old_logprobs`) every loss uses; they are never recomputed.

Forced interruption (length control): when a sample has thought for its budget without closing
`</think>`, the phrase's tokens are fed instead of samples (loss mask 0, logprob 0), then the model
answers for at most `answer_budget` tokens. The response layout is [prompt, left-padded | response,
right-padded]; positions come from the attention mask, so the trainer's single forward pass over
the same tensors sees exactly what the generator saw.

The G samples of a prompt share its prefill (the body runs once per distinct prompt) and, in the
decode steps, its keys and values (recipe/prefix_attention.py: each row's cache holds its response
only, the prompt's are read once per prompt; `shared_prefix_decoding=False` gathers them to every
row instead, the path for models that attention function does not serve).

Rows that finished (<eos>, or out of answer budget) leave the decode batch once they are an eighth
of it (COMPACT_FRACTION): the KV cache keeps only the active rows, so the body, the head and
sampling stop spending work on finished ones (~16% of a generate call on the testbed, where
answers end at 11 or 14 tokens of 15). Their later tokens are padding, as before.

In-flight weight updates (PipelineRL): `on_decode_step` is called before the prefill and before
every decode step; it may load new weights into the model in place and returns the policy version
now loaded. The KV cache of the tokens so far is kept (their keys and values stay those of the
older weights, as in PipelineRL); each token records the version whose forward pass produced its
logits, so a sequence can span several versions and its behaviour logprobs are exactly the ones
it was sampled with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from recipe.model import lm_parts
from recipe.prefix_attention import SharedPrefixCache, shared_prefix_attention_on, supports_shared_prefix
from recipe.tasks import THINK_CLOSE


@dataclass
class Rollout:
    """B sampled sequences. T = generated width; `loss_mask` marks sampled (trainable) tokens."""

    input_ids: torch.Tensor  # (B, P + T) prompt (left-padded) then response (right-padded)
    attention_mask: torch.Tensor  # (B, P + T)
    prompt_width: int  # P
    loss_mask: torch.Tensor  # (B, T) bool: sampled tokens, not forced phrase tokens or padding
    old_logprobs: torch.Tensor  # (B, T) float32 behaviour logprobs, 0 where loss_mask is False
    lengths: torch.Tensor  # (B,) generated tokens including forced ones
    truncated: torch.Tensor  # (B,) bool: stopped by a length limit before <eos>
    interrupted: torch.Tensor  # (B,) bool: the interruption phrase was forced in
    versions: torch.Tensor  # (B, T) long: policy version (trainer steps) of the weights that produced each token

    @property
    def response_ids(self) -> torch.Tensor:
        return self.input_ids[:, self.prompt_width:]

    def to(self, device) -> "Rollout":
        return Rollout(**{k: (v.to(device) if torch.is_tensor(v) else v) for k, v in self.__dict__.items()})


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that skip left padding: 0 at each row's first real token."""
    return (attention_mask.long().cumsum(-1) - 1).clamp_min(0)


def decode_responses(tokenizer, rollout: Rollout) -> list[str]:
    """Response texts up to (not including) <eos>; special tokens dropped, `</think>` kept."""
    texts = []
    for row, length in zip(rollout.response_ids.tolist(), rollout.lengths.tolist()):
        texts.append(tokenizer.decode(row[:length], skip_special_tokens=True))
    return texts


def inverse_cdf_sample(logp: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """(A,) tokens: the first v with u * sum_w p_w < sum_{w <= v} p_w, p = exp(logp) of each row (A, V).

    Sampling by the inverse CDF of one uniform per row and position (drawn up front, see generate)
    gives the same distribution as torch.multinomial, and a row's draw does not depend on which
    other rows are still decoding. Evaluation relies on it: every evaluation of a run reuses the same
    uniforms (common random numbers), so a small policy change flips few answers and the curve's
    points differ by the policy's change more than by sampling noise.
    """
    cdf = logp.float().exp().cumsum(dim=-1)
    target = (uniform * cdf[:, -1])[:, None]  # scaled by the row's total: round-off never runs past it
    return torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp_max(cdf.shape[-1] - 1)


# Finished rows are dropped from the decode batch once they are this share of it: each drop copies
# the KV cache once, so dropping every row the moment it finishes would copy it at nearly every step.
COMPACT_FRACTION = 0.125


@torch.no_grad()
def generate(model, tokenizer, prompts: list[str], *, precision, length_control, max_new_tokens: int,
             temperature: float = 1.0, greedy: bool | torch.Tensor = False, torch_rng: torch.Generator | None = None,
             numpy_rng: np.random.Generator | None = None, policy_version: int = 0,
             on_decode_step: Callable[[], int] | None = None, shared_prefix_decoding: bool = True) -> Rollout:
    """Sample one response per prompt (repeat prompts for G samples). Runs on the model's device.

    greedy: True takes the argmax token everywhere; a (B,) bool tensor takes it on its True rows
    and samples the others (evaluation runs its greedy and sampled answers as one batch).
    """
    from transformers import DynamicCache

    device = next(model.parameters()).device
    parts = lm_parts(model)
    # G samples of a prompt share its prefill: the body runs once per distinct prompt and the KV
    # cache is gathered to the B rows (the same values for a fraction of the work).
    distinct = {prompt: index for index, prompt in enumerate(dict.fromkeys(prompts))}
    row_prompt = torch.tensor([distinct[prompt] for prompt in prompts], device=device)
    encoded = tokenizer(list(distinct), padding=True, return_tensors="pt")
    distinct_ids, distinct_mask = encoded.input_ids.to(device), encoded.attention_mask.to(device)
    input_ids, prompt_mask = distinct_ids[row_prompt], distinct_mask[row_prompt]
    attention_mask = prompt_mask
    B, P = input_ids.shape
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    greedy_rows = None
    if isinstance(greedy, torch.Tensor):
        if greedy.shape != (B,):
            raise ValueError(f"generate: greedy must be a bool or a ({B},) tensor, one flag per prompt; got shape "
                             f"{tuple(greedy.shape)}")
        greedy_rows = greedy.to(device=device, dtype=torch.bool)

    budgets = length_control.thinking_budgets(B, numpy_rng) if numpy_rng is not None else None
    phrase = [] if budgets is None else tokenizer.encode(length_control.interruption_phrase, add_special_tokens=False)
    close = torch.tensor(tokenizer.encode(THINK_CLOSE, add_special_tokens=False), device=device)
    limit = max_new_tokens
    if budgets is not None:
        budgets = torch.as_tensor(budgets, device=device)
        # The interruption must be able to finish: phrase + answer after the largest budget.
        limit = max(limit, int(budgets.max()) + len(phrase) + length_control.answer_budget)
    phrase = torch.tensor(phrase, device=device, dtype=torch.long)
    # One uniform per row and position, drawn before decoding: row r's t-th token is decided by
    # uniforms[r, t] whatever the other rows do (finished rows leave the batch; see inverse_cdf_sample).
    uniforms = torch.rand(B, limit, generator=torch_rng, device=device)

    # Per-sequence state. forced: index into the phrase being fed (-1: not forcing).
    finished = torch.zeros(B, dtype=torch.bool, device=device)
    thinking = torch.ones(B, dtype=torch.bool, device=device)
    think_len = torch.zeros(B, dtype=torch.long, device=device)
    forced = torch.full((B,), -1, dtype=torch.long, device=device)
    answer_left = torch.full((B,), -1, dtype=torch.long, device=device)  # after an interruption only
    interrupted = torch.zeros(B, dtype=torch.bool, device=device)
    truncated = torch.zeros(B, dtype=torch.bool, device=device)
    lengths = torch.zeros(B, dtype=torch.long, device=device)
    tokens, logprobs, sampled_masks, versions = [], [], [], []
    version = on_decode_step() if on_decode_step is not None else policy_version

    cache = DynamicCache()
    with parts.autocast():
        out = parts.body(input_ids=distinct_ids, attention_mask=distinct_mask,
                         position_ids=positions_from_mask(distinct_mask), past_key_values=cache, use_cache=True)
    hidden = out.last_hidden_state[:, -1][row_prompt]
    # Decode steps: the prompts' keys and values stay once per distinct prompt (SharedPrefixCache) and
    # each row's own keys are its response's; for a model the shared-prefix attention does not serve,
    # the prompt cache is gathered to the B rows.
    shared_prefix = None
    if shared_prefix_decoding and supports_shared_prefix(model):
        shared_prefix = SharedPrefixCache(cache, distinct_mask, row_prompt)
    elif len(distinct) < B:
        cache.batch_select_indices(row_prompt)
    next_position = positions_from_mask(attention_mask)[:, -1] + 1
    # Rows still in the model's batch (A of them): finished rows leave it once they are a
    # COMPACT_FRACTION of it, so the body, the head and sampling stop spending work on them. The
    # per-row state below stays full width (B); only the model's inputs are the active rows.
    active = torch.arange(B, device=device)
    for t in range(limit):
        logits = precision.head_logits(hidden, parts.head.weight, parts.head.bias)  # (A, V), head dtype
        logp_all = torch.log_softmax(logits / temperature, dim=-1)
        if greedy_rows is not None:  # some rows greedy, the rest sampled: one batch for both
            drawn = inverse_cdf_sample(logp_all, uniforms[active, t])
            token_active = torch.where(greedy_rows[active], logp_all.argmax(dim=-1), drawn)
        elif greedy:
            token_active = logp_all.argmax(dim=-1)
        else:
            token_active = inverse_cdf_sample(logp_all, uniforms[active, t])
        logp_active = logp_all.gather(-1, token_active[:, None]).squeeze(-1).float()
        token = torch.full((B,), pad, dtype=torch.long, device=device).index_copy_(0, active, token_active)
        logp = torch.zeros(B, device=device).index_copy_(0, active, logp_active)

        forcing = forced >= 0
        if forcing.any():
            token = torch.where(forcing, phrase[forced.clamp_min(0)], token)
        sampled = ~finished & ~forcing
        token = torch.where(finished, torch.full_like(token, pad), token)
        tokens.append(token)
        logprobs.append(torch.where(sampled, logp, torch.zeros_like(logp)))
        sampled_masks.append(sampled)
        versions.append(version)
        lengths += (~finished).long()

        # Thinking ends at </think> (sampled or the phrase's last tokens).
        if len(tokens) >= len(close):
            recent = torch.stack(tokens[-len(close):], dim=1)
            thinking &= ~(recent == close).all(dim=1)
        think_len += (thinking & sampled).long()
        answer_left -= (sampled & (answer_left >= 0)).long()
        finished |= sampled & (token == eos)
        # An active interruption advances; when the phrase is done, the answer budget starts.
        forced = torch.where(forcing, forced + 1, forced)
        phrase_done = forcing & (forced >= len(phrase))
        forced = torch.where(phrase_done, torch.full_like(forced, -1), forced)
        answer_left = torch.where(phrase_done, torch.full_like(answer_left, length_control.answer_budget or 0),
                                  answer_left)
        thinking &= ~phrase_done
        if budgets is not None:
            start = ~finished & thinking & (forced < 0) & (think_len >= budgets)
            forced = torch.where(start, torch.zeros_like(forced), forced)
            interrupted |= start
        out_of_answer = ~finished & (answer_left == 0)
        truncated |= out_of_answer
        finished |= out_of_answer
        if bool(finished.all()) or t == limit - 1:
            break
        if shared_prefix is None:  # the per-row cache's mask; the shared-prefix attention reads none
            attention_mask = torch.cat([attention_mask, torch.ones_like(attention_mask[:, :1])], dim=1)
        still = ~finished[active]
        if int((~still).sum()) >= COMPACT_FRACTION * len(active):
            keep = still.nonzero().squeeze(-1)
            if shared_prefix is None:
                cache.batch_select_indices(keep)
            else:
                shared_prefix.select(keep)
            active = active[still]
        if on_decode_step is not None:
            version = on_decode_step()  # new weights apply from this forward pass on
        with parts.autocast():
            if shared_prefix is None:
                out = parts.body(input_ids=token[active, None], attention_mask=attention_mask[active],
                                 position_ids=next_position[active, None], past_key_values=cache, use_cache=True)
            else:  # no mask: a decode row attends to all of its keys
                with shared_prefix_attention_on(model):
                    out = parts.body(input_ids=token[active, None], position_ids=next_position[active, None],
                                     use_cache=False, shared_prefix=shared_prefix)
        hidden = out.last_hidden_state[:, -1]
        next_position = next_position + 1
    truncated |= ~finished

    response = torch.stack(tokens, dim=1)
    valid = torch.arange(response.shape[1], device=device)[None, :] < lengths[:, None]
    return Rollout(
        input_ids=torch.cat([input_ids, response], dim=1),
        attention_mask=torch.cat([prompt_mask, valid.long()], dim=1),
        prompt_width=P,
        loss_mask=torch.stack(sampled_masks, dim=1),
        old_logprobs=torch.stack(logprobs, dim=1),
        lengths=lengths,
        truncated=truncated,
        interrupted=interrupted,
        versions=torch.tensor(versions, dtype=torch.long, device=device)[None, :].expand(B, -1).clone(),
    )


class TorchGenerator:
    """The generator backend every platform has: `generate` above on a Hugging Face model (CPU or CUDA).

    The backend interface (a vLLM engine implements the same, recipe/vllm_generator.py):
        generate(prompts, *, precision, length_control, max_new_tokens, temperature, greedy, seed,
                 policy_version) -> Rollout      one response per prompt, behaviour logprobs recorded
        update_weights(named_tensors, version)   load new weights in place; the next token uses them
    tests/recipe/test_generator_contract.py is the suite every backend must pass.
    """

    name = "torch"

    def __init__(self, model, tokenizer) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.version = 0

    def generate(self, prompts: list[str], *, precision, length_control, max_new_tokens: int,
                 temperature: float = 1.0, greedy: bool = False, seed: int = 0,
                 policy_version: int | None = None) -> Rollout:
        device = next(self.model.parameters()).device
        return generate(self.model, self.tokenizer, prompts, precision=precision, length_control=length_control,
                        max_new_tokens=max_new_tokens, temperature=temperature, greedy=greedy,
                        torch_rng=torch.Generator(device=device).manual_seed(seed),
                        numpy_rng=np.random.default_rng(seed),
                        policy_version=self.version if policy_version is None else policy_version)

    @torch.no_grad()
    def update_weights(self, named_tensors, version: int) -> None:
        """Copy (Hugging Face name, tensor) pairs into the model's parameters in place."""
        parameters = dict(self.model.named_parameters())
        for name, tensor in named_tensors:
            if name not in parameters:
                raise KeyError(f"update_weights: {name!r} is not a parameter of the model")
            parameters[name].copy_(tensor)
        self.version = version
