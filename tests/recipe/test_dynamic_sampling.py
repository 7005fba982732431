"""DAPO's dynamic sampling: a minibatch refilled from later rounds, every generated row charged, the round cap."""

from __future__ import annotations

import pytest
import torch

from recipe.dynamic_sampling import concat_rollouts, fill_minibatch
from recipe.generator import Rollout
from recipe.run import Samples

G = 2


def make_samples(prompt_ids, rewards, prompt_width, response_lengths, seconds=1.0) -> Samples:
    """Samples of len(prompt_ids) groups of G rows: prompt tokens right-aligned, responses of the given lengths."""
    B, T = len(rewards), max(response_lengths)
    input_ids = torch.arange(1, B * (prompt_width + T) + 1).view(B, prompt_width + T)
    attention_mask = torch.ones(B, prompt_width + T, dtype=torch.long)
    lengths = torch.tensor(response_lengths)
    response = torch.arange(T)[None, :] < lengths[:, None]
    attention_mask[:, prompt_width:] = response.long()
    rollout = Rollout(input_ids=input_ids * attention_mask, attention_mask=attention_mask, prompt_width=prompt_width,
                      loss_mask=response, old_logprobs=torch.where(response, -0.5, 0.0), lengths=lengths,
                      truncated=torch.zeros(B, dtype=torch.bool), interrupted=torch.zeros(B, dtype=torch.bool),
                      versions=torch.zeros(B, T, dtype=torch.long))
    rewards = torch.tensor(rewards, dtype=torch.float32)
    return Samples(list(prompt_ids), rollout, rewards > 0, rewards, seconds, seconds / 2)


def test_a_minibatch_is_filled_from_a_second_round_and_every_generated_row_is_counted():
    # Round 1, prompts 10-13: groups 11 and 13 vary. Round 2, prompts 20-23: 20, 21 and 23 vary; the minibatch needs
    # two more, so it takes 20 and 21 and drops 22 (all equal) and 23 (surplus).
    first = make_samples([10, 11, 12, 13], [1, 1, 1, -1, -1, -1, -1, 1], 3, [4, 5, 2, 6, 3, 3, 1, 7])
    second = make_samples([20, 21, 22, 23], [1, -1, -1, 1, 1, 1, 1, -1], 2, [2, 8, 4, 4, 5, 5, 6, 6])
    asked, dropped = [], []

    def sample_more(count):
        asked.append(count)
        return second

    filled = fill_minibatch(first, sample_more, max_rounds=10, on_dropped=lambda s, groups: dropped.append(
        [s.prompt_ids[j] for j in groups]))
    assert asked == [4]  # one more round of P prompts
    assert filled.prompt_ids == [11, 13, 20, 21]
    assert dropped == [[10, 12], [22, 23]]  # every dropped group reaches the curriculum
    assert filled.rewards.tolist() == [1, -1, -1, 1, 1, -1, -1, 1]
    assert filled.rollout.lengths.tolist() == [2, 6, 1, 7, 2, 8, 4, 4]
    # the dropped rows: groups 10 and 12 of round 1 (prompt 3 tokens), 22 and 23 of round 2 (prompt 2)
    assert filled.discarded == ([3, 3, 3, 3, 2, 2, 2, 2], [4, 5, 3, 3, 5, 5, 6, 6])
    assert filled.seconds == 2.0 and filled.cpu_seconds == 1.0  # both rounds' generation time
    assert filled.metrics == {"rollout/dynamic_rounds": 2.0, "rollout/dynamic_dropped_groups": 4.0,
                              "rollout/dynamic_capped": 0.0}
    # every row kept its own tokens: round 2's rows, padded on the left to round 1's prompt width
    rollout = filled.rollout
    assert rollout.prompt_width == 3 and rollout.loss_mask.shape == (8, 8)
    row = 4  # prompt 20's first row: one padding column, then its 2 prompt tokens and 2 response tokens
    assert rollout.attention_mask[row].tolist() == [0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0]
    assert rollout.input_ids[row, 1:5].tolist() == second.rollout.input_ids[0, :4].tolist()


def test_the_round_cap_trains_on_what_it_has_and_says_so():
    solved = make_samples([1, 2], [1, 1, 1, -1], 2, [3, 3, 3, 3])  # group 2 varies, group 1 does not
    rounds = []

    def sample_more(count):
        rounds.append(count)
        return make_samples([5, 6], [1, 1, -1, -1], 2, [2, 2, 2, 2])  # nothing varies

    filled = fill_minibatch(solved, sample_more, max_rounds=3, on_dropped=lambda s, groups: None)
    assert rounds == [2, 2]  # 3 rounds in all, then it stops
    assert filled.prompt_ids == [2]
    assert filled.metrics == {"rollout/dynamic_rounds": 3.0, "rollout/dynamic_dropped_groups": 5.0,
                              "rollout/dynamic_capped": 1.0}
    assert len(filled.discarded[1]) == 2 + 4 + 4
    nothing = fill_minibatch(make_samples([5, 6], [1, 1, -1, -1], 2, [2, 2, 2, 2]), sample_more, max_rounds=2,
                             on_dropped=lambda s, groups: None)
    assert nothing.prompt_ids == [] and len(nothing.discarded[1]) == 8


def test_concat_keeps_each_rows_tokens_behind_its_padding():
    a = make_samples([1], [1, -1], 1, [3, 1]).rollout
    b = make_samples([2], [1, -1], 3, [1, 1]).rollout
    both = concat_rollouts([a, b])
    assert both.prompt_width == 3 and both.input_ids.shape == (4, 6)
    assert both.attention_mask[:2, :2].sum() == 0 and both.attention_mask[2:, 4:].sum() == 0
    torch.testing.assert_close(both.old_logprobs[:2], a.old_logprobs)


def test_dynamic_sampling_trains_and_charges_every_round(tiny_recipe, tmp_path):
    from recipe.engines import train

    # The tiny model passes or fails whole groups often at 4 prompts x 4 samples: refills are common.
    cfg = tiny_recipe("batch_filter=dynamic_sampling", "eval.every_steps=1", run_steps=12)
    records = train(cfg, tmp_path / "run")
    steps = records[1:]
    assert all(r["rollout/dynamic_capped"] == 0.0 for r in steps)
    assert all(r["rollout/kept_group_frac"] == 1.0 for r in steps)  # a full minibatch of varied groups
    assert any(r["rollout/dynamic_rounds"] >= 2 for r in steps), [r["rollout/dynamic_rounds"] for r in steps]
    # every sampled sequence is charged: P G rows a round
    P, G = cfg.rollout.prompts_per_batch, cfg.rollout.samples_per_prompt
    assert records[-1]["compute/samples"] == P * G * sum(r["rollout/dynamic_rounds"] for r in steps)


@pytest.mark.parametrize("overrides, message", [
    (["batch_filter=dynamic_sampling", "off_policy=pipeline_rl"], "dynamic_sampling cannot run with off_policy "
                                                                  "pipeline_rl"),
    (["batch_filter=dynamic_sampling", "engine.name=trl"], "batch_filter: dynamic_sampling cannot run on engine trl"),
    (["batch_filter=dynamic_sampling", "batch_filter.max_rounds=1"], "max_rounds"),
])
def test_where_dynamic_sampling_cannot_run_it_is_refused_in_one_line(tiny_overrides, overrides, message):
    from recipe.config import ConfigError, load_recipe

    with pytest.raises(ConfigError, match=message):
        load_recipe(None, tiny_overrides(*overrides))
