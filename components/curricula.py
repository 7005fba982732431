"""Curricula: which training prompts are sampled next, from what the run has seen so far.

A curriculum is stateful: `reset(pool_size, seed)`, then `sample(n) -> prompt indices` and
`update(prompt_ids, pass_rates)` after each batch is scored. `state_dict()` is JSON-able and
`load_state_dict()` restores it exactly, so a resumed run draws the same prompts. Both choices walk
the pool in epochs: a fresh permutation each epoch, without replacement inside an epoch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from components.registry import ConfigError, Registry, require


class Curriculum:
    """Base of the `curriculum` axis: an epoch-wise shuffled walk over the prompt pool."""

    def reset(self, pool_size: int, seed: int) -> None:
        if pool_size < 1:
            raise ValueError(f"curriculum needs a non-empty prompt pool, got pool_size={pool_size}")
        self.pool_size = pool_size
        self.rng = np.random.default_rng(seed)
        self.order: list[int] = []
        self.position = 0
        self.epoch = 0
        self.retired: set[int] = set()

    def eligible(self, prompt_id: int) -> bool:
        return True

    def sample(self, num_prompts: int) -> list[int]:
        """The next `num_prompts` eligible prompts of the epoch walk, starting new epochs as needed."""
        chosen: list[int] = []
        visited_without_pick = 0
        while len(chosen) < num_prompts:
            if self.position >= len(self.order):
                self.order = self.rng.permutation(self.pool_size).tolist()
                self.position = 0
                self.epoch += 1
            prompt_id = self.order[self.position]
            self.position += 1
            if self.eligible(prompt_id):
                chosen.append(prompt_id)
                visited_without_pick = 0
            else:
                visited_without_pick += 1
                # A run of ineligible visits longer than the pool can span an epoch's tail and the next one's head
                # while a prompt is still eligible: only a pool with none left is the error.
                if visited_without_pick > self.pool_size:
                    if any(map(self.eligible, range(self.pool_size))):
                        visited_without_pick = 0
                        continue
                    # An input error: a run that trains this long on this pool retires every prompt whichever
                    # it retires first (with PipelineRL's real timing not at the same step), so a rerun fails the
                    # same way (a sweep does not retry it; sweeps.job.INPUT_ERROR).
                    raise ConfigError(
                        f"{type(self).__name__}: no eligible prompt left in a pool of {self.pool_size} (every "
                        "prompt retired): nothing left to train on; raise task.train_size, or use curriculum "
                        "uniform, to train this long"
                    )
        return chosen

    def update(self, prompt_ids: Sequence[int], pass_rates: Sequence[float]) -> None:
        """Record the pass rate of each sampled group (default: nothing to learn from it)."""

    def metrics(self) -> dict[str, float]:
        return {"curriculum/epoch": float(self.epoch), "curriculum/retired_frac": len(self.retired) / self.pool_size}

    def state_dict(self) -> dict[str, Any]:
        return {
            "pool_size": self.pool_size,
            "rng": self.rng.bit_generator.state,
            "order": list(self.order),
            "position": self.position,
            "epoch": self.epoch,
            "retired": sorted(self.retired),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pool_size = int(state["pool_size"])
        self.rng = np.random.default_rng()
        self.rng.bit_generator.state = state["rng"]
        self.order = [int(i) for i in state["order"]]
        self.position = int(state["position"])
        self.epoch = int(state["epoch"])
        self.retired = {int(i) for i in state["retired"]}


CURRICULA: Registry[Curriculum] = Registry("curriculum", Curriculum)


@CURRICULA.register("uniform")
class UniformCurriculum(Curriculum):
    """Every prompt once per epoch in a fresh random order; prompts return in every epoch."""

    def __init__(self) -> None:
        pass


@CURRICULA.register("no_positive_resampling")
class NoPositiveResamplingCurriculum(Curriculum):
    """Retire prompt p for good once a group of it scores pass rate >= threshold: never resampled.

    Easy prompts stop costing generation compute and stop diluting the batch (ScaleRL, Figure 6b).
    If every prompt has been retired, `sample` raises a ConfigError (a run this long on this pool retires them all
    again on a rerun: an input error, which a sweep does not retry) rather than silently training on nothing new.

    Args:
        threshold: the group pass rate that retires a prompt, in (0, 1] (default 0.9, ScaleRL's).
    """

    def __init__(self, threshold: float = 0.9) -> None:
        require(0 < threshold <= 1, "threshold", threshold, "in (0, 1], e.g. 0.9")
        self.threshold = threshold

    def eligible(self, prompt_id: int) -> bool:
        return prompt_id not in self.retired

    def update(self, prompt_ids: Sequence[int], pass_rates: Sequence[float]) -> None:
        for prompt_id, pass_rate in zip(prompt_ids, pass_rates):
            if pass_rate >= self.threshold:
                self.retired.add(int(prompt_id))
