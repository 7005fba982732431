"""Causal LMs and tokenizers: load any Hugging Face model directory, or build the tiny embedded one.

The embedded model is a llama-style causal LM built from a transformers config, with a real
`tokenizers` tokenizer: one token per printable ASCII character plus added tokens for `<think>`,
`</think>` and the interruption phrase. The phrase is one added token, so forced interruption
costs 2 tokens ("<phrase></think>") instead of ~80 characters, and any other phrase still encodes
character by character. It is saved as a normal HF directory, so one loader serves both.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import torch

from components.length_control import INTERRUPTION_PHRASE
from components.registry import ConfigError
from recipe.tasks import THINK_CLOSE, THINK_OPEN

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
PHRASE_TOKEN = INTERRUPTION_PHRASE[: -len(THINK_CLOSE)]  # "Okay, time is up. ... a final answer"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def build_tokenizer():
    """Character-level PreTrainedTokenizerFast; encode adds <bos>, decode concatenates the tokens."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = [PAD, BOS, EOS, UNK]
    chars = ["\n"] + [chr(c) for c in range(32, 127)]
    vocab = {token: index for index, token in enumerate(specials + chars)}
    core = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("(?m)."), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.add_special_tokens([AddedToken(t, normalized=False) for t in specials])
    # Non-special added tokens: they survive decode(skip_special_tokens=True), as in Qwen3.
    core.add_tokens([AddedToken(t, normalized=False, special=False) for t in (THINK_OPEN, THINK_CLOSE, PHRASE_TOKEN)])
    core.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, vocab[BOS])])
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token=BOS, eos_token=EOS, pad_token=PAD,
                                   unk_token=UNK, padding_side="left")


def build_embedded_model(cfg, tokenizer, seed: int):
    """A freshly initialised llama-style LM sized by cfg (run_config.ModelConfig)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_heads,
        max_position_embeddings=cfg.max_positions, tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def save_model_dir(model, tokenizer, path: str | Path) -> None:
    from transformers.utils import logging

    logging.disable_progress_bar()
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)


def load_model_dir(path: str | Path, dtype: str = "float32", device: str = "cpu"):
    """(model, tokenizer) from a Hugging Face directory; the tokenizer pads on the left for generation.

    `dtype` is the compute dtype of the model body. The parameters stay fp32 whatever it is: they
    are the optimizer's master weights, so AdamW's moments and updates are fp32 (bf16 parameters
    would round away small updates). A bf16/fp16 body runs under torch.autocast (LmParts.autocast);
    the LM head's dtype is the `precision` axis, computed outside autocast.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging

    logging.disable_progress_bar()
    if dtype not in DTYPES:
        raise ValueError(f"model.dtype: got {dtype!r}, expected one of {sorted(DTYPES)}")
    # Never the directory's own code (recipe.model_files refuses a config that asks for it before this point).
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, trust_remote_code=False)
    except (OSError, ValueError, KeyError, RuntimeError) as error:  # what a damaged or foreign directory raises
        raise ConfigError(f"model.path: {path} could not be loaded as a causal LM with its tokenizer "
                          f"({type(error).__name__}; no code from it was run); check it with `sweep plan`, or "
                          "re-save it with save_pretrained") from None
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = model.to(device)
    model.scalerl_compute_dtype = DTYPES[dtype]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


@dataclass
class LmParts:
    """The model split where the `precision` axis acts: body -> hidden states, head weight/bias."""

    body: torch.nn.Module
    head: torch.nn.Linear
    compute_dtype: torch.dtype = torch.float32

    def autocast(self, cache: bool = True):
        """The context the body runs in: autocast to the compute dtype, or nothing for fp32.

        cache False: each weight is cast where it is used, never kept. A decode step uses each weight
        once, so the cache saves nothing there, and a CUDA graph must not capture it (the cast weights
        it keeps would outlive the capture; recipe/static_decode.py).
        """
        if self.compute_dtype == torch.float32:
            return contextlib.nullcontext()
        device = next(self.body.parameters()).device
        return torch.autocast(device_type=device.type, dtype=self.compute_dtype, cache_enabled=cache)


def lm_parts(model) -> LmParts:
    head = model.get_output_embeddings()
    return LmParts(body=getattr(model, model.base_model_prefix), head=head,
                   compute_dtype=getattr(model, "scalerl_compute_dtype", torch.float32))


def count_parameters(model, non_embedding: bool = True) -> int:
    """Parameters that cost FLOPs per token: every weight except the input embedding lookup.

    With tied embeddings (SmolLM2) the one matrix is both the lookup and the LM head, and model.parameters()
    lists it once: it stays in, as the head's matmul (subtracting it dropped the head, 21% of SmolLM2-135M's
    per-token FLOPs)."""
    total = sum(p.numel() for p in model.parameters())
    if non_embedding:
        lookup, head = model.get_input_embeddings(), model.get_output_embeddings()
        if head is None or head.weight is not lookup.weight:
            total -= lookup.weight.numel()
    return total
