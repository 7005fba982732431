"""The policy update: recompute logprobs, loss -> aggregation -> backward -> clipped AdamW step.

One optimizer step per minibatch. The aggregation's per-token weights are computed once for the
whole minibatch, so splitting it into micro-batches (memory) leaves the gradient unchanged:
    L = sum_bt w_bt * l_bt,  w = aggregation.token_weights(mask, group_ids).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch.utils.checkpoint import checkpoint

from recipe.generator import Rollout, positions_from_mask
from recipe.model import lm_parts
from recipe.prefix_attention import (SharedPrefixCache, attention_implementation, shared_prefix_attention_on,
                                     supports_shared_prefix)


# Whether the response forward skips padding (packed into one row); benchmarks/bench_prefix_attention.py
# switches it off to time the row layout against it.
PACK_RESPONSES = True
# The head's logits are computed this many bytes of fp32 (tokens x vocabulary) at a time, each chunk
# recomputed in the backward: the whole batch's logits, log-softmax and probabilities never exist at
# once (at a 152k vocabulary, 2.4 GB a copy per 4k tokens). 0: the whole batch at once.
HEAD_CHUNK_BYTES = 256 * 2**20


@contextmanager
def checkpointed_layers(model, enabled: bool):
    """Gradient checkpointing of the decoder layers (the body's `layers`) while the context is open.

    Each layer keeps only its input for the backward and recomputes its activations there: memory per
    token falls from ~tens of hidden-sized activations a layer to one, for ~1/3 more compute. The
    recompute runs under the attention implementation of the forward (the backward runs after
    shared_prefix_attention_on has given the model its own back). Applied around the response forward
    only: the prompts' forward writes a KV cache, which a recompute would write twice (and it is
    short). Our own wrapper rather than transformers' flag, whose behaviour has changed across the
    versions we support.
    """
    if not enabled:
        yield
        return
    body = lm_parts(model).body
    layers = getattr(body, "layers", None)
    if layers is None:
        raise ValueError(f"optimizer.gradient_checkpointing: {type(body).__name__} has no `layers` list of "
                         "decoder layers to checkpoint; set optimizer.gradient_checkpointing false")
    for layer in layers:
        def forward(*args, _forward=layer.forward, **kwargs):
            implementation = model.config._attn_implementation

            def run(*args, **kwargs):
                with attention_implementation(model, implementation):
                    return _forward(*args, **kwargs)
            return checkpoint(run, *args, use_reentrant=False, **kwargs)
        layer.forward = forward
    try:
        yield
    finally:
        for layer in layers:
            del layer.forward  # the class's forward again


def shared_prompts(input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_width: int):
    """The distinct prompts of a batch and which one each row has: (prompt_ids (U, P), prompt_mask, row_prompt (B,)).

    An RL batch holds G samples of each prompt, so its prompt part is computed once per distinct
    prompt and shared (U = B / G rows instead of B): the same values, a fraction of the work.
    """
    prompt_ids, prompt_mask = input_ids[:, :prompt_width], attention_mask[:, :prompt_width]
    unique, row_prompt = torch.unique(torch.cat([prompt_ids, prompt_mask], dim=1), dim=0, return_inverse=True)
    # torch.unique sorts; number the prompts by first appearance instead, so that a batch of G samples
    # of each prompt in order has row_prompt = row // G (the layout SharedPrefixCache reshapes).
    rows = torch.arange(len(row_prompt), device=row_prompt.device)
    first_row = torch.full((len(unique),), len(row_prompt), device=row_prompt.device).scatter_reduce(
        0, row_prompt, rows, reduce="amin")
    order = torch.argsort(first_row)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order), device=order.device)
    unique, row_prompt = unique[order], rank[row_prompt]
    return unique[:, :prompt_width], unique[:, prompt_width:], row_prompt


def response_hidden_states(model, input_ids, attention_mask, prompt_width: int) -> torch.Tensor:
    """Hidden states (B, T, D) that predict the T response tokens: position P + t - 1 predicts token t.

    Prompt prefix shared: the body runs once over the U distinct prompts with a KV cache, the cache
    (and the last prompt state, which predicts response token 0) is gathered to the B rows, then
    the body runs over response tokens 0 .. T-2 attending to it (the last token predicts nothing we
    train on). Gradients flow through the gather into the shared prompt computation, so the
    gradient equals that of one forward over every full row. With the shared-prefix attention the
    response tokens that predict a real token are packed into one row (no padding computed); the
    positions that predict padding get zero hidden states.
    """
    from transformers import DynamicCache

    parts = lm_parts(model)
    prompt_ids, prompt_mask, row_prompt = shared_prompts(input_ids, attention_mask, prompt_width)
    positions = positions_from_mask(attention_mask)
    cache = DynamicCache()
    with parts.autocast():
        prompt_hidden = parts.body(input_ids=prompt_ids, attention_mask=prompt_mask,
                                   position_ids=positions_from_mask(prompt_mask), past_key_values=cache,
                                   use_cache=True).last_hidden_state[:, -1:]  # (U, 1, D)
    first = prompt_hidden[row_prompt]  # (B, 1, D)
    T = input_ids.shape[1] - prompt_width
    if T == 1:
        return first
    if supports_shared_prefix(model):
        # The prompts' keys and values stay once per prompt (recipe.prefix_attention); the response
        # attends to them and, causally, to itself. Right padding needs no mask: a padded key is only
        # seen by later (padded) positions, which no loss reads.
        # The body runs on the real response tokens only, packed into one row: padding is 20-30% of
        # the response positions on the testbed, and every projection and MLP is per token. Input
        # token t predicts token t + 1, so it is computed where token t + 1 is real.
        shared = SharedPrefixCache(cache, prompt_mask, row_prompt)
        if not PACK_RESPONSES:
            with parts.autocast(), shared_prefix_attention_on(model):
                rest = parts.body(input_ids=input_ids[:, prompt_width:-1], position_ids=positions[:, prompt_width:-1],
                                  use_cache=False, shared_prefix=shared).last_hidden_state  # (B, T - 1, D)
            return torch.cat([first, rest], dim=1)
        flat = shared.pack_responses(attention_mask[:, prompt_width + 1:].bool())
        if flat.numel() == 0:  # every response is one token long (the batch padded wider): nothing to run
            return torch.cat([first, first.new_zeros(first.shape[0], T - 1, first.shape[-1])], dim=1)
        with parts.autocast(), shared_prefix_attention_on(model):
            packed = parts.body(input_ids=input_ids[:, prompt_width:-1].reshape(1, -1)[:, flat],
                                position_ids=positions[:, prompt_width:-1].reshape(1, -1)[:, flat],
                                use_cache=False, shared_prefix=shared).last_hidden_state  # (1, N, D)
        D = packed.shape[-1]
        rest = packed.new_zeros(len(row_prompt) * (T - 1), D).index_copy(0, flat, packed[0])
        return torch.cat([first, rest.view(-1, T - 1, D)], dim=1)  # (B, T, D), zeros where nothing is predicted
    if not torch.equal(row_prompt, torch.arange(len(row_prompt), device=row_prompt.device)):
        cache.batch_select_indices(row_prompt)
    with parts.autocast():
        rest = parts.body(input_ids=input_ids[:, prompt_width:-1], attention_mask=attention_mask[:, :-1],
                          position_ids=positions[:, prompt_width:-1], past_key_values=cache,
                          use_cache=True).last_hidden_state  # (B, T - 1, D)
    return torch.cat([first, rest], dim=1)


def sequence_logprobs(model, precision, input_ids, attention_mask, prompt_width: int, temperature: float = 1.0,
                      with_entropy: bool = False, gradient_checkpointing: bool = False):
    """Logprobs (B, T) float32 of the response tokens under the current weights (and entropy (B, T)).

    Position t of the response is predicted by hidden state P + t - 1, through the same precision
    head and temperature the generator sampled with.
    """
    parts = lm_parts(model)
    with checkpointed_layers(model, gradient_checkpointing and torch.is_grad_enabled()):
        hidden = response_hidden_states(model, input_ids, attention_mask, prompt_width)
    return head_logprobs(precision, hidden, parts.head.weight, parts.head.bias, input_ids[:, prompt_width:],
                         temperature, with_entropy)


def head_logprobs(precision, hidden, weight, bias, targets, temperature: float, with_entropy: bool):
    """log softmax(head(hidden) / temperature)[targets] (B, T) float32, and the entropy (B, T) if asked.

    In chunks of tokens whose fp32 logits take about HEAD_CHUNK_BYTES, each chunk recomputed in the
    backward (checkpointed), so memory is that of one chunk, not of the (B, T, V) logits. A batch that
    fits one chunk (the testbed's) is computed at once, as without chunks.
    """
    B, T, D = hidden.shape
    chunk = max(1, HEAD_CHUNK_BYTES // (4 * weight.shape[0])) if HEAD_CHUNK_BYTES > 0 else B * T
    if B * T <= chunk:
        return _head_chunk(hidden, targets, weight, bias, precision, temperature, with_entropy)
    flat_hidden, flat_targets = hidden.reshape(B * T, D), targets.reshape(B * T)
    recompute = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    pieces = []
    for start in range(0, B * T, chunk):
        args = (flat_hidden[start:start + chunk], flat_targets[start:start + chunk], weight, bias, precision,
                temperature, with_entropy)
        pieces.append(checkpoint(_head_chunk, *args, use_reentrant=False) if recompute else _head_chunk(*args))
    logprobs = torch.cat([p[0] for p in pieces]).view(B, T)
    return logprobs, torch.cat([p[1] for p in pieces]).view(B, T) if with_entropy else None


def _head_chunk(hidden, targets, weight, bias, precision, temperature: float, with_entropy: bool):
    """head_logprobs of one chunk: hidden (..., D), targets (...)."""
    logits = precision.head_logits(hidden, weight, bias)
    logp_all = torch.log_softmax(logits / temperature, dim=-1)  # (..., V), head dtype
    logprobs = logp_all.gather(-1, targets[..., None]).squeeze(-1).float()
    if not with_entropy:
        return logprobs, None
    with torch.no_grad():
        entropy = -(logp_all.float().exp() * logp_all.float()).sum(-1)
    return logprobs, entropy


def reference_logprobs(reference, precision, rollout: Rollout, rows: slice, width: int, temperature: float):
    """The frozen reference model's logprobs (B, T) of a micro-batch's response tokens: one forward, no graph."""
    P = rollout.prompt_width
    with torch.no_grad():
        logprobs, _ = sequence_logprobs(reference, precision, rollout.input_ids[rows, :P + width],
                                        rollout.attention_mask[rows, :P + width], P, temperature)
    return logprobs


class StalenessError(RuntimeError):
    """A batch held a token older than the off-policy mode allows (a scheduling bug, never expected)."""


@dataclass
class TrainBatch:
    """What one optimizer step trains on: kept rows of a rollout with their advantages."""

    rollout: Rollout
    advantages: torch.Tensor  # (B,) one per sequence
    group_ids: torch.Tensor  # (B,)
    version: int  # the trainer's policy version (optimizer steps taken) when it trains on this batch

    def staleness(self) -> torch.Tensor:
        """Per sampled token: trainer version - version of the weights that sampled it (>= 0)."""
        return (self.version - self.rollout.versions)[self.rollout.loss_mask]


def build_optimizer(model, cfg):
    """AdamW (cfg: run_config.OptimizerConfig) with linear warmup to a constant lr.

    torch's fused AdamW (one kernel over all parameters; CPU and CUDA) where the parameters allow
    it: the same update up to round-off, ~4x faster than the per-parameter loop on the testbed (0.7 vs
    3.0 ms a step).
    """
    parameters = list(model.parameters())
    fused = all(p.device.type in ("cpu", "cuda") and p.dtype in (torch.float32, torch.float64) for p in parameters)
    optimizer = torch.optim.AdamW(parameters, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps,
                                  weight_decay=cfg.weight_decay, fused=fused or None)
    warmup = max(1, cfg.warmup_steps)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
    return optimizer, schedule


def micro_batches(response_lengths: torch.Tensor, prompt_width: int, micro_batch_size: int = 0,
                  micro_batch_tokens: int = 0) -> list[tuple[slice, int]]:
    """Consecutive row ranges of a minibatch and the response width each needs: [(rows, width), ...].

    A micro-batch ends before it would hold more than micro_batch_size rows or more than
    micro_batch_tokens tokens, counted as rows x (prompt_width + its longest response), the shape
    its forward computes (0: no bound). A row longer than the token budget trains alone. The rows stay
    in order, so a prompt's samples stay together for the shared-prompt forward.
    """
    rows = len(response_lengths)
    lengths = [max(1, int(n)) for n in response_lengths.tolist()]
    out, start = [], 0
    while start < rows:
        end, width = start + 1, lengths[start]
        while end < rows and (micro_batch_size <= 0 or end - start < micro_batch_size):
            wider = max(width, lengths[end])
            if micro_batch_tokens > 0 and (end + 1 - start) * (prompt_width + wider) > micro_batch_tokens:
                break
            end, width = end + 1, wider
        out.append((slice(start, end), width))
        start = end
    return out


def combine_micro_batches(key: str, parts: list[tuple[float, float]]) -> float:
    """A loss metric of the whole minibatch from its micro-batches' (tokens, value): extremes (…_max, …_min) by
    max / min, counts (loss/log_ratio_clamped) summed, means and fractions weighted by the micro-batch's tokens.
    A plain mean of the parts read two micro-batches' ratio maxima 5 and 1 as 3 and hid the spike the metric is
    there to show. (GSPO's per-sequence fractions then weigh a sequence by its tokens: exact in one micro-batch.)"""
    values = [value for _, value in parts]
    if key.endswith("_max"):
        return max(values)
    if key.endswith("_min"):
        return min(values)
    if key == "loss/log_ratio_clamped":
        return sum(values)
    tokens = sum(weight for weight, _ in parts)
    return sum(weight * value for weight, value in parts) / tokens if tokens else sum(values) / len(values)


def train_step(model, optimizer, schedule, batch: TrainBatch, *, loss_fn, aggregation, precision,
               temperature: float, grad_clip: float, micro_batch_size: int = 0, micro_batch_tokens: int = 0,
               gradient_checkpointing: bool = False, staleness_bound: int | None = None, kl_penalty=None,
               reference=None) -> dict[str, float]:
    """One optimizer step on `batch`; returns train metrics (loss, grad norm, entropy, ratios...).

    The minibatch runs in micro-batches (micro_batches: by rows and/or tokens), each cut to its own
    longest response; the aggregation's weights come from the whole minibatch, so the gradient is that
    of one pass. staleness_bound: the off-policy mode's bound; a token older than it raises
    StalenessError before any weight changes. kl_penalty with a `reference` model: each token's loss
    gains coef * kl_t (components/kl.py), kl_t from the reference's logprobs of the same tokens.
    """
    staleness = batch.staleness()
    max_staleness = int(staleness.max()) if staleness.numel() else 0
    if staleness_bound is not None and max_staleness > staleness_bound:
        raise StalenessError(f"a batch trained at version {batch.version} holds a token {max_staleness} versions "
                             f"old (bound {staleness_bound})")
    model.train()
    rollout = batch.rollout
    mask = rollout.loss_mask
    weights = aggregation.token_weights(mask, batch.group_ids)  # (B, T), sum_bt w l = the loss
    P = rollout.prompt_width
    total_loss, token_count = 0.0, float(mask.sum())
    entropy_sum = mismatch_sum = kl_sum = 0.0
    component_metrics: dict[str, list[tuple[float, float]]] = {}  # key -> [(micro-batch tokens, value)]
    optimizer.zero_grad(set_to_none=True)
    response_lengths = rollout.attention_mask[:, P:].sum(1)
    for rows, width in micro_batches(response_lengths, P, micro_batch_size, micro_batch_tokens):
        m, old = mask[rows, :width], rollout.old_logprobs[rows, :width]
        logprobs, entropy = sequence_logprobs(model, precision, rollout.input_ids[rows, :P + width],
                                              rollout.attention_mask[rows, :P + width], P, temperature,
                                              with_entropy=True, gradient_checkpointing=gradient_checkpointing)
        advantages = batch.advantages[rows, None].expand_as(logprobs)
        output = loss_fn(logprobs, old, advantages, m)
        per_token_loss = output.per_token_loss
        if reference is not None:
            ref_logprobs = reference_logprobs(reference, precision, rollout, rows, width, temperature)
            kl = kl_penalty.penalty(logprobs, ref_logprobs)
            per_token_loss = per_token_loss + kl_penalty.coef * kl
            kl_sum += float(kl.detach()[m].sum())
        loss = (weights[rows, :width] * per_token_loss).sum()
        loss.backward()
        total_loss += float(loss.detach())
        entropy_sum += float(entropy[m].sum())
        mismatch_sum += float((logprobs.detach() - old).abs()[m].sum())
        for key, value in output.metrics.items():
            component_metrics.setdefault(key, []).append((float(m.sum()), value))
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    schedule.step()
    model.eval()
    metrics = {key: combine_micro_batches(key, parts) for key, parts in component_metrics.items()}
    metrics.update({
        "train/loss": total_loss,
        "train/grad_norm": float(grad_norm),
        "train/lr": optimizer.param_groups[0]["lr"],
        "train/entropy": entropy_sum / max(token_count, 1.0),
        "train/tokens": token_count,
        "train/staleness": float(staleness.float().mean()) if staleness.numel() else 0.0,
        "train/staleness_max": float(max_staleness),
    })
    if reference is not None:
        metrics["train/kl"] = kl_sum / max(token_count, 1.0)
    if max_staleness == 0:
        # Same weights on both sides: any gap is generator/trainer numerics (bf16 head, batching).
        metrics["train/logprob_mismatch"] = mismatch_sum / max(token_count, 1.0)
    return metrics
