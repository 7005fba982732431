"""Tokenizer and model loading: the embedded model is an ordinary Hugging Face directory."""

from __future__ import annotations

import torch

from components.length_control import INTERRUPTION_PHRASE
from recipe.model import build_tokenizer, count_parameters, lm_parts, load_model_dir


def test_tokenizer_is_character_level_with_added_tokens():
    tokenizer = build_tokenizer()
    ids = tokenizer("12+3=<think>").input_ids
    assert ids[0] == tokenizer.bos_token_id
    assert len(ids) == 1 + 5 + 1  # <bos>, five characters, <think>
    text = "0912</think>Any text, even ~ and |"
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_interruption_phrase_costs_two_tokens():
    tokenizer = build_tokenizer()
    ids = tokenizer.encode(INTERRUPTION_PHRASE, add_special_tokens=False)
    assert len(ids) == 2  # the phrase, then </think>
    assert tokenizer.decode(ids) == INTERRUPTION_PHRASE
    # Another phrase still encodes, character by character.
    assert len(tokenizer.encode("Stop now.</think>", add_special_tokens=False)) == len("Stop now.") + 1


def test_saved_directory_loads_through_transformers(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model, tokenizer = load_model_dir(tiny_model_dir)
    assert type(model) is type(AutoModelForCausalLM.from_pretrained(tiny_model_dir))
    assert tokenizer.padding_side == "left" and tokenizer.pad_token_id is not None
    parts = lm_parts(model)
    hidden = parts.body(input_ids=torch.tensor([[1, 20, 21]])).last_hidden_state
    assert torch.allclose(parts.head(hidden), model(input_ids=torch.tensor([[1, 20, 21]])).logits, atol=1e-6)
    # Non-embedding parameters: everything but the input embedding table (the head is a matmul).
    embedding = model.get_input_embeddings().weight.numel()
    assert count_parameters(model) == sum(p.numel() for p in model.parameters()) - embedding
    # Tied (SmolLM2): the one matrix is the lookup and the head; it counts once, as the head.
    from transformers import LlamaConfig, LlamaForCausalLM

    shape = dict(vocab_size=100, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)
    tied = LlamaForCausalLM(LlamaConfig(**shape, tie_word_embeddings=True))
    untied = LlamaForCausalLM(LlamaConfig(**shape, tie_word_embeddings=False))
    assert tied.get_output_embeddings().weight is tied.get_input_embeddings().weight
    assert count_parameters(tied) == count_parameters(untied) == sum(p.numel() for p in untied.parameters()) - 1600
    # A bf16 model keeps fp32 parameters (AdamW's master weights) and runs its body in bf16.
    bf16, _ = load_model_dir(tiny_model_dir, dtype="bfloat16")
    assert next(bf16.parameters()).dtype == torch.float32
    bf16_parts = lm_parts(bf16)
    matmul_dtypes = []
    linear = next(module for module in bf16_parts.body.modules() if isinstance(module, torch.nn.Linear))
    linear.register_forward_hook(lambda module, inputs, output: matmul_dtypes.append(output.dtype))
    with bf16_parts.autocast():
        bf16_parts.body(input_ids=torch.tensor([[1, 20, 21]]))
    assert matmul_dtypes == [torch.bfloat16]
