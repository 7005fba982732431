"""TRL's reward function and forced interruption on TRL's own generation path (its rollout_func).

RecipeRewards scores as recipe.run.sample_groups does (the task's checker, +1 / -1, a sample cut without
<eos> wrong, then length control's shaping); interrupting_rollout samples in two phases so that each row is
the native generator's sample in distribution (recipe/generator.py's interruption rule).
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import torch

from recipe.engines.trl_vllm import vllm_interrupting_rollout
from recipe.tasks import THINK_CLOSE


class RecipeRewards:
    """TRL's reward function: the task's checker, +1 / -1, then length control's shaping; keeps the last batch."""

    __name__ = "recipe_reward"  # TRL names reward functions by __name__ in its logs

    def __init__(self, task, tokenizer, length_control) -> None:
        self.task, self.length_control = task, length_control
        self.eos = tokenizer.eos_token_id
        self.last: dict[str, torch.Tensor] = {}

    def __call__(self, prompts, completions, completion_ids, answer, interrupted=None, part=None, **_) -> list[float]:
        """interrupted: per sample, whether the interruption phrase was forced in (interrupting_rollout's field);
        part: each sample's mixture part (None outside a mixture)."""
        lengths = torch.tensor([len(ids) for ids in completion_ids])  # forced phrase tokens included, as native
        ended = torch.tensor([len(ids) > 0 and ids[-1] == self.eos for ids in completion_ids])
        parts = part if part is not None else [None] * len(completions)
        correct = torch.tensor(self.task.check_all(list(completions), list(answer), list(parts)),
                               dtype=torch.bool) & ended
        rewards = self.length_control.shape_rewards(torch.where(correct, 1.0, -1.0), lengths, correct)
        interrupted = torch.tensor([bool(flag) for flag in interrupted]) if interrupted is not None \
            else torch.zeros(len(lengths), dtype=torch.bool)
        self.last = {"rewards": rewards, "correct": correct, "lengths": lengths, "ended": ended,
                     "interrupted": interrupted}
        return rewards.tolist()


def interruption_point(ids: list[int], budget: int, close: list[int], eos: set[int]) -> int | None:
    """How many tokens of a freely sampled response stay before the interruption phrase, or None.

    The native generator's rule (recipe/generator.py): a sample that has sampled `budget` tokens without
    ending (<eos>) or closing `</think>` is interrupted there. Sampling is prefix-consistent, so sampling
    past the budget and cutting at it draws from the same distribution as stopping at it.
    """
    width = len(close)
    for index, token in enumerate(ids[:budget]):
        if token in eos or (index + 1 >= width and ids[index + 1 - width: index + 1] == close):
            return None
    return budget if len(ids) >= budget else None


@contextmanager
def completion_budget(trainer, tokens: int):
    """TRL's generation (transformers' generation config, or the vLLM helper) limited to `tokens` new tokens."""
    config, vllm = trainer.generation_config, getattr(trainer, "vllm_generation", None)
    saved = config.max_new_tokens, (vllm.max_completion_length if vllm is not None else None)
    config.max_new_tokens = tokens
    if vllm is not None:
        vllm.max_completion_length = tokens
    try:
        yield
    finally:
        config.max_new_tokens = saved[0]
        if vllm is not None:
            vllm.max_completion_length = saved[1]


def continuations(trainer, token_lists: list[list[int]], tokens: int, filler: list[int]):
    """TRL's generation of up to `tokens` more tokens after each token list (one sample each).

    Every process must make the same generation calls (vLLM server mode gathers prompts across processes,
    a sharded model gathers its parameters): each pads its list with `filler` to the longest, and nobody
    calls when no process has anything to continue. The padding's samples are dropped.
    """
    count = len(token_lists)
    most = count
    if trainer.accelerator.num_processes > 1:
        counts = trainer.accelerator.gather(torch.tensor([count], device=trainer.accelerator.device))
        most = int(counts.max())
    if most == 0:
        return [], None
    with completion_budget(trainer, tokens):
        ids, logprobs = trainer._generate_single_turn(token_lists + [filler] * (most - count), None, {}, 1)
    return ids[:count], (None if logprobs is None else logprobs[:count])


def interrupting_rollout(prompts: list, trainer) -> dict:
    """Forced interruption on TRL's own generation path (transformers or vLLM): TRL's rollout_func extension.

    Phase 1 samples every row up to `max_thinking` tokens; a row that thought for its budget (drawn per
    sample by the length control) without ending or closing `</think>` is cut there (interruption_point)
    and gets the phrase (loss mask 0: TRL's env_mask; logprob 0), then phase 2 lets it answer for at most
    `answer_budget` tokens. A row that closed its thinking and is still going at the end of phase 1
    continues in the same phase-2 call up to the native limit, max(rollout.max_new_tokens, max_thinking +
    phrase + answer_budget). Each row is then the native generator's sample, in distribution.
    """
    if trainer.use_vllm and trainer.vllm_mode == "colocate":
        return vllm_interrupting_rollout(prompts, trainer)
    length_control = trainer.recipe_components.length_control
    tokenizer = trainer.processing_class
    eos = set(trainer.eos_token_ids)
    phrase = tokenizer.encode(length_control.interruption_phrase, add_special_tokens=False)
    close = tokenizer.encode(THINK_CLOSE, add_special_tokens=False)
    thinking = length_control.max_thinking
    limit = max(trainer.args.max_completion_length, thinking + len(phrase) + length_control.answer_budget)
    prompt_ids, _, _ = trainer._tokenize_prompts(prompts)
    with completion_budget(trainer, thinking):
        first, first_logprobs = trainer._generate_single_turn(prompt_ids, None, {}, trainer.num_generations)
    rng = np.random.default_rng([trainer.args.seed, trainer.state.global_step, trainer.accelerator.process_index])
    budgets = length_control.thinking_budgets(len(prompt_ids), rng)
    rows = []  # (completion so far, loss mask, logprobs, interrupted, tokens it may still add or 0)
    for index, (ids, budget) in enumerate(zip(first, budgets)):
        logprobs = list(first_logprobs[index]) if first_logprobs is not None else None
        cut = interruption_point(ids, int(budget), close, eos)
        if cut is None:
            ended = len(ids) > 0 and ids[-1] in eos
            more = 0 if ended or len(ids) < thinking else limit - len(ids)
            rows.append((list(ids), [1] * len(ids), logprobs, False, more))
        else:
            logprobs = None if logprobs is None else logprobs[:cut] + [0.0] * len(phrase)
            rows.append((list(ids[:cut]) + phrase, [1] * cut + [0] * len(phrase), logprobs, True,
                         length_control.answer_budget))
    going = [index for index, row in enumerate(rows) if row[4] > 0]
    more_ids, more_logprobs = continuations(trainer, [prompt_ids[i] + rows[i][0] for i in going],
                                            limit - thinking, prompt_ids[0])
    for position, index in enumerate(going):
        completion, mask, logprobs, interrupted, more = rows[index]
        added = list(more_ids[position][:more])
        completion, mask = completion + added, mask + [1] * len(added)
        if logprobs is not None and more_logprobs is not None:
            logprobs = logprobs + list(more_logprobs[position][:more])
        rows[index] = (completion, mask, logprobs, interrupted, 0)
    logprobs = None if first_logprobs is None else [row[2] for row in rows]
    return {"prompt_ids": prompt_ids, "completion_ids": [row[0] for row in rows], "logprobs": logprobs,
            "env_mask": [row[1] for row in rows], "interrupted": [row[3] for row in rows]}

