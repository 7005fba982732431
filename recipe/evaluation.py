"""Held-out evaluation: pass rate mean@k (temperature sampling) and greedy pass@1 on the validation split.

mean@k = (1/(P k)) sum_p sum_j 1[sample j of prompt p is correct], the paper's curve (mean@16 on
1,000 prompts there). Sampling uses random streams derived from (seed, step) only, so evaluating
never perturbs the training streams and a resumed run evaluates exactly as an uninterrupted one.
Length control acts as in training (interruption is part of how the model answers); rewards are
the checker's verdict alone, never length-shaped.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from recipe.generator import Rollout, decode_responses, generate


def score(task, tokenizer, rollout: Rollout, answers: list[str]) -> torch.Tensor:
    """(B,) bool: the checker accepts the answer and the sample was not cut by a length limit."""
    texts = decode_responses(tokenizer, rollout)
    correct = torch.tensor([task.check(text, answer) for text, answer in zip(texts, answers)])
    return correct & ~rollout.truncated.cpu()


def evaluate(model, tokenizer, task, *, precision, length_control, eval_cfg, max_new_tokens: int,
             temperature: float, seed: int, step: int, batch_size: int) -> dict[str, float]:
    """Eval metrics at `step` (eval/pass_rate, eval/greedy_pass_rate, lengths, truncation...)."""
    started = time.perf_counter()
    problems = task.validation[: eval_cfg.num_prompts]
    device = next(model.parameters()).device
    torch_rng = torch.Generator(device=device).manual_seed(seed * 1_000_003 + step)
    numpy_rng = np.random.default_rng([seed, step, 7])
    k = eval_cfg.samples_per_prompt
    prompts = [p.prompt for p in problems for _ in range(k)]
    answers = [p.answer for p in problems for _ in range(k)]
    corrects, lengths, truncated, interrupted = [], [], [], []
    for start in range(0, len(prompts), batch_size):
        rollout = generate(model, tokenizer, prompts[start:start + batch_size], precision=precision,
                           length_control=length_control, max_new_tokens=max_new_tokens, temperature=temperature,
                           torch_rng=torch_rng, numpy_rng=numpy_rng)
        corrects.append(score(task, tokenizer, rollout, answers[start:start + batch_size]))
        lengths.append(rollout.lengths.cpu().float())
        truncated.append(rollout.truncated.cpu().float())
        interrupted.append(rollout.interrupted.cpu().float())
    metrics = {
        "eval/pass_rate": float(torch.cat(corrects).float().mean()),
        "eval/len_mean": float(torch.cat(lengths).mean()),
        "eval/truncated_frac": float(torch.cat(truncated).mean()),
        "eval/interrupted_frac": float(torch.cat(interrupted).mean()),
    }
    if eval_cfg.greedy:
        greedy = []
        for start in range(0, len(problems), batch_size):
            chunk = problems[start:start + batch_size]
            rollout = generate(model, tokenizer, [p.prompt for p in chunk], precision=precision,
                               length_control=length_control, max_new_tokens=max_new_tokens, greedy=True,
                               numpy_rng=numpy_rng)
            greedy.append(score(task, tokenizer, rollout, [p.answer for p in chunk]))
        metrics["eval/greedy_pass_rate"] = float(torch.cat(greedy).float().mean())
    metrics["eval/seconds"] = time.perf_counter() - started
    return metrics
