"""A PPO-off-policy round: its minibatches sampled in one generate call, each cut to its own rows and width."""

from __future__ import annotations

import numpy as np
import torch

import recipe.generator as generator_module
from components import REGISTRIES
from recipe.generator import TorchGenerator, generate
from recipe.model import load_model_dir
from recipe.run import build_components, sample_round, select_rows
from recipe.tasks import build_task
from recipe.trainer import sequence_logprobs

FP32_HEAD = REGISTRIES["precision"].build({"name": "lm_head", "fp32_head": True})
INTERRUPTION = REGISTRIES["length_control"].build(
    {"name": "interruption", "min_thinking": 2, "max_thinking": 5, "answer_budget": 3})


def recompute(model, rollout):
    return sequence_logprobs(model, FP32_HEAD, rollout.input_ids, rollout.attention_mask, rollout.prompt_width)[0]


def test_selected_rows_lose_the_columns_that_are_padding_in_all_of_them(tiny_model_dir):
    model, tokenizer = load_model_dir(tiny_model_dir)
    # Rows of a long prompt and of a short one: the short prompt's rows alone need fewer prompt columns.
    prompts = ["123+99=<think>"] * 4 + ["7+5=<think>"] * 4
    rollout = generate(model, tokenizer, prompts, precision=FP32_HEAD, length_control=INTERRUPTION,
                       max_new_tokens=12, torch_rng=torch.Generator().manual_seed(0),
                       numpy_rng=np.random.default_rng(0))
    short = torch.arange(4, 8)
    cut = select_rows(rollout, short)
    padding = len("123+99") - len("7+5")
    assert cut.prompt_width == rollout.prompt_width - padding
    assert cut.loss_mask.shape[1] == int(rollout.lengths[short].max()) <= rollout.loss_mask.shape[1]
    # The same tokens in the same positions: the trainer's logprobs of the cut rows are those of the full rows.
    full = recompute(model, rollout)[short, : cut.loss_mask.shape[1]]
    assert (recompute(model, cut) - full)[cut.loss_mask].abs().max() < 1e-5
    assert torch.equal(cut.old_logprobs, rollout.old_logprobs[short, : cut.loss_mask.shape[1]])
    assert torch.equal(cut.response_ids, rollout.response_ids[short, : cut.loss_mask.shape[1]])


def round_of(cfg, orders, monkeypatch):
    """sample_round on the tiny model; returns (minibatches, generate calls made, model)."""
    model, tokenizer = load_model_dir(cfg.model.path)
    task = build_task(cfg.task, tokenizer)
    c = build_components(cfg)
    calls = []

    def counting_generate(*args, **kwargs):
        calls.append(len(args[2]))
        return generate(*args, **kwargs)

    monkeypatch.setattr(generator_module, "generate", counting_generate)
    rngs = {"torch": torch.Generator().manual_seed(0), "numpy": np.random.default_rng(0)}
    return sample_round(TorchGenerator(model, tokenizer), task, c, cfg, orders, rngs, policy_version=3), calls, model


def test_a_round_is_sampled_in_one_call_and_cut_into_its_minibatches(tiny_recipe, monkeypatch):
    cfg = tiny_recipe()  # 4 prompts x 4 samples a minibatch
    orders = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    minibatches, calls, model = round_of(cfg, orders, monkeypatch)
    assert calls == [48]  # the whole round in one call
    assert [m.prompt_ids for m in minibatches] == orders
    for samples in minibatches:
        rollout = samples.rollout
        assert rollout.input_ids.shape[0] == len(samples.correct) == len(samples.rewards) == 16
        assert (rollout.versions == 3).all()
        # Behaviour logprobs of a minibatch cut from the round still equal the trainer's recompute.
        assert (recompute(model, rollout) - rollout.old_logprobs)[rollout.loss_mask].abs().max() < 1e-5
    # Each minibatch is charged an equal share of the call's generation time.
    assert len({m.seconds for m in minibatches}) == 1 and minibatches[0].seconds > 0


def test_rows_per_call_splits_a_round_into_calls_of_whole_minibatches(tiny_recipe, monkeypatch):
    cfg = tiny_recipe("rollout.rows_per_call=40")  # room for 2 minibatches of 16 rows a call
    orders = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    minibatches, calls, _ = round_of(cfg, orders, monkeypatch)
    assert calls == [32, 16]
    assert [m.prompt_ids for m in minibatches] == orders
    cfg = tiny_recipe("rollout.rows_per_call=1")  # below one minibatch: still one minibatch a call
    assert round_of(cfg, orders, monkeypatch)[1] == [16, 16, 16]
