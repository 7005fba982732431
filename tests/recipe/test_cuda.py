"""The CUDA path (marker gpu: `pytest -m gpu` on a machine with a GPU; skipped elsewhere)."""

from __future__ import annotations

import pytest
import torch

from components import REGISTRIES
from recipe.model import load_model_dir

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")]


def test_the_fp32_head_is_true_fp32_in_generator_and_trainer_on_cuda(tiny_model_dir, monkeypatch):
    from components import precision as precision_module
    from recipe.generator import TorchGenerator
    from recipe.trainer import sequence_logprobs

    model, tokenizer = load_model_dir(tiny_model_dir, dtype="bfloat16", device="cuda")
    assert next(model.parameters()).dtype == torch.float32  # master weights
    head_calls = []
    real_linear = torch.nn.functional.linear

    def spy_linear(hidden, weight, bias=None):
        logits = real_linear(hidden, weight, bias)
        if weight.shape == model.get_output_embeddings().weight.shape:
            head_calls.append((hidden.dtype, weight.dtype, logits.dtype, precision_module.tf32_off_now()))
        return logits

    monkeypatch.setattr(torch.nn.functional, "linear", spy_linear)
    matmul = torch.backends.cuda.matmul
    previous = matmul.fp32_precision
    matmul.fp32_precision = "tf32"  # TF32 on for everything else: the head must still be IEEE fp32
    try:
        precision = REGISTRIES["precision"].build({"name": "lm_head", "fp32_head": True})
        control = REGISTRIES["length_control"].build({"name": "none"})
        rollout = TorchGenerator(model, tokenizer).generate(["7+5=<think>"] * 8, precision=precision,
                                                            length_control=control, max_new_tokens=8)
        generator_calls = len(head_calls)
        logprobs, _ = sequence_logprobs(model, precision, rollout.input_ids, rollout.attention_mask,
                                        rollout.prompt_width)
    finally:
        matmul.fp32_precision = previous
    assert generator_calls > 0 and len(head_calls) > generator_calls  # both roles went through the head
    assert set(head_calls) == {(torch.float32, torch.float32, torch.float32, True)}
    gap = (logprobs - rollout.old_logprobs)[rollout.loss_mask].abs().max().item()
    assert gap < 2e-2  # bf16 body in both roles (autocast); the head itself is exact fp32


@pytest.mark.parametrize("off_policy", ["ppo_off_policy", "pipeline_rl"])
def test_the_tiny_recipe_trains_on_cuda(tiny_overrides, tmp_path, off_policy):
    from recipe.config import load_recipe
    from recipe.engines import train

    cfg = load_recipe(None, tiny_overrides(f"off_policy={off_policy}", "off_policy.k=2", "model.dtype=bfloat16",
                                           run_steps=4))
    records = train(cfg, tmp_path / "run", device="cuda")
    assert records[-1]["step"] == 4 and 0.0 <= records[-1]["eval/pass_rate"] <= 1.0


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_trainers_memory_modes_give_the_same_gradients_on_cuda(tiny_model_dir, dtype, monkeypatch):
    """On CUDA (bf16 autocast too): attention in query blocks, gradient checkpointing, the head in chunks
    and token micro-batches give the gradients of the whole batch at once (tests/recipe/test_trainer.py
    checks the same on CPU)."""
    import copy

    import recipe.prefix_attention
    import recipe.trainer
    from recipe.generator import generate
    from recipe.trainer import TrainBatch
    from tests.recipe.test_trainer import PROMPTS, step_recording_gradients

    model, tokenizer = load_model_dir(tiny_model_dir, dtype=dtype, device="cuda")
    precision = REGISTRIES["precision"].build({"name": "lm_head"})
    rollout = generate(model, tokenizer, [p for p in PROMPTS for _ in range(4)], precision=precision,
                       length_control=REGISTRIES["length_control"].build({"name": "none"}), max_new_tokens=10,
                       torch_rng=torch.Generator(device="cuda").manual_seed(0))
    group_ids = torch.arange(len(PROMPTS), device="cuda").repeat_interleave(4)
    batch = TrainBatch(rollout, torch.linspace(-1.5, 1.5, len(group_ids), device="cuda"), group_ids, version=0)
    whole, memory = copy.deepcopy(model), copy.deepcopy(model)
    monkeypatch.setattr(recipe.prefix_attention, "TRAINING_QUERY_BLOCK", 0)
    _, expected, _ = step_recording_gradients(whole, batch, precision, 0)
    monkeypatch.setattr(recipe.prefix_attention, "TRAINING_QUERY_BLOCK", 3)
    monkeypatch.setattr(recipe.trainer, "HEAD_CHUNK_BYTES", 4 * len(tokenizer) * 7)
    _, got, _ = step_recording_gradients(memory, batch, precision, 2, micro_batch_tokens=100,
                                         gradient_checkpointing=True)
    scale = max(float(g.abs().max()) for g in expected)
    tolerance = 1e-5 if dtype == "float32" else 2e-2  # bf16 body: other matmul shapes round differently
    assert scale > 0
    for a, b in zip(expected, got):
        torch.testing.assert_close(b, a, atol=tolerance * scale, rtol=tolerance * 10)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cuda_graph_decoding_replays_the_static_steps_exactly(tiny_model_dir, dtype, monkeypatch):
    """Decode steps replayed as CUDA graphs (recipe/static_decode.py) are the same kernels as the static
    steps launched one by one: the same tokens and bitwise the same logprobs; and the eager loop's
    samples (fp32: the same tokens; bf16: the same tokens where the rows have not yet diverged)."""
    import numpy as np

    import recipe.static_decode
    from recipe.generator import generate

    model, tokenizer = load_model_dir(tiny_model_dir, dtype=dtype, device="cuda")
    precision = REGISTRIES["precision"].build({"name": "lm_head", "fp32_head": True})
    interruption = REGISTRIES["length_control"].build(
        {"name": "interruption", "min_thinking": 2, "max_thinking": 5, "answer_budget": 3})
    prompts = ["07+05=<think>", "7+5=<think>", "19+01=<think>", "123+9=<think>"] * 4
    greedy = torch.arange(len(prompts), device="cuda") % 5 == 0
    monkeypatch.setattr(recipe.static_decode, "FIRST_VIEW", 4)  # several views and graphs in 12 tokens

    def run(**kwargs):
        return generate(model, tokenizer, prompts, precision=precision, length_control=interruption,
                        max_new_tokens=12, greedy=greedy, torch_rng=torch.Generator(device="cuda").manual_seed(7),
                        numpy_rng=np.random.default_rng(7), **kwargs)

    graphed = run(static_decode=True)
    monkeypatch.setattr(recipe.static_decode, "CUDA_GRAPHS", False)
    launched = run(static_decode=True)
    eager = run(static_decode=False)
    for key in ("input_ids", "loss_mask", "lengths", "truncated", "interrupted", "versions", "old_logprobs"):
        assert torch.equal(getattr(graphed, key), getattr(launched, key)), key
    if dtype == "float32":
        assert torch.equal(graphed.input_ids, eager.input_ids)
        assert (graphed.old_logprobs - eager.old_logprobs).abs().max() < 1e-4
    assert graphed.interrupted.any()
