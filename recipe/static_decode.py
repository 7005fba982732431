"""Decoding with the host out of the loop: each decode step at static shapes, replayed as a CUDA graph.

The eager loop of recipe/generator.py launches every kernel of a step from Python: on an H200 a
Qwen3-1.7B step of 64 rows took 62 ms, a few of them GPU work (BENCHMARKS "On one GPU"). Here one
step is the same arithmetic written so that nothing in it depends on a value the host must read:

    sample(t):  logits = head(hidden); token, logp = pick_tokens(logits, uniforms[:, t]);
                RowState.force / advance; the token, its logprob, mask and policy version written at t
    feed(t):    the body on the token (its keys and values written at response position t, attention
                over the first C positions with those after t masked); hidden <- its output; t <- t + 1

with t a (1,) tensor on the device. feed(t) + sample(t + 1) is captured once as a CUDA graph per view
length C (a few length buckets: 64, 128, 256, ... and the token limit; the smallest with C > t serves
step t, so the attention reads about what it needs) and replayed token after token; the host only launches replays
and asks every CHECK_EVERY steps whether all rows have finished (the one synchronisation).

What changes against the eager loop: finished rows stay in the batch (on a GPU a decode step of 64 rows
costs about what one of 8 does, and dropping rows would change the shapes a graph was captured with);
the attention's softmax runs over C positions of which those after t weigh exactly 0 (zero-filled
buffers), so the samples are the eager loop's to round-off, and a step replayed from its graph is the
same kernels as the step run without one. On CPU the same static steps run without graphs (the tests
hold them to the eager loop); `generate(static_decode=None)` uses them on CUDA only.

In-flight weight updates (PipelineRL) are served as in the eager loop: `on_decode_step` runs before each
replay (after a step's sample, before its feed) and may load new weights in place (a graph reads the
parameters' memory, so it sees them); the version it returns is written for the tokens the new weights'
forward pass produces.

A bf16 body decodes with a copy of its Linear weights in bf16 (compute_dtype_copy), refreshed once per call
and per in-flight update, instead of autocast casting every fp32 weight at every token.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import weakref
from typing import Callable

import torch

from recipe.model import lm_parts
from recipe.sampling import pick_tokens

# Steps run without a graph before capturing: lazy initialisations (cuBLAS workspaces, the key/value
# buffers allocated at their first step) happen outside the capture.
WARMUP_STEPS = 2
# Steps between two checks of whether every row has finished (each check waits for the device).
CHECK_EVERY = 16
# The smallest view length; views double from it up to the token limit.
FIRST_VIEW = 64
# Replay the steps as CUDA graphs on a GPU (False: the same static steps launched one by one, to compare).
CUDA_GRAPHS = True
# Compile each round's body step (feed) with torch.compile before capturing it: its elementwise work (norms,
# rotary embedding, casts, the attention's masking) fused into a few kernels a layer instead of ~100.
COMPILE = False


def compute_dtype_copy(model):
    """(decoder, refresh): the model with its body's Linear weights held in the compute dtype, and the function
    that copies the fp32 master weights into them.

    Under autocast a bf16 step casts every fp32 Linear weight at every token: at 64 rows that is most of a
    decode step's memory traffic (read 4 bytes and write 2 per weight, then read the 2 again). The copy casts
    them once per call (and once per in-flight weight update), with the same rounding autocast applies, so
    the arithmetic is the same; every other tensor (embeddings, norms, the head) is the model's own, shared.
    Costs 2 bytes per Linear weight of device memory (the native engine's trainer and generator share one
    fp32 model); cached per model. (None, None) for an fp32 body, and for a model whose Linear weights are
    in the compute dtype already (the PipelineRL generator's: recipe.engines.pipeline_channel.hold_in_publish_dtypes).
    """
    parts = lm_parts(model)
    linears = [m for m in parts.body.modules() if isinstance(m, torch.nn.Linear)]
    if parts.compute_dtype == torch.float32 or all(m.weight.dtype == parts.compute_dtype for m in linears):
        return None, None
    cached = _COPIES.get(model)
    if cached is None:
        memo = {id(p): p for p in model.parameters()}  # shared: everything but the Linear weights
        memo.update({id(m.weight): torch.nn.Parameter(m.weight.detach().to(parts.compute_dtype), requires_grad=False)
                     for m in linears})
        decoder = copy.deepcopy(model, memo)
        pairs = [(m.weight, memo[id(m.weight)]) for m in linears]

        @torch.no_grad()
        def refresh() -> None:
            for master, held in pairs:
                held.copy_(master)

        cached = _COPIES[model] = (decoder, refresh)
    return cached


_COPIES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def view_lengths(limit: int) -> list[int]:
    """The view lengths graphs are captured for: FIRST_VIEW, doubling, capped by the token limit."""
    lengths, length = [], FIRST_VIEW
    while length < limit:
        lengths.append(length)
        length *= 2
    return lengths + [limit]


class StaticDecode:
    """One decode group (a DecodeBatch with shared-prefix attention, its RowState) stepped at static shapes.

    Holds each step's results by step, (limit, b): emitted tokens, behaviour logprobs, loss mask, policy
    versions; `run` fills them and returns the steps the group needed (the eager loop's response width).
    """

    def __init__(self, batch, rows, *, precision, temperature: float, greedy, uniforms: torch.Tensor, limit: int,
                 version: int, pad: int) -> None:
        """batch: recipe.generator.DecodeBatch after its prefill (shared_prefix not None); rows: its RowState;
        greedy: a bool or a (b,) bool tensor; uniforms (b, limit): each row's draw at each step."""
        if batch.shared_prefix is None:
            raise ValueError("static decoding needs the shared-prefix attention (recipe.prefix_attention)")
        self.batch, self.rows, self.precision = batch, rows, precision
        self.prompt_width = batch.width  # P: nothing is fed yet
        self.temperature, self.greedy, self.uniforms, self.limit = temperature, greedy, uniforms, limit
        device = uniforms.device
        b = rows.finished.shape[0]
        self.step = torch.zeros(1, dtype=torch.long, device=device)
        batch.shared_prefix.make_static(self.step)
        self.hidden = batch.hidden.clone()  # (b, D): the body's output the next sample reads
        self.token = torch.full((b,), pad, dtype=torch.long, device=device)
        # The last k emitted tokens (k = len(</think>)), oldest first; -1 before the first steps: never </think>.
        self.recent = torch.full((rows.close.shape[0], b), -1, dtype=torch.long, device=device)
        self.emitted = torch.full((limit, b), pad, dtype=torch.long, device=device)
        self.logprobs = torch.zeros(limit, b, dtype=torch.float32, device=device)
        self.loss_mask = torch.zeros(limit, b, dtype=torch.bool, device=device)
        self.versions = torch.full((limit, b), version, dtype=torch.long, device=device)
        self.version = torch.tensor([version], device=device)  # of the weights that computed `hidden`
        self.loaded_version = torch.tensor([version], device=device)  # of the weights loaded now
        self.loaded = version  # the same, on the host: on_decode_step's new versions are compared with it
        self.views = view_lengths(limit)
        # Each view's first step: the step after the previous view's last (views serve consecutive steps).
        self.view_starts = dict(zip(self.views, [0, *self.views[:-1]]))
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}

    def sample(self) -> None:
        """Step t's token for every row, from `hidden`; written at t. No value goes to the host."""
        parts, t = self.batch.parts, self.step
        logits = self.precision.head_logits(self.hidden, parts.head.weight, parts.head.bias)  # (b, V)
        uniform = self.uniforms.index_select(1, t).squeeze(1)
        token, logp = pick_tokens(logits, self.temperature, self.greedy, uniform)
        token, sampled = self.rows.force(token)
        self.emitted.index_copy_(0, t, token[None])
        self.loss_mask.index_copy_(0, t, sampled[None])
        self.logprobs.index_copy_(0, t, logp.where(sampled, 0.0)[None])
        self.versions.index_copy_(0, t, self.version.expand(1, len(token)))
        self.recent.copy_(torch.cat([self.recent[1:], token[None]]))
        self.rows.advance(token, sampled, self.recent)
        self.token.copy_(token)

    def feed(self, view_length: int) -> None:
        """Step t's tokens through the body (keys and values at position t, view_length positions read)."""
        self.batch.shared_prefix.set_view(view_length)
        self.hidden.copy_(self.batch.step(self.token))
        self.version.copy_(self.loaded_version)
        self.step += 1

    def feed_and_sample(self, view_length: int, compiled: bool = True) -> None:
        """One round: step t's tokens fed, step t + 1 sampled (what a graph holds); compiled if COMPILE."""
        if COMPILE and compiled:
            compiled_feed()(self, view_length)
        else:
            self.feed(view_length)
        self.sample()

    def view_for(self, t: int) -> int:
        """The smallest view that holds step t's key (t + 1 positions)."""
        return next(length for length in self.views if length > t)

    def capture(self, view_length: int) -> torch.cuda.CUDAGraph:
        """feed + sample at this view length as a CUDA graph (recorded, not run)."""
        graph = torch.cuda.CUDAGraph()
        # thread_local: another thread of the process (a PipelineRL role's) may use CUDA meanwhile.
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            self.feed_and_sample(view_length)
        return graph

    def run(self, on_decode_step: Callable[[int, int], int] | None = None) -> int:
        """Decode until every row finished or the token limit; returns the steps needed (the longest row).

        Step 0 samples from the prefill; then each round feeds step t's tokens and samples step t + 1 (one
        graph): `on_decode_step` runs between a step's sample and its feed, as in the eager loop, so new
        weights never reach the head of a step already sampled. A view's graph is captured after the first
        WARMUP_STEPS rounds it serves have run without one (their lazy allocations, and with COMPILE their
        compilation, happen outside the capture), so only the views a call reaches are captured.
        """
        with fast_unique_index_writes():
            return self._run(on_decode_step)

    def _run(self, on_decode_step: Callable[[int, int], int] | None) -> int:
        graphs = CUDA_GRAPHS and self.step.device.type == "cuda"
        rows, prompt_width = self.token.shape[0], self.prompt_width
        self.sample()
        for t in range(self.limit - 1):
            if on_decode_step is not None:  # new weights apply from this feed on (every row fed: static shapes)
                version = on_decode_step(rows, rows * (prompt_width + t + 1))
                if version != self.loaded:
                    self.loaded_version.fill_(version)
                    self.loaded = version
            view = self.view_for(t)
            if graphs and view not in self.graphs and t - self.view_starts[view] >= WARMUP_STEPS:
                self.graphs[view] = self.capture(view)
            if view in self.graphs:
                self.graphs[view].replay()
            else:  # the first round allocates the key/value buffers: not compiled (it would compile twice)
                self.feed_and_sample(view, compiled=t > 0)
            if (t + 2) % CHECK_EVERY == 0 and bool(self.rows.finished.all()):
                break
        steps = int(self.rows.lengths.max())
        # After the steps a group needed its rows emit <pad>; their versions are the last step's, as eager.
        self.versions[steps:] = self.versions[steps - 1]
        return steps


@contextlib.contextmanager
def fast_unique_index_writes():
    """torch's deterministic algorithms off while the static steps run, back as they were after.

    Under torch.use_deterministic_algorithms (recipe.run.configure_cuda) index_copy_ becomes a sorted index_put_
    (a radix sort, bounds asserts and copies per write, ~20 kernels where one does): every write of a step
    (a token, a logprob, a layer's key and value at position t) has one index, so no two writes land on one
    element and the plain kernel gives the same result; every other op of a step is deterministic either way
    (cuBLAS under the fixed workspace, reductions, the sampling's cumulative sum).
    """
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(False)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


@functools.cache
def compiled_feed():
    """StaticDecode.feed (the body's step) through torch.compile, called as compiled_feed()(decode, view_length):
    one compilation per view length (a view is a shape), each during its view's first rounds, before the
    capture (StaticDecode.run)."""
    return torch.compile(StaticDecode.feed, dynamic=False)
