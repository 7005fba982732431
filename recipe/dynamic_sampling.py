"""DAPO's dynamic sampling: a minibatch whose zero-variance groups were dropped is refilled from more prompts.

    round 1: the curriculum's P prompts, G samples each; keep the groups whose rewards differ
    round r (while kept < P and r <= max_rounds): P more prompts from the curriculum, the same frozen weights
    the minibatch: the first P kept groups, in the order they were sampled (a surplus is dropped)

Every round's groups feed the curriculum (a prompt all of whose samples pass is what No-Positive-Resampling
retires) and every generated row is charged: the minibatch carries the dropped rows' lengths and the rounds'
generation time (Samples.discarded, Samples.seconds), which train_on charges with its own. A minibatch still
short after max_rounds trains on what it has (components/filters.py: DynamicSamplingFilter).
"""

from __future__ import annotations

from typing import Callable

import torch

from recipe.generator import Rollout
from recipe.run import Samples, select_rows


def varied_groups(samples: Samples) -> list[int]:
    """The groups (prompt indexes) of `samples` whose G rewards are not all equal."""
    P = len(samples.prompt_ids)
    rewards = samples.rewards.view(P, -1)
    return [j for j in range(P) if float(rewards[j].max()) != float(rewards[j].min())]


def concat_rollouts(rollouts: list[Rollout]) -> Rollout:
    """Rollouts of different widths stacked into one: prompts left-padded, responses right-padded to the widest
    (padding is masked out: attention_mask 0, loss_mask False), so each row keeps its tokens and positions."""
    P = max(r.prompt_width for r in rollouts)
    T = max(r.loss_mask.shape[1] for r in rollouts)

    def padded(r: Rollout, key: str) -> torch.Tensor:
        value = getattr(r, key)
        if key in ("input_ids", "attention_mask"):
            left, right = P - r.prompt_width, T - (value.shape[1] - r.prompt_width)
            return torch.nn.functional.pad(value, (left, right))
        if value.dim() == 2:
            return torch.nn.functional.pad(value, (0, T - value.shape[1]))
        return value

    keys = [k for k, v in rollouts[0].__dict__.items() if torch.is_tensor(v)]
    return Rollout(prompt_width=P, **{k: torch.cat([padded(r, k) for r in rollouts]) for k in keys})


def fill_minibatch(first: Samples, sample_more: Callable[[int], Samples], max_rounds: int,
                   on_dropped: Callable[[Samples, list[int]], None]) -> Samples:
    """The minibatch of P varied groups dynamic sampling assembles from `first` and up to max_rounds - 1 more
    rounds of `sample_more(P)`; `on_dropped(samples, groups)` sees every group left out (the curriculum's update).

    The result's `discarded` holds the lengths of every row sampled and left out, its seconds the rounds'
    generation time, its `metrics` the rounds taken, the groups dropped and whether the cap was reached.
    """
    P = len(first.prompt_ids)
    G = len(first.correct) // P
    rounds, kept, dropped_groups = [first], [], 0
    samples = first
    while True:
        take = varied_groups(samples)[: P - len(kept)]
        kept.extend((samples, j) for j in take)
        left_out = [j for j in range(P) if j not in take]
        dropped_groups += len(left_out)
        if left_out:
            on_dropped(samples, left_out)
        if len(kept) == P or len(rounds) == max_rounds:
            break
        samples = sample_more(P)
        rounds.append(samples)
    rows = [(samples, torch.arange(j * G, (j + 1) * G)) for samples, j in kept]
    metrics = {"rollout/dynamic_rounds": float(len(rounds)), "rollout/dynamic_dropped_groups": float(dropped_groups),
               "rollout/dynamic_capped": float(len(kept) < P)}
    seconds, cpu_seconds = sum(s.seconds for s in rounds), sum(s.cpu_seconds for s in rounds)
    discarded = discarded_lengths(rounds, kept, G)
    if not kept:  # no round held a varied group: nothing to train on, every row discarded (the step is skipped)
        return Samples([], first.rollout, first.correct[:0], first.rewards[:0], seconds, cpu_seconds,
                       discarded=discarded, metrics=metrics)
    rollout = concat_rollouts([select_rows(s.rollout, index.to(s.rollout.input_ids.device)) for s, index in rows])
    correct = torch.cat([s.correct[index] for s, index in rows])
    rewards = torch.cat([s.rewards[index] for s, index in rows])
    return Samples([samples.prompt_ids[j] for samples, j in kept], rollout, correct, rewards, seconds, cpu_seconds,
                   discarded=discarded, metrics=metrics)


def discarded_lengths(rounds: list[Samples], kept: list[tuple[Samples, int]], G: int) -> tuple[list[int], list[int]]:
    """(prompt lengths, response lengths) of every sampled row not in the minibatch: what it cost beyond its own."""
    kept_ids = {(id(samples), j) for samples, j in kept}
    prompt, response = [], []
    for samples in rounds:
        rollout = samples.rollout
        prompt_lengths = rollout.attention_mask[:, : rollout.prompt_width].sum(dim=1).tolist()
        for j in range(len(samples.prompt_ids)):
            if (id(samples), j) not in kept_ids:
                prompt.extend(prompt_lengths[j * G: (j + 1) * G])
                response.extend(rollout.lengths[j * G: (j + 1) * G].tolist())
    return prompt, response
