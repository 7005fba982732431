"""Hand-derived numbers for every loss aggregation."""

import pytest
import torch

from components.aggregation import PromptMeanAggregation, SampleMeanAggregation, TokenMeanAggregation

# Prompt 0 has samples of 1 and 3 tokens, prompt 1 one sample of 2 tokens (padding holds 99).
LOSS = torch.tensor([[6.0, 99, 99], [1.0, 1.0, 1.0], [4.0, 4.0, 99]])
MASK = torch.tensor([[1, 0, 0], [1, 1, 1], [1, 1, 0]])
GROUPS = torch.tensor([0, 0, 1])


def test_prompt_mean():
    # prompt 0: (6 + 1 + 1 + 1) / 4 tokens = 2.25; prompt 1: (4 + 4) / 2 = 4; mean over 2 prompts = 3.125
    assert PromptMeanAggregation()(LOSS, MASK, GROUPS).item() == pytest.approx(3.125)


def test_sample_mean():
    # sample means 6, 1, 4 -> 11 / 3
    assert SampleMeanAggregation()(LOSS, MASK, GROUPS).item() == pytest.approx(11 / 3)


def test_token_mean():
    # (6 + 3 + 8) / 6 tokens
    assert TokenMeanAggregation()(LOSS, MASK, GROUPS).item() == pytest.approx(17 / 6)


def test_prompt_mean_weighs_each_prompt_equally_whatever_its_lengths():
    # Prompt 1's single sample grows from 2 to 6 tokens of the same loss 4: its mean stays 4, so
    # prompt_mean stays 3.125, while token_mean shifts toward 4: (6 + 3 + 24) / 10 = 3.3.
    loss = torch.tensor([[6.0, 0, 0, 0, 0, 0], [1.0, 1, 1, 0, 0, 0], [4.0] * 6])
    mask = torch.tensor([[1, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0], [1] * 6])
    assert PromptMeanAggregation()(loss, mask, GROUPS).item() == pytest.approx(3.125)
    assert TokenMeanAggregation()(loss, mask, GROUPS).item() == pytest.approx(3.3)


@pytest.mark.parametrize("aggregation", [PromptMeanAggregation(), SampleMeanAggregation(), TokenMeanAggregation()])
def test_token_weights_split_into_micro_batches_give_the_same_loss(aggregation):
    weights = aggregation.token_weights(MASK, GROUPS)
    total = aggregation(LOSS, MASK, GROUPS)
    micro = sum((weights[rows] * LOSS[rows].where(MASK[rows] != 0, 0)).sum() for rows in ([0, 1], [2]))
    assert micro.item() == pytest.approx(total.item())


def test_rows_without_tokens_do_not_count():
    # A fully padded row (e.g. a filtered sample) must not dilute sample_mean: 11/3 stays 11/3.
    loss = torch.cat([LOSS, torch.full((1, 3), 5.0)])
    mask = torch.cat([MASK, torch.zeros(1, 3, dtype=MASK.dtype)])
    groups = torch.tensor([0, 0, 1, 2])
    assert SampleMeanAggregation()(loss, mask, groups).item() == pytest.approx(11 / 3)
    assert PromptMeanAggregation()(loss, mask, groups).item() == pytest.approx(3.125)


def test_prompt_mean_and_token_mean_agree_only_when_prompts_hold_equal_token_counts():
    # DAPO's formula (per prompt, prompt_mean) and its batch-level implementation (token_mean) coincide
    # when every prompt's samples hold the same number of tokens: prompt 1 gets 4 tokens like prompt 0.
    loss = torch.tensor([[6.0, 0, 0, 0], [1.0, 1, 1, 0], [4.0, 4, 4, 4]])
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]])
    # (9 / 4 + 16 / 4) / 2 = 3.125 = (9 + 16) / 8
    assert PromptMeanAggregation()(loss, mask, GROUPS).item() == pytest.approx(3.125)
    assert TokenMeanAggregation()(loss, mask, GROUPS).item() == pytest.approx(3.125)
    # with 2 tokens in prompt 1 they part: 3.125 against 17 / 6 (test_prompt_mean, test_token_mean)
    parted = PromptMeanAggregation()(LOSS, MASK, GROUPS).item(), TokenMeanAggregation()(LOSS, MASK, GROUPS).item()
    assert parted[0] != pytest.approx(parted[1])


def test_sweep_components_names_each_aggregation_as_the_papers_do():
    from sweeps.components_command import describe_axes

    lines = describe_axes("aggregation").splitlines()
    # each component's line "   name(params)" is followed by its docstring's first line
    first = {line[3:].split("(")[0]: lines[i + 1] for i, line in enumerate(lines) if line.endswith("(no parameters)")}
    assert set(first) == {"prompt_mean", "sample_mean", "token_mean"}
    assert '"prompt average"' in first["prompt_mean"] and "ScaleRL" in first["prompt_mean"]
    assert '"sample average"' in first["sample_mean"] and "GRPO" in first["sample_mean"]
    # token_mean is the ScaleRL paper's "token average", not simply "DAPO's": DAPO's paper writes its
    # token-level loss per prompt (prompt_mean); only implementations divide by the batch's tokens.
    assert '"token average"' in first["token_mean"] and "DAPO" not in first["token_mean"]
    full = describe_axes("aggregation", full=True)
    assert "DAPO's paper writes that loss per prompt, which is prompt_mean" in full
    assert "attributes it to DAPO" in full
