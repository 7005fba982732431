"""The generator contract: what every generation backend must do, run for each backend that can run here.

A backend (recipe.generator.TorchGenerator; recipe.vllm_generator.VllmGenerator) must
1. record behaviour logprobs that the trainer recomputes for the same weights (the importance
   ratio starts at 1 on fresh data),
2. interrupt as the length-control component says: sample the thinking budget, force the phrase
   (not trained on), then answer within answer_budget tokens,
3. make a weight update visible from the next generated token on.
The torch backend runs on CPU everywhere and on CUDA where there is a GPU; vLLM runs where vllm and
a GPU exist. The others are skipped with the reason.
"""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch

from components import REGISTRIES
from recipe.model import load_model_dir
from recipe.trainer import sequence_logprobs

PROMPTS = ["07+05=<think>", "7+5=<think>", "19+01=<think>", "123+9=<think>"] * 4
FP32_HEAD = REGISTRIES["precision"].build({"name": "lm_head", "fp32_head": True})
NO_LENGTH_CONTROL = REGISTRIES["length_control"].build({"name": "none"})
CUDA = torch.cuda.is_available()
VLLM = importlib.util.find_spec("vllm") is not None


@pytest.fixture(params=["torch-cpu", "torch-cuda", "vllm-cuda"])
def backend(request, tiny_model_dir):
    """(backend, trainer model on the backend's device) with the same weights."""
    name = request.param
    if name.endswith("cuda") and not CUDA:
        pytest.skip("no CUDA device on this machine")
    if name.startswith("vllm") and not VLLM:
        pytest.skip("vllm is not installed (pip install '.[vllm]' on a GPU machine)")
    device = "cuda" if name.endswith("cuda") else "cpu"
    trainer_model, tokenizer = load_model_dir(tiny_model_dir, device=device)
    if name.startswith("torch"):
        from recipe.generator import TorchGenerator

        generator_model, _ = load_model_dir(tiny_model_dir, device=device)
        yield TorchGenerator(generator_model, tokenizer), trainer_model, 1e-4
    else:
        from recipe.vllm_generator import VllmGenerator

        # vLLM computes in the model's dtype; with float32 its logits are fp32 like the trainer's.
        engine = VllmGenerator(str(tiny_model_dir), dtype="float32", gpu_memory_utilization=0.2)
        yield engine, trainer_model, 1e-3
        engine.close()


def trainer_logprobs(model, rollout):
    logprobs, _ = sequence_logprobs(model, FP32_HEAD, rollout.input_ids, rollout.attention_mask,
                                    rollout.prompt_width)
    return logprobs


def test_behaviour_logprobs_match_the_trainer_for_the_same_weights(backend):
    generator, trainer_model, tolerance = backend
    interruption = REGISTRIES["length_control"].build(
        {"name": "interruption", "min_thinking": 2, "max_thinking": 5, "answer_budget": 3})
    rollout = generator.generate(PROMPTS, precision=FP32_HEAD, length_control=interruption, max_new_tokens=12, seed=0)
    rollout = rollout.to(next(trainer_model.parameters()).device)
    mask = rollout.loss_mask
    assert mask.any() and rollout.old_logprobs[mask].lt(0).all()
    gap = (trainer_logprobs(trainer_model, rollout) - rollout.old_logprobs)[mask].abs().max().item()
    assert gap < tolerance, f"behaviour logprobs differ from the trainer's by {gap:.2e}"


def test_interruption_samples_the_budget_forces_the_phrase_then_answers_within_budget(backend):
    generator, _, _ = backend
    control = REGISTRIES["length_control"].build(
        {"name": "interruption", "min_thinking": 3, "max_thinking": 3, "answer_budget": 2})
    tokenizer = getattr(generator, "tokenizer")
    phrase = tokenizer.encode(control.interruption_phrase, add_special_tokens=False)
    rollout = generator.generate(PROMPTS, precision=FP32_HEAD, length_control=control, max_new_tokens=12, seed=1)
    assert rollout.interrupted.any()
    for row in range(len(PROMPTS)):
        length = int(rollout.lengths[row])
        tokens = rollout.response_ids[row, :length].tolist()
        mask = rollout.loss_mask[row, :length].tolist()
        if rollout.interrupted[row]:
            assert tokens[3:3 + len(phrase)] == phrase, "the phrase follows exactly 3 thinking tokens"
            assert mask[:3] == [True] * 3 and mask[3:3 + len(phrase)] == [False] * len(phrase)
            assert len(tokens) <= 3 + len(phrase) + 2 and all(mask[3 + len(phrase):])
        else:  # closed its thinking within the budget by itself
            assert phrase[-1] in tokens[:3 + 1] and all(mask)


def test_a_weight_update_is_visible_in_the_next_tokens(backend):
    generator, trainer_model, tolerance = backend
    before = generator.generate(PROMPTS, precision=FP32_HEAD, length_control=NO_LENGTH_CONTROL, max_new_tokens=6,
                                seed=2)
    vocabulary = trainer_model.get_output_embeddings().weight.shape[0]
    uniform = -math.log(vocabulary)
    assert (before.old_logprobs[before.loss_mask] - uniform).abs().max() > 0.1
    # New weights: a zero final norm makes every hidden state 0, so every next-token distribution
    # is uniform; a backend still sampling with the old weights cannot produce these logprobs.
    norm = next(name for name, _ in trainer_model.named_parameters() if name.endswith("norm.weight")
                and "layers" not in name)
    zero = torch.zeros_like(dict(trainer_model.named_parameters())[norm])
    generator.update_weights([(norm, zero)], version=1)
    after = generator.generate(PROMPTS, precision=FP32_HEAD, length_control=NO_LENGTH_CONTROL, max_new_tokens=6,
                               seed=2)
    assert (after.old_logprobs[after.loss_mask] - uniform).abs().max() < tolerance
    assert (after.versions[after.loss_mask] == 1).all()


def test_the_vllm_backend_assembles_the_torch_rollout_layout(tiny_model_dir):
    # The part of the vLLM backend that runs without vllm: per-sample token lists -> Rollout. Fed
    # the torch backend's own samples, it must rebuild the torch backend's tensors exactly.
    from recipe.generator import TorchGenerator
    from recipe.vllm_generator import assemble_rollout

    model, tokenizer = load_model_dir(tiny_model_dir)
    interruption = REGISTRIES["length_control"].build(
        {"name": "interruption", "min_thinking": 2, "max_thinking": 5, "answer_budget": 3})
    rollout = TorchGenerator(model, tokenizer).generate(PROMPTS, precision=FP32_HEAD, length_control=interruption,
                                                         max_new_tokens=12, seed=3)
    assert rollout.interrupted.any() and rollout.truncated.any() and not rollout.truncated.all()
    prompt_ids = [tokenizer(prompt).input_ids for prompt in PROMPTS]
    lengths = rollout.lengths.tolist()
    rebuilt = assemble_rollout(
        prompt_ids, [rollout.response_ids[row, :n].tolist() for row, n in enumerate(lengths)],
        [rollout.old_logprobs[row, :n].tolist() for row, n in enumerate(lengths)],
        [rollout.loss_mask[row, :n].tolist() for row, n in enumerate(lengths)],
        (~rollout.truncated).tolist(), rollout.interrupted.tolist(), tokenizer.pad_token_id, version=0)
    for field in ("input_ids", "attention_mask", "loss_mask", "old_logprobs", "lengths", "truncated", "interrupted",
                  "versions"):
        assert torch.equal(getattr(rebuilt, field), getattr(rollout, field)), field
    assert rebuilt.prompt_width == rollout.prompt_width
