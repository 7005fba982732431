"""Batched sampling with a KV cache that records the behaviour logprob of every sampled token.

One decode step for B sequences: hidden (B, D) from the model body (KV cache reused), logits (B, V)
from the `precision` component (fp32 or bf16 head: the same call the trainer makes), then sample
from softmax(logits / temperature) and record log p(token) in that same distribution. Those are
the behaviour logprobs (`old_logprobs`) every loss uses; they are never recomputed.

Forced interruption (length control): when a sample has thought for its budget without closing
`</think>`, the phrase's tokens are fed instead of samples (loss mask 0, logprob 0), then the model
answers for at most `answer_budget` tokens. The response layout is [prompt, left-padded | response,
right-padded]; positions come from the attention mask, so the trainer's single forward pass over
the same tensors sees exactly what the generator saw. RowState holds each row's place in that
state machine as (B,) tensors.

The G samples of a prompt share its prefill (the body runs once per distinct prompt) and, in the
decode steps, its keys and values (recipe/prefix_attention.py: each row's cache holds its response
only, the prompt's are read once per prompt; `shared_prefix_decoding=False` gathers them to every
row instead, the path for models that attention function does not serve).

Rows that finished (<eos>, or out of answer budget) leave the decode batch once they are an eighth
of it (COMPACT_FRACTION): the KV cache keeps only the active rows, so the body, the head and
sampling stop spending work on finished ones (~16% of a generate call on the testbed, where
answers end at 11 or 14 tokens of 15). Their later tokens are padding, as before. DecodeBatch
owns that side: the prefill, the cache (shared prefix or gathered), the active rows.

Memory: each layer's response keys and values live in buffers of the generation's token limit,
allocated once per decode batch (SharedPrefixCache.append writes a step in place; nothing grows by
concatenation) on CUDA and for long decodes on CPU (short ones on CPU concatenate, measured faster:
prefix_attention.PREALLOCATE_FROM_TOKENS), and `decode_token_budget` bounds a decode batch to
rows x (prompt width + limit) tokens: a call's rows decode in groups of that size, one after the
other, each row with the uniforms and thinking budget drawn for it up front, so the samples do not
depend on the budget. (A model outside the shared-prefix attention keeps transformers' DynamicCache,
which grows by concatenation.)

`generate`'s loop is then, per step: decode (pick_tokens on the active rows), force (RowState: the
tokens the rows emit, and each row moved on), compact (DecodeBatch drops finished rows and feeds the
tokens to the model).

In-flight weight updates (PipelineRL): `on_decode_step(tokens, context)` is called before the prefill and
before every decode step, with the size of the forward pass about to run (the tokens it feeds and their
attention contexts summed, recipe.compute.ModelShape.forward_flops's arguments: PipelineRL's modeled
timing charges them); it may load new weights into the model in place and returns the policy version
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
from recipe.sampling import pick_tokens
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


# Finished rows are dropped from the decode batch once they are this share of it: each drop copies
# the KV cache once, so dropping every row the moment it finishes would copy it at nearly every step.
COMPACT_FRACTION = 0.125


class RowState:
    """Where each of B rows stands in thinking -> [forced phrase -> answer] -> finished: (B,) tensors.

    A vectorised per-row decode state with a queue of forced tokens (as nanochat's RowState): the queue
    is the interruption phrase and `phrase_at` each row's place in it (-1: nothing queued). A row thinks
    until `</think>` closes (sampled, or the phrase's last tokens). Once it has sampled `budget`
    thinking tokens without closing, the phrase is queued; its tokens replace the samples (loss mask 0,
    logprob 0), and then the row answers for at most `answer_budget` sampled tokens (`truncated` when
    they run out). <eos> sampled anywhere finishes a row; a finished row emits <pad>. Without budgets
    (no interruption) only <eos> finishes a row and the thinking bookkeeping is skipped.

    Each step: `force(token)` gives the tokens the rows emit and which of them are their own samples;
    `advance(token, sampled, recent)` moves every row on by what it emitted.
    """

    def __init__(self, B: int, *, eos: int, pad: int, close: list[int], phrase: list[int] | None = None,
                 budgets=None, answer_budget: int | None = None, device=None) -> None:
        """budgets: (B,) thinking budgets in sampled tokens, or None (no interruption); phrase: its token ids."""
        self.eos, self.pad = eos, pad
        self.close = torch.tensor(close, dtype=torch.long, device=device)[:, None]  # (k, 1): against (k, B)
        self.phrase = torch.tensor(phrase or [], dtype=torch.long, device=device)
        self.budgets = None if budgets is None else torch.as_tensor(budgets, device=device)
        self.answer_budget = answer_budget or 0
        self.finished = torch.zeros(B, dtype=torch.bool, device=device)
        self.truncated = torch.zeros(B, dtype=torch.bool, device=device)  # stopped by the answer budget
        self.interrupted = torch.zeros(B, dtype=torch.bool, device=device)
        self.lengths = torch.zeros(B, dtype=torch.long, device=device)  # emitted tokens, forced ones included
        self.thinking = torch.ones(B, dtype=torch.bool, device=device)
        self.think_len = torch.zeros(B, dtype=torch.long, device=device)  # sampled thinking tokens
        self.phrase_at = torch.full((B,), -1, dtype=torch.long, device=device)
        self.answer_left = torch.full((B,), -1, dtype=torch.long, device=device)  # after an interruption only

    def interrupted_width(self) -> int:
        """The most tokens an interrupted row can emit: the largest budget, the phrase and the answer."""
        if self.budgets is None:
            return 0
        return int(self.budgets.max()) + len(self.phrase) + self.answer_budget

    def force(self, token: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B,) sampled tokens -> the (B,) tokens emitted (queued phrase tokens, <pad> once finished), and
        the (B,) mask of rows whose emitted token is their own sample."""
        forcing = self.phrase_at >= 0
        if self.budgets is not None:  # no test of forcing.any(): it would wait for the device at every token
            token = torch.where(forcing, self.phrase[self.phrase_at.clamp_min(0)], token)
        return token.masked_fill(self.finished, self.pad), ~self.finished & ~forcing

    def advance(self, token: torch.Tensor, sampled: torch.Tensor, recent: torch.Tensor) -> None:
        """Move every row on by its emitted token; recent (k, B): the last k = len(close) tokens emitted,
        this one included (fewer in the first steps)."""
        self.lengths += ~self.finished
        self.finished |= sampled & (token == self.eos)
        if self.budgets is None:
            return
        if recent.shape[0] == self.close.shape[0]:
            self.thinking &= ~(recent == self.close).all(dim=0)
        self.think_len += self.thinking & sampled
        self.answer_left -= (sampled & (self.answer_left >= 0)).long()
        # The queue advances; a row past the phrase's last token stops thinking and starts its answer budget.
        forcing = self.phrase_at >= 0
        self.phrase_at += forcing
        phrase_done = forcing & (self.phrase_at >= len(self.phrase))
        self.phrase_at.masked_fill_(phrase_done, -1)
        self.answer_left.masked_fill_(phrase_done, self.answer_budget)
        self.thinking &= ~phrase_done
        start = ~self.finished & self.thinking & (self.phrase_at < 0) & (self.think_len >= self.budgets)
        self.phrase_at.masked_fill_(start, 0)
        self.interrupted |= start
        out_of_answer = ~self.finished & (self.answer_left == 0)
        self.truncated |= out_of_answer
        self.finished |= out_of_answer


class DecodeBatch:
    """The model's side of decoding: the prompts' prefill, the rows still in its batch and their KV cache.

    The prompts' keys and values stay once per distinct prompt (SharedPrefixCache) and each row's own
    are its response's; for a model the shared-prefix attention does not serve, the prompt cache is
    gathered to the B rows and an attention mask is kept. `active` (A,) are the rows still in the
    model's batch: finished rows leave it once they are a COMPACT_FRACTION of it.
    """

    def __init__(self, model, distinct_ids, distinct_mask, row_prompt, *, shared_prefix_decoding: bool,
                 limit: int) -> None:
        """Prefill the U distinct prompts (distinct_ids (U, P)) for rows row_prompt (B,); `hidden` (B, D)."""
        from transformers import DynamicCache

        self.model, self.parts = model, lm_parts(model)
        self.cache = DynamicCache()
        with self.parts.autocast():
            out = self.parts.body(input_ids=distinct_ids, attention_mask=distinct_mask,
                                  position_ids=positions_from_mask(distinct_mask), past_key_values=self.cache,
                                  use_cache=True)
        self.hidden = out.last_hidden_state[:, -1][row_prompt]
        prompt_mask = distinct_mask[row_prompt]
        B, P = prompt_mask.shape
        self.shared_prefix, self.attention_mask = None, None
        if shared_prefix_decoding and supports_shared_prefix(model):
            self.shared_prefix = SharedPrefixCache(self.cache, distinct_mask, row_prompt, capacity=limit)
        else:  # the per-row cache's mask (B, P + limit): the first `width` columns are the tokens so far
            # Row r reads prompt row_prompt[r]: gathered unless the prompts are the rows in order.
            if not torch.equal(row_prompt, torch.arange(B, device=row_prompt.device)):
                self.cache.batch_select_indices(row_prompt)
            self.attention_mask = torch.cat([prompt_mask, prompt_mask.new_ones(B, limit)], dim=1)
        self.width = P
        self.next_position = positions_from_mask(prompt_mask)[:, -1] + 1
        self.active = torch.arange(B, device=prompt_mask.device)
        self.B = B

    def widen(self, values: torch.Tensor, fill) -> torch.Tensor:
        """(A,) values of the active rows -> (B,), `fill` on the rows that left the batch."""
        if len(self.active) == self.B:
            return values
        return values.new_full((self.B,), fill).index_copy_(0, self.active, values)

    def compact(self, finished: torch.Tensor) -> None:
        """Drop the finished rows (finished (B,)) once they are a COMPACT_FRACTION of the batch."""
        still = ~finished[self.active]
        if len(self.active) - int(still.sum()) >= COMPACT_FRACTION * len(self.active):
            keep = still.nonzero().squeeze(-1)
            if self.shared_prefix is None:
                self.cache.batch_select_indices(keep)
            else:
                self.shared_prefix.select(keep)
            self.active = self.active[still]

    def step(self, token: torch.Tensor) -> torch.Tensor:
        """Feed each active row its token (token (B,)); returns the next hidden states (A, D)."""
        rows = self.active if len(self.active) < self.B else slice(None)  # every row: no gather
        with self.parts.autocast(cache=False):
            if self.shared_prefix is None:
                self.width += 1  # (a host counter only this cache's mask needs: a compiled static step has none)
                out = self.parts.body(input_ids=token[rows, None],
                                      attention_mask=self.attention_mask[rows, :self.width],
                                      position_ids=self.next_position[rows, None], past_key_values=self.cache,
                                      use_cache=True)
            else:  # no mask: a decode row attends to all of its keys
                with shared_prefix_attention_on(self.model):
                    out = self.parts.body(input_ids=token[rows, None], position_ids=self.next_position[rows, None],
                                          use_cache=False, shared_prefix=self.shared_prefix)
        self.next_position += 1
        return out.last_hidden_state[:, -1]


def decode_parts(rows: int, row_tokens: int, token_budget: int) -> list[slice]:
    """Consecutive groups of rows that each hold at most token_budget tokens of row_tokens each (one row at
    least); token_budget 0: all rows in one group."""
    per_part = rows if token_budget <= 0 else max(1, token_budget // row_tokens)
    return [slice(start, min(rows, start + per_part)) for start in range(0, rows, per_part)]


@dataclass
class Emitted:
    """What a generate call's decode steps emit, by step (limit, B): a step writes one contiguous row. A group
    of rows that finishes before another leaves <pad>, loss mask False and logprob 0 in the later steps."""

    tokens: torch.Tensor  # (limit, B) long
    logprobs: torch.Tensor  # (limit, B) float32
    loss_mask: torch.Tensor  # (limit, B) bool
    versions: torch.Tensor  # (limit, B) long
    lengths: torch.Tensor  # (B,) long
    truncated: torch.Tensor  # (B,) bool
    interrupted: torch.Tensor  # (B,) bool

    @classmethod
    def allocate(cls, limit: int, B: int, pad: int, device) -> "Emitted":
        return cls(tokens=torch.full((limit, B), pad, dtype=torch.long, device=device),
                   logprobs=torch.zeros(limit, B, dtype=torch.float32, device=device),
                   loss_mask=torch.zeros(limit, B, dtype=torch.bool, device=device),
                   versions=torch.empty(limit, B, dtype=torch.long, device=device),
                   lengths=torch.zeros(B, dtype=torch.long, device=device),
                   truncated=torch.zeros(B, dtype=torch.bool, device=device),
                   interrupted=torch.zeros(B, dtype=torch.bool, device=device))

    def finish_part(self, part: slice, rows: RowState) -> None:
        self.lengths[part], self.interrupted[part] = rows.lengths, rows.interrupted
        self.truncated[part] = rows.truncated | ~rows.finished  # out of the length limit before <eos>

    def rollout(self, input_ids: torch.Tensor, prompt_mask: torch.Tensor, steps: int) -> Rollout:
        """The Rollout of the first `steps` steps after the prompts (input_ids, prompt_mask (B, P))."""
        valid = torch.arange(steps, device=input_ids.device)[None, :] < self.lengths[:, None]
        return Rollout(
            input_ids=torch.cat([input_ids, self.tokens[:steps].T.contiguous()], dim=1),
            attention_mask=torch.cat([prompt_mask, valid.long()], dim=1),
            prompt_width=input_ids.shape[1],
            loss_mask=self.loss_mask[:steps].T.contiguous(),
            old_logprobs=self.logprobs[:steps].T.contiguous(),
            lengths=self.lengths,
            truncated=self.truncated,
            interrupted=self.interrupted,
            versions=self.versions[:steps].T.contiguous(),
        )


@dataclass
class Sampling:
    """How one part's tokens are picked: the head's precision, temperature, greedy rows and the uniforms."""

    precision: object
    temperature: float
    greedy: bool | torch.Tensor  # True/False, or the part's (rows,) flags
    uniforms: torch.Tensor  # (rows, limit): row r's t-th token is decided by uniforms[r, t]
    per_row_greedy: bool  # greedy is a tensor of flags


def eager_decode(batch: "DecodeBatch", rows: RowState, out: Emitted, part: slice, sampling: Sampling, *, limit: int,
                 version: int, prompt_width: int, on_decode_step) -> tuple[int, int]:
    """The eager decode loop of one part of a call: per step decode (pick_tokens on the active rows), force
    (RowState: the tokens the rows emit, each row moved on), compact (DecodeBatch drops finished rows and
    feeds the tokens). Returns (steps taken, the policy version loaded last)."""
    hidden, close_len = batch.hidden, rows.close.shape[0]
    for t in range(limit):
        # Decode: the active rows' next tokens, then widened to all of the group's rows.
        logits = sampling.precision.head_logits(hidden, batch.parts.head.weight, batch.parts.head.bias)  # (A, V)
        pick_greedy = sampling.greedy[batch.active] if sampling.per_row_greedy else sampling.greedy
        uniform = None if not sampling.per_row_greedy and sampling.greedy else sampling.uniforms[batch.active, t]
        token, logp = pick_tokens(logits, sampling.temperature, pick_greedy, uniform)
        # Force: queued phrase tokens replace samples, finished rows emit <pad>; only samples are trained on.
        token, sampled = rows.force(batch.widen(token, rows.pad))
        out.tokens[t, part], out.loss_mask[t, part] = token, sampled
        out.logprobs[t, part] = batch.widen(logp, 0.0).where(sampled, 0.0)
        out.versions[t, part] = version
        rows.advance(token, sampled, out.tokens[max(t + 1 - close_len, 0):t + 1, part])
        if bool(rows.finished.all()) or t == limit - 1:
            break
        # Compact, then feed the emitted tokens (new weights, if any, apply from this forward pass on).
        batch.compact(rows.finished)
        if on_decode_step is not None:  # the feed: one token a row still in the batch, at position P + t
            fed = len(batch.active)
            version = on_decode_step(fed, fed * (prompt_width + t + 1))
        hidden = batch.step(token)
    out.versions[t + 1:, part] = version
    return t + 1, version


def static_decode_part(batch: "DecodeBatch", rows: RowState, out: Emitted, part: slice, sampling: Sampling, *,
                       limit: int, version: int, pad: int, on_decode_step) -> tuple[int, int]:
    """One part of a call decoded at static shapes with the host out of the loop (recipe/static_decode.py);
    returns (steps taken, the policy version loaded last)."""
    from recipe.static_decode import StaticDecode

    decode = StaticDecode(batch, rows, precision=sampling.precision, temperature=sampling.temperature,
                          greedy=sampling.greedy, uniforms=sampling.uniforms, limit=limit, version=version, pad=pad)
    steps = decode.run(on_decode_step)
    out.tokens[:, part], out.loss_mask[:, part] = decode.emitted, decode.loss_mask
    out.logprobs[:, part], out.versions[:, part] = decode.logprobs, decode.versions
    return steps, decode.loaded  # the next group's prefill runs on the weights loaded last


def static_decoder(model, on_decode_step, policy_version: int) -> tuple:
    """(the model the static path decodes with, its on_decode_step): the body's Linear weights cast to the
    compute dtype once per call and again whenever new weights load, not at every token; the model itself
    where there is nothing to cast."""
    from recipe.static_decode import compute_dtype_copy

    copied, refresh = compute_dtype_copy(model)
    if copied is None:
        return model, on_decode_step
    copied_version = None

    def copying_on_decode_step(tokens: int, context: int) -> int:
        nonlocal copied_version
        version = on_decode_step(tokens, context) if on_decode_step is not None else policy_version
        if version != copied_version:  # new weights (or the call's first): copy them
            refresh()
            copied_version = version
        return version

    return copied, copying_on_decode_step


def encode_prompts(tokenizer, prompts: list[str], device) -> tuple:
    """(distinct prompt ids (U, P), their mask, each row's prompt index (B,)): G samples of a prompt share its
    prefill, so the body runs once per distinct prompt."""
    distinct = {prompt: index for index, prompt in enumerate(dict.fromkeys(prompts))}
    row_prompt = torch.tensor([distinct[prompt] for prompt in prompts], device=device)
    encoded = tokenizer(list(distinct), padding=True, return_tensors="pt")
    return encoded.input_ids.to(device), encoded.attention_mask.to(device), row_prompt


def greedy_flags(greedy: bool | torch.Tensor, B: int, device) -> torch.Tensor | None:
    """greedy as per-row flags on the device, or None when it is one bool for every row."""
    if not isinstance(greedy, torch.Tensor):
        return None
    if greedy.shape != (B,):
        raise ValueError(f"generate: greedy must be a bool or a ({B},) tensor, one flag per prompt; got shape "
                         f"{tuple(greedy.shape)}")
    return greedy.to(device=device, dtype=torch.bool)


@torch.no_grad()
def generate(model, tokenizer, prompts: list[str], *, precision, length_control, max_new_tokens: int,
             temperature: float = 1.0, greedy: bool | torch.Tensor = False, torch_rng: torch.Generator | None = None,
             numpy_rng: np.random.Generator | None = None, policy_version: int = 0,
             on_decode_step: Callable[[int, int], int] | None = None, shared_prefix_decoding: bool = True,
             decode_token_budget: int = 0, static_decode: bool | None = None) -> Rollout:
    """Sample one response per prompt (repeat prompts for G samples). Runs on the model's device.

    greedy: True takes the argmax token everywhere; a (B,) bool tensor takes it on its True rows
    and samples the others (evaluation runs its greedy and sampled answers as one batch).
    decode_token_budget: the most tokens, rows x (prompt width + the token limit), one decode batch
    holds (its key/value cache and every per-token tensor of decoding are bounded by it); the rows
    decode in consecutive groups of that size, one after the other (0: all at once). Every row's
    uniforms and thinking budget are drawn up front for the whole call, so the samples are the same
    whatever the budget.
    static_decode: step at static shapes with the host out of the loop (recipe/static_decode.py: CUDA graphs on
    a GPU; the same steps without graphs on CPU); None: on CUDA wherever the shared-prefix attention serves
    the model. The samples are the eager loop's to round-off.
    """
    device = next(model.parameters()).device
    distinct_ids, distinct_mask, row_prompt = encode_prompts(tokenizer, prompts, device)
    input_ids, prompt_mask = distinct_ids[row_prompt], distinct_mask[row_prompt]
    B, P = input_ids.shape
    greedy_rows = greedy_flags(greedy, B, device)
    budgets = length_control.thinking_budgets(B, numpy_rng) if numpy_rng is not None else None
    row_state = dict(eos=tokenizer.eos_token_id, pad=tokenizer.pad_token_id,
                     close=tokenizer.encode(THINK_CLOSE, add_special_tokens=False),
                     phrase=None if budgets is None else tokenizer.encode(length_control.interruption_phrase,
                                                                          add_special_tokens=False),
                     answer_budget=length_control.answer_budget, device=device)
    # The interruption must be able to finish: phrase + answer after the largest budget.
    limit = max(max_new_tokens, RowState(B, budgets=budgets, **row_state).interrupted_width())
    # One uniform per row and position, drawn before decoding: row r's t-th token is decided by
    # uniforms[r, t] whatever the other rows do (finished rows leave the batch; recipe.sampling's
    # inverse_cdf_sample).
    uniforms = torch.rand(B, limit, generator=torch_rng, device=device)
    out = Emitted.allocate(limit, B, tokenizer.pad_token_id, device)
    static = ((device.type == "cuda" if static_decode is None else static_decode) and shared_prefix_decoding
              and supports_shared_prefix(model))
    decoder = model
    if static:
        decoder, on_decode_step = static_decoder(model, on_decode_step, policy_version)
    # The prefill runs the body once per distinct prompt, at the padded prompt width.
    prefill = len(distinct_ids) * P, len(distinct_ids) * P * (P + 1) // 2
    version = on_decode_step(*prefill) if on_decode_step is not None else policy_version
    steps = 0
    for part in decode_parts(B, P + limit, decode_token_budget):
        used, local_prompt = torch.unique(row_prompt[part], return_inverse=True)
        rows = RowState(part.stop - part.start, budgets=None if budgets is None else budgets[part], **row_state)
        batch = DecodeBatch(decoder, distinct_ids[used], distinct_mask[used], local_prompt,
                            shared_prefix_decoding=shared_prefix_decoding, limit=limit)
        sampling = Sampling(precision, temperature, greedy if greedy_rows is None else greedy_rows[part],
                            uniforms[part], per_row_greedy=greedy_rows is not None)
        if static:
            part_steps, version = static_decode_part(batch, rows, out, part, sampling, limit=limit, version=version,
                                                     pad=tokenizer.pad_token_id, on_decode_step=on_decode_step)
        else:
            part_steps, version = eager_decode(batch, rows, out, part, sampling, limit=limit, version=version,
                                               prompt_width=P, on_decode_step=on_decode_step)
        steps = max(steps, part_steps)
        out.finish_part(part, rows)
        del batch  # its cache goes before the next group's is allocated
    return out.rollout(input_ids, prompt_mask, steps)


class TorchGenerator:
    """The generator every platform has: `generate` above, on the model it holds (CPU or CUDA).

    The generator interface (recipe/vllm_generator.py's VllmGenerator implements the same):
        model, tokenizer, device                  the torch model whose weights it serves, its tokenizer, the
                                                  device its rollouts are on
        generate(prompts, *, precision, length_control, max_new_tokens, temperature, greedy, torch_rng,
                 numpy_rng, policy_version, on_decode_step, decode_token_budget) -> Rollout
    A change to `model`'s weights is served from the first call given a new policy_version (here at once:
    the decode loop runs on `model` itself). tests/recipe/test_generator_contract.py holds every backend to it.
    """

    name = "torch"

    def __init__(self, model, tokenizer) -> None:
        self.model, self.tokenizer = model, tokenizer

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def generate(self, prompts: list[str], **settings) -> Rollout:
        return generate(self.model, self.tokenizer, prompts, **settings)
