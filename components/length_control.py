"""Length control: what bounds a response's thinking, at generation time and in the reward.

Every choice answers two questions:
- generation: `thinking_budgets(num_samples, rng)` gives each sample's thinking budget in tokens, or
  None for no interruption; when a sample's thinking reaches its budget without closing `</think>`,
  the generator appends `interruption_phrase` and lets the model answer for `answer_budget` tokens;
- reward: `shape_rewards(rewards, lengths, correct)` returns the rewards the advantages are built
  from (tensors (N,); lengths in generated tokens).
"""

from __future__ import annotations

import numpy as np

from components.registry import Registry, require

# The paper's words (ScaleRL, arXiv 2510.13786, appendix A.10), verbatim: no period before </think>.
INTERRUPTION_PHRASE = "Okay, time is up. Let me stop thinking and formulate a final answer</think>"


class LengthControl:
    """Base of the `length_control` axis: no interruption, rewards unchanged."""

    interruption_phrase: str | None = None
    answer_budget: int | None = None

    def thinking_budgets(self, num_samples: int, rng: np.random.Generator) -> np.ndarray | None:
        return None

    def budget_distribution(self) -> dict[int, float] | None:
        """P(budget = b) for every budget thinking_budgets can draw; None when it draws none."""
        return None

    def shape_rewards(self, rewards, lengths, correct):
        return rewards


LENGTH_CONTROLS: Registry[LengthControl] = Registry("length_control", LengthControl)


@LENGTH_CONTROLS.register("interruption")
class InterruptionLengthControl(LengthControl):
    """budget ~ U{min_thinking, ..., max_thinking}; at the budget append the phrase, answer <= answer_budget.

    Forced interruption (ScaleRL): a sample still thinking at its budget gets "Okay, time is up. Let
    me stop thinking and formulate a final answer</think>" appended and then answers; rewards
    are unchanged. Drawing the budget from a window keeps the model from learning one fixed cut-off.

    Args:
        min_thinking: the smallest thinking budget in tokens, >= 1 (default 12288).
        max_thinking: the largest, >= min_thinking (default 14336; the defaults suit long-reasoning
            models, small tasks set their own).
        answer_budget: the tokens allowed after the phrase, >= 1 (default 2048).
        phrase: the forced text, ending with '</think>' (default INTERRUPTION_PHRASE, the paper's).
    """

    def __init__(self, min_thinking: int = 12288, max_thinking: int = 14336, answer_budget: int = 2048,
                 phrase: str = INTERRUPTION_PHRASE) -> None:
        require(min_thinking >= 1, "min_thinking", min_thinking, ">= 1 token")
        require(max_thinking >= min_thinking, "max_thinking", max_thinking, f">= min_thinking ({min_thinking})")
        require(answer_budget >= 1, "answer_budget", answer_budget, ">= 1 token")
        require(phrase.endswith("</think>"), "phrase", phrase, "text ending with '</think>'")
        self.min_thinking = min_thinking
        self.max_thinking = max_thinking
        self.answer_budget = answer_budget
        self.interruption_phrase = phrase

    def thinking_budgets(self, num_samples: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(self.min_thinking, self.max_thinking, size=num_samples, endpoint=True)

    def budget_distribution(self) -> dict[int, float]:
        """P(budget = b) = 1 / (max_thinking - min_thinking + 1) for b in min_thinking..max_thinking."""
        count = self.max_thinking - self.min_thinking + 1
        return {budget: 1.0 / count for budget in range(self.min_thinking, self.max_thinking + 1)}


@LENGTH_CONTROLS.register("length_penalty")
class LengthPenaltyControl(LengthControl):
    """r_i += depth * clip((max_length - L_i) / cache_length - 1, -1, 0) for correct samples (DAPO overlong
    penalty).

    Generation is only cut at the generator's length limit; a correct answer that used more than
    max_length - cache_length tokens loses reward linearly, down to -depth at max_length. Incorrect
    samples keep their reward.

    Args:
        max_length: the length at which the penalty reaches -depth, >= 1 token (default 20480, DAPO's; set
            it to the generation limit).
        cache_length: the width of the penalty's ramp, in (0, max_length] tokens (default 4096, DAPO's).
        depth: the penalty at max_length, > 0 (default 1, DAPO's 0 to -1; Magistral's ramp is 0 to -0.1).
    """

    def __init__(self, max_length: int = 20480, cache_length: int = 4096, depth: float = 1.0) -> None:
        require(max_length >= 1, "max_length", max_length, ">= 1 token")
        require(0 < cache_length <= max_length, "cache_length", cache_length, f"in (0, max_length={max_length}]")
        require(depth > 0, "depth", depth, "> 0 (the reward lost at max_length: DAPO 1, Magistral 0.1)")
        self.max_length = max_length
        self.cache_length = cache_length
        self.depth = depth

    def shape_rewards(self, rewards, lengths, correct):
        ramp = ((self.max_length - lengths.to(rewards.dtype)) / self.cache_length - 1).clamp(-1, 0)
        return rewards + (self.depth * ramp).where(correct, 0)


@LENGTH_CONTROLS.register("none")
class NoLengthControl(LengthControl):
    """Responses are only cut at the generator's length limit (a truncated sample scores as wrong)."""

    def __init__(self) -> None:
        pass
