"""The rollout metrics assemble_minibatch logs per step, hand-derived on a batch of 2 prompts x 4 samples."""

import pytest
import torch

from recipe.generator import Rollout
from recipe.run import Samples, assemble_minibatch, build_components
from recipe.scalerl import SCALERL


def samples(truncated: list[bool], interrupted: list[bool], rewards: list[float] | None = None) -> Samples:
    """2 prompts x G = 4 samples of 3 response tokens; correct / wrong alternate so no group is filtered.

    rewards: what the length control made of the checker's +1 / -1 (default: left as they are).
    """
    B, T, P = len(truncated), 3, 2
    rollout = Rollout(input_ids=torch.zeros(B, P + T, dtype=torch.long), attention_mask=torch.ones(B, P + T),
                      prompt_width=P, loss_mask=torch.ones(B, T, dtype=torch.bool), old_logprobs=torch.zeros(B, T),
                      lengths=torch.full((B,), T), truncated=torch.tensor(truncated),
                      interrupted=torch.tensor(interrupted), versions=torch.zeros(B, T, dtype=torch.long))
    correct = torch.tensor([True, False] * (B // 2))
    shaped = torch.where(correct, 1.0, -1.0) if rewards is None else torch.tensor(rewards)
    return Samples([0, 1], rollout, correct, shaped, seconds=0.0)


def metrics(truncated, interrupted, rewards=None) -> dict[str, float]:
    c = build_components(SCALERL)
    c.curriculum.reset(2, 0)
    return assemble_minibatch(samples(truncated, interrupted, rewards), c).metrics


def test_the_truncation_rate_counts_each_forcibly_stopped_sample_once():
    # cut: samples 0, 1; interrupted: samples 1, 2 (sample 1 both: interrupted, then out of answer budget)
    m = metrics([True, True, False, False, False, False, False, False],
                [False, True, True, False, False, False, False, False])
    assert m["rollout/truncated_frac"] == pytest.approx(2 / 8)
    assert m["rollout/interrupted_frac"] == pytest.approx(2 / 8)
    assert m["rollout/forced_stop_frac"] == pytest.approx(3 / 8)  # the union, not 4 / 8
    assert m["rollout/forced_stop_below_5pct"] == 0.0


def test_a_step_under_5_percent_truncation_counts_as_one():
    # 0 of 8 stopped: below 5%; the Averager's mean of these 1 / 0 values is the share of such steps
    assert metrics([False] * 8, [False] * 8)["rollout/forced_stop_below_5pct"] == 1.0
    # 1 of 8 = 12.5%: not below
    assert metrics([True] + [False] * 7, [False] * 8)["rollout/forced_stop_below_5pct"] == 0.0


def test_the_length_penalty_share_counts_samples_whose_reward_it_lowered():
    # correct samples 0, 2, 4, 6; the penalty lowered samples 0 and 2 (to 0.5 and -1.0); wrong ones keep -1
    shaped = metrics([False] * 8, [False] * 8, rewards=[0.5, -1.0, -1.0, -1.0, 1.0, -1.0, 1.0, -1.0])
    assert shaped["rollout/length_penalized_frac"] == pytest.approx(2 / 8)
    # no length penalty: nothing lowered
    assert metrics([False] * 8, [False] * 8)["rollout/length_penalized_frac"] == 0.0
