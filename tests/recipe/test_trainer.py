"""Trainer: one clipped AdamW step per minibatch; micro-batching leaves the update unchanged."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from components import REGISTRIES
from recipe.generator import generate
from recipe.model import load_model_dir
from recipe.run_config import OptimizerConfig
from recipe.trainer import StalenessError, TrainBatch, build_optimizer, train_step

PROMPTS = ["07+05=<think>", "19+01=<think>", "38+04=<think>"]


def make_batch(model, tokenizer, G=4):
    precision = REGISTRIES["precision"].build({"name": "lm_head"})
    rollout = generate(model, tokenizer, [p for p in PROMPTS for _ in range(G)], precision=precision,
                       length_control=REGISTRIES["length_control"].build({"name": "none"}), max_new_tokens=10,
                       torch_rng=torch.Generator().manual_seed(0), numpy_rng=np.random.default_rng(0))
    group_ids = torch.arange(len(PROMPTS)).repeat_interleave(G)
    advantages = torch.linspace(-1.5, 1.5, len(group_ids))  # arbitrary, non-zero
    return TrainBatch(rollout, advantages, group_ids, version=0), precision


def step_once(model, batch, precision, micro_batch_size, loss="cispo", aggregation="prompt_mean",
              staleness_bound=None, **memory):
    optimizer, schedule = build_optimizer(model, OptimizerConfig(lr=1e-2, warmup_steps=1))
    return train_step(model, optimizer, schedule, batch, loss_fn=REGISTRIES["loss"].build({"name": loss}),
                      aggregation=REGISTRIES["aggregation"].build({"name": aggregation}), precision=precision,
                      temperature=1.0, grad_clip=1.0, micro_batch_size=micro_batch_size,
                      staleness_bound=staleness_bound, **memory)


def step_recording_gradients(model, batch, precision, micro_batch_size, **memory):
    """One train_step; returns (metrics, the clipped gradients AdamW received, parameter updates)."""
    before = [p.detach().clone() for p in model.parameters()]
    gradients = []

    def record(optimizer, args, kwargs):  # torch's global optimizer pre-step hook
        gradients.extend(p.grad.detach().clone() for group in optimizer.param_groups for p in group["params"])

    hook = register_optimizer_step_pre_hook(record)
    try:
        metrics = step_once(model, batch, precision, micro_batch_size, **memory)
    finally:
        hook.remove()
    updates = [p.detach() - b for p, b in zip(model.parameters(), before)]
    return metrics, gradients, updates


# The token budget is derived from the sampled batch ("rows_of_tokens": n -> token_budget_of_rows): its response
# lengths depend on the transformers version and the CPU's kernels, and a fixed budget cut it into 2 micro-batches
# on one machine and 3 on another. With at most n rows a micro-batch, 12 rows make >= 3 micro-batches anywhere.
SAME_UPDATE = {
    "rows": dict(micro_batch_size=5),  # 12 rows -> 5, 5, 2
    "tokens": dict(rows_of_tokens=3),  # cut by tokens into 4 or more micro-batches
    "rows_and_tokens_checkpointed": dict(micro_batch_size=2, rows_of_tokens=4, gradient_checkpointing=True),
    "checkpointed": dict(gradient_checkpointing=True),
    "head_in_chunks": dict(head_chunk_bytes=4 * 103 * 7),  # 7 tokens of logits a chunk
    "attention_in_blocks": dict(query_block=2),  # 2 response queries a block, each recomputed in the backward
    "everything": dict(rows_of_tokens=4, gradient_checkpointing=True, query_block=2, head_chunk_bytes=4 * 103 * 5),
}


def token_budget_of_rows(batch, rows: int) -> int:
    """The largest micro_batch_tokens under which no micro-batch holds more than `rows` rows of this batch:
    rows + 1 rows of the shortest response would already exceed it."""
    shortest = max(1, int(batch.rollout.attention_mask[:, batch.rollout.prompt_width:].sum(1).min()))
    return (rows + 1) * (batch.rollout.prompt_width + shortest) - 1


@pytest.mark.parametrize("memory", SAME_UPDATE.values(), ids=SAME_UPDATE.keys())
def test_micro_batching_gives_the_same_update(tiny_model_dir, memory, monkeypatch):
    """Splitting a minibatch into micro-batches (by rows, by tokens), recomputing the layers in the backward
    (gradient checkpointing), the head's logits in chunks or the attention in query blocks leaves the
    gradient (and so the update) unchanged.

    Compared where it is meaningful on every CPU: the gradients AdamW receives, to float round-off,
    and the update on parameters whose gradient is clearly non-zero. AdamW's first step is
    lr * g / (|g| + eps) ~ lr * sign(g) (eps 1e-15 here as in the paper), so a gradient that is ~0
    up to round-off (1e-12) moves its parameter by a full +-lr whose sign the summation order of a
    micro-batch decides; comparing those entries would test the CPU's float order, not the trainer.
    """
    import recipe.prefix_attention
    import recipe.trainer

    model, tokenizer = load_model_dir(tiny_model_dir)
    batch, precision = make_batch(model, tokenizer)
    whole, split = copy.deepcopy(model), copy.deepcopy(model)
    metrics_whole, grads_whole, updates_whole = step_recording_gradients(whole, batch, precision, micro_batch_size=0)
    memory = dict(memory)
    if "rows_of_tokens" in memory:
        memory["micro_batch_tokens"] = token_budget_of_rows(batch, memory.pop("rows_of_tokens"))
    if "head_chunk_bytes" in memory:
        assert len(tokenizer) == 103
        monkeypatch.setattr(recipe.trainer, "HEAD_CHUNK_BYTES", memory.pop("head_chunk_bytes"))
    if "query_block" in memory:
        assert batch.rollout.loss_mask.shape[1] > 2 * memory["query_block"]  # 3 blocks or more
        monkeypatch.setattr(recipe.prefix_attention, "TRAINING_QUERY_BLOCK", memory.pop("query_block"))
    split_rows = recipe.trainer.micro_batches(batch.rollout.attention_mask[:, batch.rollout.prompt_width:].sum(1),
                                              batch.rollout.prompt_width, memory.get("micro_batch_size", 0),
                                              memory.get("micro_batch_tokens", 0))
    assert len(split_rows) >= 3 if {"micro_batch_size", "micro_batch_tokens"} & memory.keys() else len(split_rows) == 1
    metrics_split, grads_split, updates_split = step_recording_gradients(
        split, batch, precision, memory.pop("micro_batch_size", 0), **memory)
    scale = max(float(g.abs().max()) for g in grads_whole)
    assert scale > 0 and metrics_whole["train/grad_norm"] > 0
    for g_whole, g_split in zip(grads_whole, grads_split):
        torch.testing.assert_close(g_split, g_whole, atol=1e-6 * scale, rtol=1e-4)
    clear = 1e-4 * scale  # far above round-off, far below the typical gradient
    compared = 0
    for g, u_whole, u_split in zip(grads_whole, updates_whole, updates_split):
        rows = g.abs() > clear
        compared += int(rows.sum())
        torch.testing.assert_close(u_split[rows], u_whole[rows], atol=1e-6, rtol=1e-4)
    assert compared > 0.5 * sum(g.numel() for g in grads_whole)  # the check covers most parameters
    assert abs(metrics_whole["train/loss"] - metrics_split["train/loss"]) < 1e-6
    assert all(not torch.equal(a, b) for a, b in zip(model.parameters(), whole.parameters()))



def test_micro_batches_report_the_minibatchs_loss_metrics(tiny_model_dir):
    """Ratio extremes, mean and shares of a split minibatch are the whole one's (trainer.combine_micro_batches):
    off-policy old logprobs make the ratios differ token to token, so a plain mean of per-micro-batch maxima
    would read low."""
    import dataclasses

    from recipe.trainer import combine_micro_batches

    model, tokenizer = load_model_dir(tiny_model_dir)
    batch, precision = make_batch(model, tokenizer)
    noise = torch.randn(batch.rollout.old_logprobs.shape, generator=torch.Generator().manual_seed(1))
    stale = dataclasses.replace(batch, rollout=dataclasses.replace(
        batch.rollout, old_logprobs=batch.rollout.old_logprobs + 0.5 * noise * batch.rollout.loss_mask))
    whole = step_once(copy.deepcopy(model), stale, precision, micro_batch_size=0)
    split = step_once(copy.deepcopy(model), stale, precision, micro_batch_size=5)
    assert whole["loss/ratio_max"] > 1.5 > 0.7 > whole["loss/ratio_min"]  # the ratios do spread
    for key in [key for key in whole if key.startswith("loss/")]:
        assert split[key] == pytest.approx(whole[key], rel=1e-4, abs=1e-6), key
    parts = [(10.0, 5.0), (30.0, 1.0)]
    assert combine_micro_batches("loss/ratio_max", parts) == 5.0
    assert combine_micro_batches("loss/ratio_min", parts) == 1.0
    assert combine_micro_batches("loss/log_ratio_clamped", parts) == 6.0
    assert combine_micro_batches("loss/clip_frac", parts) == pytest.approx((10 * 5 + 30 * 1) / 40)

def test_step_metrics_and_mismatch(tiny_model_dir):
    model, tokenizer = load_model_dir(tiny_model_dir)
    batch, precision = make_batch(model, tokenizer)
    metrics = step_once(model, batch, precision, micro_batch_size=0, loss="dapo", aggregation="token_mean")
    assert metrics["train/logprob_mismatch"] < 1e-5  # same weights on both sides, fp32 head
    assert metrics["loss/ratio_mean"] == 1.0 or abs(metrics["loss/ratio_mean"] - 1.0) < 1e-5
    assert metrics["train/entropy"] > 0 and np.isfinite(metrics["train/loss"])
    assert metrics["train/tokens"] == float(batch.rollout.loss_mask.sum())
    stale = TrainBatch(batch.rollout, batch.advantages, batch.group_ids, version=1)
    assert "train/logprob_mismatch" not in step_once(model, stale, precision, micro_batch_size=0)


def test_a_token_older_than_the_bound_is_refused_before_any_update(tiny_model_dir):
    model, tokenizer = load_model_dir(tiny_model_dir)
    batch, precision = make_batch(model, tokenizer)  # sampled by version 0
    stale = TrainBatch(batch.rollout, batch.advantages, batch.group_ids, version=3)  # 3 versions old
    before = copy.deepcopy(model)
    with pytest.raises(StalenessError, match="holds a token 3 versions old \\(bound 2\\)"):
        step_once(model, stale, precision, micro_batch_size=0, staleness_bound=2)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), before.parameters()))
    assert step_once(model, stale, precision, micro_batch_size=0, staleness_bound=3)["train/staleness_max"] == 3.0


def full_row_logprobs(model, rollout):
    """Reference: one plain Hugging Face forward over every full row (no shared prompt prefix), in the model's dtype."""
    from recipe.generator import positions_from_mask

    P = rollout.prompt_width
    logits = model(input_ids=rollout.input_ids, attention_mask=rollout.attention_mask,
                   position_ids=positions_from_mask(rollout.attention_mask)).logits[:, P - 1:-1]
    return torch.log_softmax(logits, dim=-1).gather(-1, rollout.input_ids[:, P:, None]).squeeze(-1)


@pytest.mark.parametrize("prompts", [
    ["07+05=<think>", "7+5=<think>", "19+01=<think>", "123+9=<think>"] * 3,  # G = 3, left padding, shuffled groups
    ["7+5=<think>", "07+05=<think>", "123+9=<think>"],  # every prompt distinct
], ids=["repeated-prompts", "distinct-prompts"])
@pytest.mark.parametrize("packed", [True, False], ids=["packed", "rows"])  # rows: the benchmark's reference path
def test_shared_prompt_prefix_gives_the_full_row_logprobs_and_gradients(tiny_model_dir, prompts, packed, monkeypatch):
    # The trainer runs each distinct prompt once and gathers its KV cache to the rows; values and
    # gradients must be those of a plain forward over every full row.
    import recipe.trainer
    from recipe.trainer import sequence_logprobs

    monkeypatch.setattr(recipe.trainer, "PACK_RESPONSES", packed)

    model, tokenizer = load_model_dir(tiny_model_dir)
    precision = REGISTRIES["precision"].build({"name": "lm_head"})
    rollout = generate(model, tokenizer, prompts, precision=precision,
                       length_control=REGISTRIES["length_control"].build({"name": "none"}), max_new_tokens=10,
                       torch_rng=torch.Generator().manual_seed(1), numpy_rng=np.random.default_rng(1))
    mask = rollout.loss_mask
    # The reference values are the exact ones: the same weights' full-row forward in float64. Each
    # fp32 path (shared-prefix trainer, generator) must be within fp32 round-off of them, which for
    # this model is ~1e-5 for every path, the model's own included: over 12 rollouts of this shape
    # (seeds 0-11, AMD EPYC) the largest error of a plain fp32 full-row forward was 1.19e-5, of the
    # trainer's shared-prefix path 1.70e-5 (row-padded) and 1.41e-5 (packed), of the generator 1.19e-5.
    # So the line is 3e-5, above that band; a wrong mask, position or prompt shows as >= 1e-3.
    # Two fp32 paths are not compared with each other (their round-offs add).
    reference = full_row_logprobs(copy.deepcopy(model).double(), rollout)
    shared, _ = sequence_logprobs(model, precision, rollout.input_ids, rollout.attention_mask, rollout.prompt_width)
    assert float((shared.double() - reference).detach()[mask].abs().max()) < 3e-5
    # the generator shares its prefill too
    assert float((rollout.old_logprobs.double() - reference).detach()[mask].abs().max()) < 3e-5

    # Gradients of an arbitrary loss over sampled tokens, against the float64 full-row gradient for the
    # same reason: measured in units of this tolerance, the shared-prefix fp32 gradient is 0.22-0.26 from
    # the exact one, a plain fp32 full-row gradient up to 1.19 (so two fp32 paths cannot be compared).
    weights = torch.linspace(-1, 1, mask.numel()).view_as(mask) * mask
    exact_model = copy.deepcopy(model).double()
    (weights.double() * full_row_logprobs(exact_model, rollout)).sum().backward()
    model.zero_grad()
    (weights * shared).sum().backward()
    for ours, exact in zip(model.parameters(), exact_model.parameters()):
        torch.testing.assert_close(ours.grad.double(), exact.grad, atol=1e-5 * float(exact.grad.abs().max()) + 1e-9,
                                   rtol=1e-4)


def test_a_one_token_response_is_predicted_by_the_last_prompt_state(tiny_model_dir):
    from recipe.trainer import sequence_logprobs

    model, tokenizer = load_model_dir(tiny_model_dir)
    precision = REGISTRIES["precision"].build({"name": "lm_head"})
    rollout = generate(model, tokenizer, ["7+5=<think>"] * 2, precision=precision,
                       length_control=REGISTRIES["length_control"].build({"name": "none"}), max_new_tokens=1,
                       torch_rng=torch.Generator().manual_seed(0), numpy_rng=np.random.default_rng(0))
    assert rollout.response_ids.shape[1] == 1
    shared, _ = sequence_logprobs(model, precision, rollout.input_ids, rollout.attention_mask, rollout.prompt_width)
    torch.testing.assert_close(shared, full_row_logprobs(model, rollout), atol=1e-5, rtol=0)
    # the same one-token responses in a batch padded wider: nothing to pack, the same first logprobs
    P = rollout.prompt_width
    wide_ids = torch.cat([rollout.input_ids, torch.full_like(rollout.input_ids[:, -1:], tokenizer.pad_token_id)], dim=1)
    wide_mask = torch.cat([rollout.attention_mask, torch.zeros_like(rollout.attention_mask[:, -1:])], dim=1)
    wide, _ = sequence_logprobs(model, precision, wide_ids, wide_mask, P)
    torch.testing.assert_close(wide[:, :1], shared, atol=1e-6, rtol=0)


def test_packing_takes_each_rows_real_tokens_and_refuses_a_gap():
    from recipe.prefix_attention import packed_positions

    valid = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0], [1, 0, 0]], dtype=torch.bool)
    assert packed_positions(valid).tolist() == [0, 1, 3, 4, 5, 9]
    with pytest.raises(ValueError, match="right-padded"):
        packed_positions(torch.tensor([[1, 0, 1]], dtype=torch.bool))


def test_micro_batches_bound_rows_and_tokens_and_train_a_long_row_alone():
    from recipe.trainer import micro_batches

    lengths = torch.tensor([3, 5, 2, 20, 4, 4])
    # rows x (prompt 4 + longest response) <= 20 tokens; the 20-token row exceeds it alone and trains alone.
    assert micro_batches(lengths, 4, micro_batch_tokens=20) == [
        (slice(0, 2), 5), (slice(2, 3), 2), (slice(3, 4), 20), (slice(4, 6), 4)]
    assert micro_batches(lengths, 4, micro_batch_size=4) == [(slice(0, 4), 20), (slice(4, 6), 4)]
    assert micro_batches(lengths, 4, micro_batch_size=1, micro_batch_tokens=1000) == [
        (slice(i, i + 1), n) for i, n in enumerate(lengths.tolist())]
    assert micro_batches(lengths, 4) == [(slice(0, 6), 20)]  # no bound: the whole minibatch, cut to its longest
    assert micro_batches(torch.tensor([0, 0]), 4) == [(slice(0, 2), 1)]  # an empty response still has a column


def kl_step_gradients(model, batch, precision, kl_penalty, reference):
    """The gradients AdamW receives from one train_step with this KL penalty (lr 0: the weights stay)."""
    gradients = []

    def record(optimizer, args, kwargs):
        gradients.extend(p.grad.detach().clone() for group in optimizer.param_groups for p in group["params"])

    optimizer, schedule = build_optimizer(model, OptimizerConfig(lr=0.0, warmup_steps=1))
    hook = register_optimizer_step_pre_hook(record)
    try:
        metrics = train_step(model, optimizer, schedule, batch, loss_fn=REGISTRIES["loss"].build({"name": "cispo"}),
                             aggregation=REGISTRIES["aggregation"].build({"name": "token_mean"}), precision=precision,
                             temperature=1.0, grad_clip=1e9, kl_penalty=kl_penalty, reference=reference)
    finally:
        hook.remove()
    return metrics, gradients


def test_the_kl_penalty_adds_coef_times_the_estimators_gradient(tiny_model_dir):
    model, tokenizer = load_model_dir(tiny_model_dir)
    batch, precision = make_batch(model, tokenizer)
    batch = TrainBatch(batch.rollout, torch.zeros_like(batch.advantages), batch.group_ids, version=0)  # no policy term
    reference = copy.deepcopy(model).requires_grad_(False)
    with torch.no_grad():  # a reference the policy has moved away from
        for p in reference.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    mask = batch.rollout.loss_mask
    from recipe.trainer import sequence_logprobs

    def expected(estimator_of):  # d/dtheta of 0.5 * sum_t w_t kl_t, token_mean: w_t = 1 / tokens
        model.zero_grad(set_to_none=True)
        rollout = batch.rollout
        logprobs, _ = sequence_logprobs(model, precision, rollout.input_ids, rollout.attention_mask,
                                        rollout.prompt_width)
        with torch.no_grad():
            ref, _ = sequence_logprobs(reference, precision, rollout.input_ids, rollout.attention_mask,
                                       rollout.prompt_width)
        (0.5 * (estimator_of(logprobs, ref) * mask).sum() / mask.sum()).backward()
        return [p.grad.detach().clone() for p in model.parameters()]

    for estimator, formula in (("k1", lambda lp, ref: lp - ref),
                               ("k3", lambda lp, ref: (ref - lp).exp() - (ref - lp) - 1)):
        penalty = REGISTRIES["kl_penalty"].build({"name": "reference", "coef": 0.5, "estimator": estimator})
        metrics, gradients = kl_step_gradients(model, batch, precision, penalty, reference)
        for got, want in zip(gradients, expected(formula)):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-7)
        assert metrics["train/kl"] != 0.0
    # k3 against an identical reference: kl = 0 and so is its gradient, exp(d) - 1 at d = 0
    k3 = REGISTRIES["kl_penalty"].build({"name": "reference", "estimator": "k3"})
    metrics, gradients = kl_step_gradients(model, batch, precision, k3, copy.deepcopy(model).requires_grad_(False))
    assert metrics["train/kl"] == pytest.approx(0.0, abs=1e-6)
    assert all(float(g.abs().max()) < 1e-6 for g in gradients)
