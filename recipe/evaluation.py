"""Held-out evaluation: pass rate mean@k (temperature sampling) and greedy pass@1 on the validation split.

mean@k = (1/(P k)) sum_p sum_j 1[sample j of prompt p is correct], the paper's curve (mean@16 on
1,000 prompts there). Sampling uses random streams derived from `seed` (eval.seed: one stream
for every run by default) and, with eval.draws "per_point", the step: every run of a sweep is
scored on the same draws at the same step (evaluation_streams). Evaluating never perturbs the
training streams, and a resumed run evaluates exactly as an uninterrupted one.
Length control acts as in training (interruption is part of how the model answers); rewards are
the checker's verdict alone, never length-shaped.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from recipe.generator import Rollout, decode_responses
from recipe.run_config import EVAL_DRAWS


def evaluation_steps(every_steps: int, points_per_doubling: int, max_steps: int,
                     min_gap_steps: int = 1) -> frozenset[int]:
    """The steps at which a run evaluates: 0, then s_{i+1} = s_i + clip(floor(s_i (2^(1/n) - 1)), g, every_steps)
    with g = min_gap_steps.

    With n = points_per_doubling the points are spaced evenly in log steps (n per doubling) until
    the gap reaches every_steps, then every every_steps steps: e.g. n 3, every 20: 0 1 2 ... 8 10 12
    15 18 22 27 34 42 52 65 81 101 121 ... (23 points by step 150). The smallest gap g thins the first
    steps, where log spacing would evaluate every step: n 2, g 5, every 40: 0 5 10 15 21 29 41 57 80 113
    153 193 ... n = 0: every every_steps steps. max_steps is always an evaluation point (the run's end).
    """
    if points_per_doubling == 0:
        return frozenset([*range(0, max_steps + 1, every_steps), max_steps])
    growth = 2 ** (1 / points_per_doubling) - 1
    steps, step = [0], 0
    while step < max_steps:
        step += max(min_gap_steps, min(every_steps, math.floor(step * growth)))
        steps.append(min(step, max_steps))
    return frozenset(steps)


def compute_of(metrics: dict, step: int, unit: str) -> float:
    """The run's compute so far in `unit` (eval.compute_unit): its meter's metrics at `step`."""
    from recipe.compute import COMPUTE_AXES

    return float(step) if unit == "steps" else float(metrics.get(COMPUTE_AXES[unit], 0.0))


def evaluation_due(eval_cfg, step: int, scheduled: frozenset[int], compute: float, last_compute: float | None) -> bool:
    """Whether a run evaluates after `step`: a scheduled step (evaluation_steps) while compute < schedule_until
    (0: always) and the run's last step whatever the compute, or the first step whose compute reaches one of
    at_compute (last_compute: the compute of the run's last evaluation, None before the first)."""
    if step in scheduled and (eval_cfg.schedule_until <= 0 or compute < eval_cfg.schedule_until
                              or step == max(scheduled)):
        return True
    return any(compute >= point and (last_compute is None or last_compute < point) for point in eval_cfg.at_compute)


def samples_per_prompt(eval_cfg, compute: float) -> int:
    """Sampled answers a prompt at an evaluation made at `compute`: late_samples_per_prompt from late_from on,
    else samples_per_prompt."""
    late = eval_cfg.late_from > 0 and eval_cfg.late_samples_per_prompt > 0 and compute >= eval_cfg.late_from
    return eval_cfg.late_samples_per_prompt if late else eval_cfg.samples_per_prompt


def sampling_standard_error(per_prompt, k: int) -> float:
    """Standard error of mean@k over a fixed prompt set from its sampling alone: how far the same policy's
    pass rate moves if the evaluation drew other samples.

        se = sqrt(sum_i q_i (1 - q_i) / (k - 1)) / N

    q_i: prompt i's share of k correct samples (q_i (1 - q_i) / (k - 1) is the unbiased estimate of
    var(q_i)); N prompts. NaN for k = 1. Measured on the testbed: 128 prompts x 4 samples give ~0.012-0.02
    per evaluation, as large as the 0.02 margin a prediction is scored at (BENCHMARKS.md).
    """
    if k < 2:
        return math.nan
    q = per_prompt.double()
    return float((q * (1 - q) / (k - 1)).sum().sqrt() / q.numel())


def evaluation_streams(seed: int, draws: str, step: int, device) -> tuple[torch.Generator, np.random.Generator]:
    """The (torch, numpy) random streams of the evaluation at `step`: sampling uniforms, thinking budgets.

    draws "common": the same streams at every step (common random numbers). Consecutive points then
    differ by what the policy learned, not by fresh draws, but a point's sampling error does not
    average out along the curve: the same uniforms meet a slowly changing policy, so the error
    drifts with it and a fit follows the drift. "per_point": streams keyed by (seed, step), fresh
    at every point and the same for every run at that step (still paired across a sweep's recipes).
    """
    if draws == "common":
        return torch.Generator(device=device).manual_seed(seed * 1_000_003), np.random.default_rng([seed, 7])
    if draws != "per_point":
        raise ValueError(f"eval.draws: got {draws!r}, expected one of {', '.join(EVAL_DRAWS)}")
    torch_seed = int(np.random.SeedSequence([seed, 7, step]).generate_state(1, np.uint64)[0] >> 1)
    return torch.Generator(device=device).manual_seed(torch_seed), np.random.default_rng([seed, 7, step])


def score(task, tokenizer, rollout: Rollout, answers: list[str]) -> torch.Tensor:
    """(B,) bool: the checker accepts the answer and the sample was not cut by a length limit."""
    texts = decode_responses(tokenizer, rollout)
    correct = torch.tensor([task.check(text, answer) for text, answer in zip(texts, answers)])
    return correct & ~rollout.truncated.cpu()


def evaluate(generator, task, *, precision, length_control, eval_cfg, max_new_tokens: int,
             temperature: float, seed: int, step: int = 0, policy_version: int = 0,
             compute: float = 0.0) -> dict[str, float]:
    """Eval metrics of the generator's model as it is now, weights of `policy_version` (eval/pass_rate,
    eval/greedy_pass_rate, lengths, truncation...); `generator` is the rollout's (recipe.generator.TorchGenerator
    or recipe.vllm_generator.VllmGenerator), so the curve is measured with what samples the training data.
    compute: the run's compute now (eval.compute_unit), which sizes the evaluation (samples_per_prompt).

    The num_prompts x samples_per_prompt sampled answers and the num_prompts greedy ones are
    generated together, eval_cfg.batch_size rows per generate call (the per-token work of a decode
    step is shared by the whole batch, so fewer, larger calls cost less on a small model).
    """
    started = time.perf_counter()
    problems = task.validation[: eval_cfg.num_prompts]
    tokenizer, device = generator.tokenizer, generator.device
    torch_rng, numpy_rng = evaluation_streams(seed, eval_cfg.draws, step, device)
    k = samples_per_prompt(eval_cfg, compute)
    prompts = [p.prompt for p in problems for _ in range(k)]
    answers = [p.answer for p in problems for _ in range(k)]
    sampled = len(prompts)
    if eval_cfg.greedy:  # greedy pass@1 rides in the same batches: fewer, larger generate calls
        prompts += [p.prompt for p in problems]
        answers += [p.answer for p in problems]
    greedy_rows = torch.arange(len(prompts)) >= sampled
    size = eval_cfg.batch_size
    corrects, lengths, truncated, interrupted = [], [], [], []
    for start in range(0, len(prompts), size):
        rows = slice(start, start + size)
        rollout = generator.generate(prompts[rows], precision=precision, length_control=length_control,
                                     max_new_tokens=max_new_tokens, temperature=temperature, greedy=greedy_rows[rows],
                                     torch_rng=torch_rng, numpy_rng=numpy_rng, policy_version=policy_version,
                                     decode_token_budget=eval_cfg.decode_token_budget)
        corrects.append(score(task, tokenizer, rollout, answers[rows]))
        lengths.append(rollout.lengths.cpu().float())
        truncated.append(rollout.truncated.cpu().float())
        interrupted.append(rollout.interrupted.cpu().float())
    correct = torch.cat(corrects)
    sampled_correct = correct[:sampled].float()
    per_prompt = sampled_correct.view(len(problems), k).mean(dim=1)  # q_i: prompt i's share correct
    metrics = {
        "eval/pass_rate": float(sampled_correct.mean()),
        "eval/pass_rate_se": sampling_standard_error(per_prompt, k),
        "eval/samples_per_prompt": float(k),
        "eval/len_mean": float(torch.cat(lengths)[:sampled].mean()),
        "eval/truncated_frac": float(torch.cat(truncated)[:sampled].mean()),
        "eval/interrupted_frac": float(torch.cat(interrupted)[:sampled].mean()),
    }
    if eval_cfg.greedy:
        metrics["eval/greedy_pass_rate"] = float(correct[sampled:].float().mean())
    metrics["eval/seconds"] = time.perf_counter() - started
    return metrics
