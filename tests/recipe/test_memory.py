"""recipe/memory.py against the code's own accounting: the bytes autograd saves in the trainer's forward,
the parameters a model has, the generator's key/value buffers. docs/memory.md's table is built from
these figures (scripts/docs_memory_table.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

import recipe.generator
import recipe.prefix_attention
from components import REGISTRIES
from recipe import memory
from recipe.generator import generate
from recipe.trainer import sequence_logprobs

FAMILIES = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
            "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
            "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM)}


def tiny_model(family: str, layers: int, hidden=64, intermediate=176, heads=4, kv_heads=2, head_dim=24, vocab=96):
    """A random model of the family; head_dim x heads != hidden so the q and h terms are told apart."""
    config_class, model_class = FAMILIES[family]
    config = config_class(hidden_size=hidden, intermediate_size=intermediate, num_attention_heads=heads,
                          num_key_value_heads=kv_heads, head_dim=head_dim, num_hidden_layers=layers, vocab_size=vocab,
                          tie_word_embeddings=True, max_position_embeddings=2048)
    torch.manual_seed(0)
    return model_class(config)


def saved_bytes(model, compute_dtype: torch.dtype, response: int, prompt: int = 16, checkpointing=False) -> int:
    """Bytes of the distinct storages autograd saves for the backward of the trainer's forward (weights aside)."""
    model.scalerl_compute_dtype = compute_dtype
    precision = REGISTRIES["precision"].build({"name": "lm_head", "fp32_head": True})
    ids = torch.randint(0, model.config.vocab_size, (1, prompt + response), generator=torch.Generator().manual_seed(0))
    storages = {}

    def keep(tensor):
        storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        sequence_logprobs(model, precision, ids, torch.ones_like(ids), prompt, gradient_checkpointing=checkpointing)
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(size for pointer, size in storages.items() if pointer not in weights)


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_bytes_kept_per_token_and_layer_are_what_the_trainer_saves(family, dtype, monkeypatch):
    # Queries in blocks of 32 (the default is 512): the blocked, recomputed path at short lengths.
    monkeypatch.setattr(recipe.prefix_attention, "TRAINING_QUERY_BLOCK", 32)
    torch_dtype = getattr(torch, dtype)
    measured = {}
    for layers in (1, 2):
        model = tiny_model(family, layers)
        measured[layers] = (saved_bytes(model, torch_dtype, 256) - saved_bytes(model, torch_dtype, 128)) / 128
    shape = memory.shape_of(model.config)
    assert measured[2] - measured[1] == memory.layer_activation_bytes(shape, dtype)
    # Outside the layers: a_rest plus the head's fp32 logits, which a batch this small computes in one chunk.
    assert 2 * measured[1] - measured[2] == memory.rest_activation_bytes(shape) + 4 * shape.vocab


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_with_checkpointing_a_layer_keeps_its_fp32_input(dtype, monkeypatch):
    monkeypatch.setattr(recipe.prefix_attention, "TRAINING_QUERY_BLOCK", 32)
    per_layer = {}
    for layers in (1, 2):
        model = tiny_model("qwen3", layers)
        per_layer[layers] = (saved_bytes(model, getattr(torch, dtype), 256, checkpointing=True)
                             - saved_bytes(model, getattr(torch, dtype), 128, checkpointing=True)) / 128
    shape = memory.shape_of(model.config)
    assert per_layer[2] - per_layer[1] == 4 * shape.hidden
    assert memory.activation_bytes_per_token(shape, dtype, gradient_checkpointing=True) == (
        shape.layers * 4 * shape.hidden + memory.rest_activation_bytes(shape))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_parameter_count_is_the_models(family):
    model = tiny_model(family, 3)
    shape = memory.shape_of(model.config)
    assert memory.parameter_count(shape) == sum(p.numel() for p in model.parameters())
    linear = sum(m.weight.numel() + (m.bias.numel() if m.bias is not None else 0)
                 for m in model.model.layers.modules() if isinstance(m, torch.nn.Linear))
    assert memory.linear_parameters(shape) == linear
    assert shape.qkv_bias == (family == "qwen2") and shape.qk_norm == (family == "qwen3")


def test_the_table_shapes_have_their_published_sizes():
    # Parameter counts the model cards give (billions, rounded as they round).
    published = {"Qwen2.5-0.5B": 0.49, "Qwen2.5-1.5B": 1.54, "Qwen2.5-3B": 3.09, "Qwen2.5-7B": 7.61,
                 "Qwen3-1.7B": 1.7, "Qwen3-4B": 4.0, "Qwen3-8B": 8.2}
    for shape in memory.TABLE_SHAPES:
        assert memory.parameter_count(shape) / 1e9 == pytest.approx(published[shape.name], abs=0.03), shape.name


def test_kv_cache_per_token_is_the_generators_buffers():
    model = tiny_model("qwen3", 2, vocab=64)
    from recipe.model import build_tokenizer

    tokenizer = build_tokenizer()
    model.resize_token_embeddings(len(tokenizer))
    model.config.eos_token_id, model.config.pad_token_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    caches = []
    original = recipe.prefix_attention.SharedPrefixCache.__init__

    def record(self, *args, **kwargs):
        original(self, *args, **kwargs)
        caches.append(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(recipe.prefix_attention.SharedPrefixCache, "__init__", record)
        patch.setattr(recipe.generator, "COMPACT_FRACTION", 2.0)  # all 4 rows stay: the buffers are theirs
        patch.setattr(recipe.prefix_attention, "PREALLOCATE_FROM_TOKENS", 0)  # buffers at any length
        generate(model, tokenizer, ["12+34=<think>"] * 4, precision=REGISTRIES["precision"].build({"name": "lm_head"}),
                 length_control=REGISTRIES["length_control"].build({"name": "none"}), max_new_tokens=12,
                 torch_rng=torch.Generator().manual_seed(0), numpy_rng=np.random.default_rng(0))
    (cache,) = caches
    shape = memory.shape_of(model.config)
    response_bytes = sum(k.untyped_storage().nbytes() + v.untyped_storage().nbytes()
                         for k, v in zip(cache.response_keys, cache.response_values))
    assert response_bytes == 4 * cache.capacity * memory.kv_cache_bytes_per_token(shape, "float32")


def test_longest_response_is_the_longest_that_fits():
    shape = memory.QWEN2P5_1P5B
    device = 80 * 10**9
    longest = memory.longest_response(shape, device)
    assert longest % 1024 == 0 and longest > 0
    assert memory.training_step_bytes(shape, longest, prompt_tokens=1024) <= device
    assert memory.training_step_bytes(shape, longest + 1024, prompt_tokens=1024) > device
    assert memory.longest_response(memory.QWEN3_8B, device) == 0  # its trainer state alone is 131 GB


def test_the_docs_memory_table_is_the_one_computed_here():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "memory.md").read_text()
    assert memory.memory_table() in page  # scripts/docs_memory_table.py rewrites it
