"""Attention that reads a shared prompt's keys and values once per prompt, not once per row.

An RL batch holds G samples of each prompt. With one KV cache row per sample, every decode step
copies (the Hugging Face cache grows by concatenation) and reads the prompt's keys and values G
times over, and the trainer gathers them to every row and backpropagates through that gather: on
the testbed the 12-token prompt is a third to a half of each row. Here the prompt's keys and values
are kept once per distinct prompt, a row's own keys and values are those of its response only, and
the attention of the row's response queries over [prompt | response] is computed in two parts that
share one softmax:

    s_p = q k_p^T * scale + b_p   (the row's prompt keys; b_p = -inf on the prompt's left padding)
    s_r = q k_r^T * scale + c_r   (the row's own response keys; c_r = -inf on keys after the query)
    [a_p | a_r] = softmax([s_p | s_r]),   out = a_p v_p + a_r v_r

the same function as one attention over the concatenated row. The prompt part is one batched
matmul per distinct prompt: the queries of its rows are laid out (U, rows x queries, ...) and
multiply the U prompts' keys once. Right padding of the response needs no mask: a padded key is
seen only by later queries, which are padding too (their outputs are never read).

It is an attention function registered with transformers' AttentionInterface, so it serves any
Hugging Face model built on that interface (`model._supports_attention_backend`): the model's own
projections and rotary embedding run unchanged, and the model is called without a cache of its own
(a SharedPrefixCache is passed as the `shared_prefix` keyword, which transformers forwards to the
attention function). `generate` uses it for its decode steps (one query per row, the response's
keys appended step by step) and the trainer for the response forward (all response tokens as
queries, in blocks of TRAINING_QUERY_BLOCK recomputed in the backward, autograd through both parts;
the model runs on the real tokens packed into one row and only this function lays them out as rows,
see `SharedPrefixCache.pack_responses`); the prompts' own forward keeps the model's attention. Both
roles compute the same arithmetic, so behaviour and trainer logprobs agree to round-off in any dtype.
What it saves on the testbed: BENCHMARKS.md, "Shared prompt and packed tokens".
"""

from __future__ import annotations

import contextlib

import torch
from torch.utils.checkpoint import checkpoint

NAME = "scalerl_shared_prefix"
# The trainer's response queries are attended in blocks of this many, each block recomputed in the
# backward: a block's (rows, heads, block, prompt + response) scores are the largest tensor attention
# makes, so memory grows linearly with the response, not with its square. 0: the whole response at once
# (bench_train_memory's `before` mode; BENCHMARKS.md, "Trainer memory against response length on CPU").
TRAINING_QUERY_BLOCK = 512
# Decoding keeps each layer's response keys and values in buffers of the token limit on CUDA, and on CPU
# from this many tokens on. Below it, on CPU, concatenation is faster (a matmul over the buffers' strided
# views is slower than over contiguous keys). Past it, concatenation copies every key at every step and
# glibc's heap outgrows the cache (BENCHMARKS.md, "Trainer memory against response length on CPU").
PREALLOCATE_FROM_TOKENS = 256


class SharedPrefixCache:
    """Keys and values for the attention above: the U distinct prompts' once, each row's response its own.

    prompt_keys/values: per layer (U, H_kv, P, D); prompt_bias (U, 1, 1, P): 0 on real prompt tokens,
    -inf on padding; row_prompt (A,): each active row's prompt; slot (A,): the row's index among the
    rows of its prompt (< width), fixed at the start so dropping finished rows needs no renumbering;
    response_keys/values: per layer, the response tokens decoded so far: (A, H_kv, capacity, D) buffers
    allocated at the first decode step whose first filled[layer] positions hold them (`preallocated`), or
    (A, H_kv, T, D) tensors grown by concatenation (short decodes on CPU: PREALLOCATE_FROM_TOKENS).
    """

    def __init__(self, prefill_cache, prompt_mask: torch.Tensor, row_prompt: torch.Tensor, capacity: int = 0) -> None:
        """From a prefill cache over the U distinct prompts (prompt_mask (U, P)) for rows row_prompt (B,);
        capacity: the most response tokens a row will decode (its key/value buffers' length; 0 for the
        trainer, which never appends)."""
        self.prompt_keys = [layer.keys for layer in prefill_cache.layers]
        self.prompt_values = [layer.values for layer in prefill_cache.layers]
        dtype = self.prompt_keys[0].dtype
        self.prompt_bias = torch.zeros(prompt_mask.shape, dtype=dtype, device=prompt_mask.device).masked_fill(
            prompt_mask == 0, float("-inf"))[:, None, None, :]
        order = torch.argsort(row_prompt, stable=True)
        first = torch.searchsorted(row_prompt[order], row_prompt[order])  # first sorted row of each row's prompt
        self.slot = torch.empty_like(row_prompt)
        self.slot[order] = torch.arange(len(row_prompt), device=row_prompt.device) - first
        self.row_prompt = row_prompt
        self.width = int(self.slot.max()) + 1
        self.dense = self._is_dense()
        self.capacity = capacity
        self.preallocated = capacity > 0 and (prompt_mask.device.type == "cuda" or capacity >= PREALLOCATE_FROM_TOKENS)
        self.filled = [0] * len(self.prompt_keys)  # response tokens in each layer's buffers
        self.response_keys: list[torch.Tensor | None] = [None] * len(self.prompt_keys)
        self.response_values: list[torch.Tensor | None] = [None] * len(self.prompt_keys)
        self.packed: tuple[torch.Tensor, int] | None = None
        self._row_bias: torch.Tensor | None = None
        # Static decoding (make_static): the step index on the device, the response positions each step
        # reads, and which of them are after the step (masked).
        self.step: torch.Tensor | None = None
        self.view_length = 0
        self.response_future: torch.Tensor | None = None

    def make_static(self, step: torch.Tensor) -> None:
        """Decode at static shapes, for recipe/static_decode.py's CUDA graphs: step (1,) is the response position
        the next token's keys and values go to, a tensor on the device that the graph increments.

        Each layer's buffers of `capacity` positions are allocated at its first step (in the dtype of what
        the layer computes, as the eager loop keeps them), zero-filled (attention multiplies the masked
        positions' values by exactly 0, never by uninitialised memory); a step writes its keys at `step`
        and reads the first `view_length` positions (set_view), those after `step` masked.
        """
        self.step = step
        self.view_length = self.capacity
        self.row_bias  # gathered now: not lazily inside a captured or compiled step

    def set_view(self, length: int) -> None:
        """Read the first `length` response positions in the coming step (at least step + 1): the mask of
        those after the step is computed from the device's step index, so a graph captured with it replays
        at any step below `length`."""
        self.view_length = length
        self.response_future = torch.arange(length, device=self.step.device) > self.step

    @property
    def row_bias(self) -> torch.Tensor:
        """(A, 1, 1, P): each active row's prompt bias, gathered once per set of rows (not per layer)."""
        if self._row_bias is None:
            self._row_bias = self.prompt_bias[self.row_prompt]
        return self._row_bias

    def pack_responses(self, valid: torch.Tensor) -> torch.Tensor:
        """Let the model run on the real response tokens only, packed into one row; returns their flat indices.

        valid (A, T): the response positions to compute, a prefix of each row (right padding). The
        model is then called on a (1, N) row of those N tokens (with their own position ids): its
        projections, norms and MLPs are per token, so they skip the padding, and only this attention
        needs the rows, unpacked to (A, H, T, D) and packed back around it.
        """
        flat = packed_positions(valid)
        self.packed = (flat, valid.shape[1])
        return flat

    def _unpack(self, x: torch.Tensor) -> torch.Tensor:
        """(1, H, N, D) packed tokens -> (A, H, T, D) rows, zeros on the padding."""
        flat, T = self.packed
        H, D = x.shape[1], x.shape[3]
        rows = x.new_zeros(len(self.row_prompt) * T, H, D).index_copy(0, flat, x[0].transpose(0, 1))
        return rows.view(-1, T, H, D).transpose(1, 2).contiguous()

    def _pack(self, out: torch.Tensor) -> torch.Tensor:
        """(A, T, H, D) rows -> (1, N, H, D) packed tokens."""
        flat, T = self.packed
        A, _, H, D = out.shape
        return out.reshape(A * T, H, D).index_select(0, flat)[None]

    def _is_dense(self) -> bool:
        """Whether the rows are every prompt's `width` samples in order (row = prompt * width + slot).

        Then grouping rows by prompt is a reshape, not a scatter and a gather: the usual layout of an
        RL batch (sample_groups repeats each prompt G times) until finished rows leave it.
        """
        U = self.prompt_keys[0].shape[0]
        rows = torch.arange(len(self.row_prompt), device=self.row_prompt.device)
        return (len(rows) == U * self.width and torch.equal(self.row_prompt, rows // self.width)
                and torch.equal(self.slot, rows % self.width))

    def select(self, keep: torch.Tensor) -> None:
        """Keep only the decode rows `keep` (indices into the active rows)."""
        self.row_prompt, self.slot = self.row_prompt[keep], self.slot[keep]
        self._row_bias = None
        self.dense = self._is_dense()
        if not self.preallocated:
            self.response_keys = [None if k is None else k[keep] for k in self.response_keys]
            self.response_values = [None if v is None else v[keep] for v in self.response_values]
            return
        # Moved to the front of the same buffers: no new allocation, and only the filled part is copied.
        for buffers in (self.response_keys, self.response_values):
            for layer, buffer in enumerate(buffers):
                if buffer is not None:
                    filled = self.filled[layer]
                    buffer[:len(keep), :, :filled] = buffer[keep, :, :filled]
                    buffers[layer] = buffer[:len(keep)]

    def append(self, layer: int, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add this step's (A, H_kv, 1, D) keys and values; the layer's response keys and values so far.

        Preallocated: written into buffers of `capacity` positions and read through views of their filled
        part, so nothing grows by concatenation, which copies every row's keys at every step (quadratic in
        the response) and, on CPU, left glibc's heap growing. Otherwise by concatenation, as Hugging Face's
        DynamicCache does (PREALLOCATE_FROM_TOKENS says when each is used).
        """
        if self.step is not None:  # static: written where the device's step index says, read through a fixed view
            if self.response_keys[layer] is None:
                A, heads_kv, _, D = key.shape
                self.response_keys[layer] = key.new_zeros(A, heads_kv, self.capacity, D)
                self.response_values[layer] = value.new_zeros(A, heads_kv, self.capacity, D)
            self.response_keys[layer].index_copy_(2, self.step, key)
            self.response_values[layer].index_copy_(2, self.step, value)
            return (self.response_keys[layer][:, :, :self.view_length],
                    self.response_values[layer][:, :, :self.view_length])
        filled = self.filled[layer]
        if self.capacity and filled >= self.capacity:
            raise ValueError(f"shared-prefix cache: layer {layer} already holds its capacity of {self.capacity} "
                             "response tokens; generate sizes it by the generation's token limit")
        self.filled[layer] = filled + 1
        if not self.preallocated:
            if self.response_keys[layer] is not None:
                key = torch.cat([self.response_keys[layer], key], dim=2)
                value = torch.cat([self.response_values[layer], value], dim=2)
            self.response_keys[layer], self.response_values[layer] = key, value
            return key, value
        if self.response_keys[layer] is None:
            A, heads_kv, _, D = key.shape
            self.response_keys[layer] = key.new_empty(A, heads_kv, self.capacity, D)
            self.response_values[layer] = value.new_empty(A, heads_kv, self.capacity, D)
        self.response_keys[layer][:, :, filled] = key[:, :, 0]
        self.response_values[layer][:, :, filled] = value[:, :, 0]
        return self.response_keys[layer][:, :, :filled + 1], self.response_values[layer][:, :, :filled + 1]

    def grouped(self, rows: torch.Tensor, heads_kv: int) -> torch.Tensor:
        """(A, H, Q, X) per row -> (U, H_kv, (H / H_kv) * width * Q, X) per prompt (zeros where no row)."""
        A, H, Q, X = rows.shape
        if self.dense:
            per_prompt = rows.view(-1, self.width, H, Q, X)
        else:
            per_prompt = rows.new_zeros(self.prompt_keys[0].shape[0], self.width, H, Q, X)
            per_prompt[self.row_prompt, self.slot] = rows
        # Query head h reads key head h // (H / H_kv) (grouped-query attention).
        per_prompt = per_prompt.view(-1, self.width, heads_kv, H // heads_kv, Q, X).permute(0, 2, 3, 1, 4, 5)
        return per_prompt.reshape(per_prompt.shape[0], heads_kv, -1, X)

    def ungrouped(self, grouped: torch.Tensor, heads: int, queries: int) -> torch.Tensor:
        """The inverse of `grouped`: (U, H_kv, (H / H_kv) * width * Q, X) -> (A, H, Q, X)."""
        U, heads_kv, _, X = grouped.shape
        grouped = grouped.view(U, heads_kv, heads // heads_kv, self.width, queries, X).permute(0, 3, 1, 2, 4, 5)
        if self.dense:
            return grouped.reshape(U * self.width, heads, queries, X)
        return grouped.reshape(U, self.width, heads, queries, X)[self.row_prompt, self.slot]


def packed_positions(valid: torch.Tensor) -> torch.Tensor:
    """Flat indices (N,) of the True positions of valid (A, T), which must be a prefix of every row.

    Packing relies on right padding: a row's token t attends to its tokens 0..t, all of them packed.
    """
    lengths = valid.sum(1)
    if not torch.equal(valid, torch.arange(valid.shape[1], device=valid.device) < lengths[:, None]):
        raise ValueError("packing needs right-padded responses (each row's real tokens first, then padding); "
                         "got a response mask with a gap")
    return valid.reshape(-1).nonzero().squeeze(1)


def shared_prefix_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, shared_prefix=None,
                            **kwargs):
    """Attention of the Q newest response tokens of each row over its prompt (shared) and its response.

    query (A, H, Q, D); key, value (A, H_kv, Q, D): these tokens', appended to the SharedPrefixCache
    passed as `shared_prefix` (decode: Q = 1 after the earlier steps' keys; training: Q = T, the
    whole response at once). Returns (A, Q, H, D) as every transformers attention function does,
    and no weights.
    """
    cache: SharedPrefixCache = shared_prefix
    if cache is None:
        raise ValueError(f"attention {NAME!r} needs the shared_prefix keyword (recipe.generator.generate passes it)")
    changed = [name for name in ("sliding_window", "softcap", "s_aux") if kwargs.get(name) is not None]
    if changed:  # supports_shared_prefix keeps such models off this path; never compute a different function
        raise ValueError(f"attention {NAME!r} computes full causal attention; this model's layer {module.layer_idx} "
                         f"also uses {changed}")
    if cache.packed is not None:  # the trainer's response tokens, packed into one row (pack_responses)
        query, key, value = cache._unpack(query), cache._unpack(key), cache._unpack(value)
    layer = module.layer_idx
    if query.shape[2] == 1:  # a decode step: this token's keys and values join the row's response so far
        response_keys, response_values = cache.append(layer, key, value)
        out = two_part_attention(cache, layer, query, response_keys, response_values, scaling)
    else:  # the trainer's whole response (the cache is only read: a recompute may run this again)
        out = response_attention(cache, layer, query, key, value, scaling)
    if cache.packed is not None:
        return cache._pack(out.transpose(1, 2)), None
    return out.transpose(1, 2).contiguous(), None


def response_attention(cache: SharedPrefixCache, layer: int, query, key, value, scaling: float) -> torch.Tensor:
    """All T response queries of each row (the trainer), in blocks of TRAINING_QUERY_BLOCK.

    Block [s, e) attends over the prompt and response keys [0, e) with the decode step's own arithmetic
    (two_part_attention), so the trainer's logprobs are the generator's to round-off in any dtype: with
    torch's fused attention (scaled_dot_product_attention) instead, a bf16 body's behaviour logprobs
    differed from the trainer's by 0.003 on average and 0.09 at most on the testbed, against 1e-8 here.
    With more than one block and gradients on, each block is checkpointed: the backward recomputes
    its scores instead of keeping them, so what stays for the backward is linear in T.
    """
    T = query.shape[2]
    block = TRAINING_QUERY_BLOCK if TRAINING_QUERY_BLOCK > 0 else T
    if T <= block:
        return two_part_attention(cache, layer, query, key, value, scaling)
    recompute = torch.is_grad_enabled() and query.requires_grad
    outs = []
    for start in range(0, T, block):
        end = min(T, start + block)
        args = (cache, layer, query[:, :, start:end], key[:, :, :end], value[:, :, :end], scaling)
        outs.append(checkpoint(two_part_attention, *args, use_reentrant=False) if recompute
                    else two_part_attention(*args))
    return torch.cat(outs, dim=2)


def two_part_attention(cache: SharedPrefixCache, layer: int, query, response_keys, response_values,
                       scaling: float) -> torch.Tensor:
    """Queries (A, H, Q, D), the newest Q of a row's response, over its prompt and its response keys
    (A, H_kv, T, D) up to the last query: the softmax of the module docstring. Returns (A, H, Q, D)."""
    A, H, Q, D = query.shape
    heads_kv = response_keys.shape[1]
    query = query * scaling  # scaled once for both parts
    prompt_scores = cache.grouped(query, heads_kv) @ cache.prompt_keys[layer].transpose(-1, -2)
    prompt_scores = cache.ungrouped(prompt_scores, H, Q) + cache.row_bias  # (A, H, Q, P)
    T = response_keys.shape[2]
    # Query head h reads key head h // (H / H_kv): the H / H_kv query heads of a key head are laid out as
    # its rows ((A, H_kv, (H / H_kv) x Q, D), a view), so the keys are read as they are, never repeated.
    response_scores = (query.reshape(A, heads_kv, -1, D) @ response_keys.transpose(-1, -2)).view(A, H, Q, T)
    if Q > 1:  # query i is response token T - Q + i: it sees response keys up to itself
        future = torch.ones(Q, T, dtype=torch.bool, device=query.device).triu(T - Q + 1)
        response_scores = response_scores.masked_fill(future, float("-inf"))
    elif cache.response_future is not None:  # static decoding: the view's positions after this step
        response_scores = response_scores.masked_fill(cache.response_future, float("-inf"))
    weights = torch.softmax(torch.cat([prompt_scores, response_scores], dim=-1).float(), dim=-1).to(query.dtype)
    P = prompt_scores.shape[-1]
    out = cache.ungrouped(cache.grouped(weights[..., :P], heads_kv) @ cache.prompt_values[layer], H, Q)
    response_out = weights[..., P:].reshape(A, heads_kv, -1, T) @ response_values
    return out + response_out.view(A, H, Q, D)  # (A, H, Q, D)


def supports_shared_prefix(model) -> bool:
    """Whether this attention computes what the model's own does: full causal attention through
    transformers' AttentionInterface (Llama, Qwen2/3, Mistral without a window, ...). Sliding windows,
    logit soft-capping and attention sinks change the function, so those models keep their own
    attention (and per-row caches)."""
    if not (getattr(model, "_supports_attention_backend", False) and hasattr(model, "set_attn_implementation")):
        return False
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    layer_types = getattr(config, "layer_types", None) or ["full_attention"]
    windowed = getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True)
    return (all(kind == "full_attention" for kind in layer_types) and not windowed
            and getattr(config, "attn_logit_softcapping", None) is None)


def shared_prefix_attention_on(model):
    """Run the model with this attention function, then give it back its own implementation.

    Switching costs ~0.1 ms (measured on the testbed), so it is done around each forward call: the
    prefill and every other caller keep the model's own attention.
    """
    return attention_implementation(model, NAME)


@contextlib.contextmanager
def attention_implementation(model, name: str):
    """Run the model with attention implementation `name` (no switch when it already has it)."""
    own = model.config._attn_implementation
    if own != name:
        register()
        model.set_attn_implementation(name)
    try:
        yield
    finally:
        if own != name:
            model.set_attn_implementation(own)


def register() -> None:
    """Make NAME an attention implementation transformers knows (idempotent: a dict entry).

    Called where a model switches to it, not when this module is imported: a process that imports the recipe
    without building a model (a PipelineRL job's supervisor, the sweep driver) then does not import transformers,
    seconds of start-up each time (7 of `import recipe.engines.pipeline`'s ~8 s on a slow hour of the 2-core host)."""
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, shared_prefix_attention)
