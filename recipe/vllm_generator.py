"""A vLLM generation backend with the TorchGenerator interface (the `vllm` extra; CUDA only).

NOT VERIFIED: no machine this project was built on had vllm and a GPU together (the CPU wheel of
torch cannot host vllm). The code follows vLLM's documented offline API (v0.10-v0.12: `LLM`,
`SamplingParams`, `TokensPrompt`, the RLHF examples' in-place `load_weights`); the generator contract
suite (tests/recipe/test_generator_contract.py) runs it wherever vllm and a GPU exist. The training
loop does not use it yet: it samples with TorchGenerator's `generate`.

    engine = VllmGenerator("path/to/hf_model_dir", dtype="bfloat16")
    rollout = engine.generate(prompts, precision=..., length_control=..., max_new_tokens=..., seed=0)
    engine.update_weights(model.named_parameters(), version=step)   # in place, engine keeps running

How the interface maps onto vLLM:
- Behaviour logprobs: `SamplingParams(logprobs=0)` returns the sampled token's logprob at each
  position; the engine runs with `logprobs_mode="processed_logprobs"`, so they are taken from the
  distribution actually sampled (after temperature), as the trainer recomputes them.
- Interruption is two-phase generation: phase 1 samples at most the thinking budget; a sample still
  inside <think> at its budget gets the phrase appended (forced: loss mask 0, logprob 0) and phase 2
  continues it for at most answer_budget tokens; a sample that closed its thinking continues to
  max_new_tokens. One engine call per phase, all samples batched.
- Weight updates: `load_weights` on the engine's model with Hugging Face parameter names, then the
  prefix cache is reset so no cached key/value of the old weights is reused. Updates land between
  generate() calls (a running vLLM batch is not re-weighted mid-sequence as TorchGenerator can).
- FP32 LM head: vLLM computes logits in the model dtype. With dtype="float32" everything, head
  included, is fp32. With bf16, the head is fp32 only on vLLM versions that honour
  `hf_overrides={"head_dtype": "float32"}` for generation models (added to vLLM in 2026; older
  releases apply head_dtype to pooling models only and ignore it here). The constructor passes the
  override when fp32_head is set; `head_is_fp32` says whether it can be trusted.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from recipe.generator import Rollout
from recipe.tasks import THINK_CLOSE


class VllmGenerator:
    name = "vllm"

    def __init__(self, model_dir: str, *, dtype: str = "bfloat16", fp32_head: bool = True,
                 gpu_memory_utilization: float = 0.3, seed: int = 0) -> None:
        # In-process engine core: the model object is reachable for in-place weight loads.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM

        from recipe.model import load_model_dir

        overrides = {"head_dtype": "float32"} if fp32_head and dtype != "float32" else None
        self.llm = LLM(model=model_dir, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization, seed=seed,
                       enforce_eager=True, enable_prefix_caching=False, logprobs_mode="processed_logprobs",
                       hf_overrides=overrides)
        _, self.tokenizer = load_model_dir(model_dir)  # the trainer's tokenizer: same ids, left padding
        self.head_is_fp32 = dtype == "float32"  # a bf16 head override cannot be checked from outside
        self.version = 0

    def close(self) -> None:
        del self.llm
        torch.cuda.empty_cache()

    def _sample(self, token_ids: list[list[int]], max_tokens: list[int], *, temperature: float, greedy: bool,
                seeds: list[int]) -> list[tuple[list[int], list[float], bool]]:
        """One engine call: per prompt (tokens, logprobs, ended with <eos>)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        eos = self.tokenizer.eos_token_id
        params = [SamplingParams(temperature=0.0 if greedy else temperature, max_tokens=n, seed=s, logprobs=0,
                                 stop_token_ids=[eos], detokenize=False)
                  for n, s in zip(max_tokens, seeds)]
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
                 temperature: float = 1.0, greedy: bool = False, seed: int = 0,
                 policy_version: int | None = None) -> Rollout:
        tokenizer = self.tokenizer
        prompt_ids = [tokenizer(prompt).input_ids for prompt in prompts]
        B = len(prompts)
        budgets = length_control.thinking_budgets(B, np.random.default_rng(seed))
        budgets = [max_new_tokens if budget is None else min(int(budget), max_new_tokens) for budget in
                   (budgets if budgets is not None else [None] * B)]
        close = tokenizer.encode(THINK_CLOSE, add_special_tokens=False)
        phrase = tokenizer.encode(getattr(length_control, "interruption_phrase", ""), add_special_tokens=False)
        answer_budget = getattr(length_control, "answer_budget", None)
        seeds = [seed * 1_000_003 + row for row in range(B)]

        first = self._sample(prompt_ids, budgets, temperature=temperature, greedy=greedy, seeds=seeds)
        responses = [list(tokens) for tokens, _, _ in first]
        logprobs = [list(values) for _, values, _ in first]
        trained = [[True] * len(tokens) for tokens, _, _ in first]
        ended = [done for _, _, done in first]
        interrupted = [False] * B
        follow_rows, follow_limits = [], []
        for row in range(B):
            if ended[row] or len(responses[row]) >= max_new_tokens:
                continue
            closed = any(responses[row][i:i + len(close)] == close for i in range(len(responses[row])))
            if not closed and phrase and answer_budget is not None:  # still thinking at its budget
                interrupted[row] = True
                responses[row] += phrase
                logprobs[row] += [0.0] * len(phrase)
                trained[row] += [False] * len(phrase)
                limit = min(answer_budget, max_new_tokens - len(responses[row]))
            else:
                limit = max_new_tokens - len(responses[row])
            if limit > 0:
                follow_rows.append(row)
                follow_limits.append(limit)
        if follow_rows:
            second = self._sample([prompt_ids[row] + responses[row] for row in follow_rows], follow_limits,
                                  temperature=temperature, greedy=greedy, seeds=[seeds[row] + 1 for row in follow_rows])
            for row, (tokens, values, done) in zip(follow_rows, second):
                responses[row] += tokens
                logprobs[row] += values
                trained[row] += [True] * len(tokens)
                ended[row] = done
        version = self.version if policy_version is None else policy_version
        return assemble_rollout(prompt_ids, responses, logprobs, trained, ended, interrupted, tokenizer.pad_token_id,
                                version)

    @torch.no_grad()
    def update_weights(self, named_tensors, version: int) -> None:
        """Load (Hugging Face name, tensor) pairs into the running engine's model, in place."""
        weights = [(name, tensor.detach()) for name, tensor in named_tensors]

        def load(worker, weights):
            worker.model_runner.model.load_weights(weights=weights)

        self.llm.collective_rpc(load, args=(weights,))
        self.llm.reset_prefix_cache()
        self.version = version


def assemble_rollout(prompt_ids, responses, logprobs, trained, ended, interrupted, pad_id: int,
                     version: int) -> Rollout:
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
    return Rollout(input_ids=input_ids, attention_mask=attention_mask, prompt_width=P, loss_mask=loss_mask,
                   old_logprobs=old_logprobs, lengths=lengths, truncated=~torch.tensor(ended),
                   interrupted=torch.tensor(interrupted), versions=torch.full((B, T), version, dtype=torch.long))
