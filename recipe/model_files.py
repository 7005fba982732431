"""A Hugging Face model directory checked before anything loads it: its config, architecture, files and size.

What `model.path` must hold for a run to load it, checked at plan time (torch-free, nothing of the model
imported or run) by the same rules the loader meets:
- config.json parses as a JSON object with a `model_type` transformers' AutoModelForCausalLM builds itself;
- no custom code: a config (or tokenizer config) with `auto_map` asks for Python files from the directory,
  which this project never runs (transformers would need trust_remote_code);
- the tokenizer files (tokenizer.json, or a sentencepiece tokenizer.model, or vocab.json + merges.txt, or
  vocab.txt) and the weights (safetensors or PyTorch .bin, whole or sharded with an index) are there;
- the parameter count: the safetensors headers' tensor shapes when there are any (exact), else the config's
  shape (recipe.memory.shape_of), so memory can be held against the machine (recipe.preflight).
Errors name `model.path`, the file and the fix; nothing of a file's content is echoed.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import math
import struct
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from components.registry import ConfigError

CONVERT = ("convert it to an architecture transformers ships (load it where you trust its code and save_pretrained "
           "it as, e.g., LlamaForCausalLM or Qwen2ForCausalLM)")
TOKENIZER_FILES = (("tokenizer.json",), ("tokenizer.model",), ("vocab.json", "merges.txt"), ("vocab.txt",))
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
SAFETENSORS_HEADER_LIMIT = 100 * 2**20  # a header past 100 MB is not a weights file's


def read_json_object(path: Path, key: str, what: str) -> dict[str, Any]:
    """A JSON object from a file of the model directory; one ConfigError line when it is not one."""
    fix = "re-save the model with save_pretrained, or restore the file"
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{key}: {path} is not a UTF-8 text file ({what}); {fix}") from None
    except json.JSONDecodeError as error:
        raise ConfigError(f"{key}: {path} is not valid JSON ({what}: {error.msg}, line {error.lineno}); "
                          f"{fix}") from None
    except RecursionError:
        raise ConfigError(f"{key}: {path} nests too deeply to be a {what}; {fix}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{key}: {path} holds a JSON {type(data).__name__}, not a {what} (an object); {fix}")
    return data


@functools.lru_cache(maxsize=1)
def causal_lm_model_types() -> frozenset[str] | None:
    """The model_type names AutoModelForCausalLM builds, read from transformers' own mapping as source text
    (importing transformers imports torch, which planning never does); None when it cannot be read."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        return None
    source = Path(list(spec.submodule_search_locations)[0]) / "models" / "auto" / "modeling_auto.py"
    try:
        tree = ast.parse(source.read_text())
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(target, "id", None) == "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"
                                                    for target in node.targets):
                return frozenset(name for name, _ in ast.literal_eval(node.value.args[0]))
    except (OSError, SyntaxError, ValueError, AttributeError, IndexError, TypeError):
        return None
    return None


def check_no_custom_code(config: dict[str, Any], directory: Path, key: str) -> None:
    tokenizer_config = directory / "tokenizer_config.json"
    tokenizer = read_json_object(tokenizer_config, key, "tokenizer config") if tokenizer_config.is_file() else {}
    for where, data in (("config.json", config), ("tokenizer_config.json", tokenizer)):
        if "auto_map" in data:
            raise ConfigError(f"{key}: {directory}'s {where} asks for custom code (auto_map): this project never runs "
                              f"code from a model directory; {CONVERT}")


def check_architecture(config: dict[str, Any], directory: Path, key: str) -> None:
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise ConfigError(f"{key}: {directory}/config.json has no model_type, so transformers cannot tell which "
                          f"architecture to build; re-save the model with save_pretrained")
    known = causal_lm_model_types()
    if known is not None and model_type not in known:
        shown = model_type if model_type.replace("_", "").replace("-", "").isalnum() and len(model_type) < 40 \
            else "(not shown)"
        raise ConfigError(f"{key}: {directory}/config.json names model_type {shown}, which the installed "
                          f"transformers does not build as a causal LM; {CONVERT}")


def check_files_present(directory: Path, key: str) -> None:
    if not any(all((directory / name).is_file() for name in names) for names in TOKENIZER_FILES):
        raise ConfigError(f"{key}: {directory} has no tokenizer (tokenizer.json, tokenizer.model, vocab.json + "
                          "merges.txt or vocab.txt); save the tokenizer beside the model (tokenizer.save_pretrained)")
    if not any((directory / name).is_file() for name in WEIGHT_FILES):
        raise ConfigError(f"{key}: {directory} has no weights ({', '.join(WEIGHT_FILES)}); save the model with "
                          "save_pretrained")


def safetensors_parameters(directory: Path, key: str) -> int | None:
    """Parameters in the directory's safetensors files, from their headers (8-byte length, then JSON); None
    when the weights are not safetensors."""
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for path in files:
        with open(path, "rb") as handle:
            head = handle.read(8)
            length = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
            if not 0 < length <= SAFETENSORS_HEADER_LIMIT:
                raise ConfigError(f"{key}: {path} is not a safetensors file (its header is damaged); re-save the model")
            try:
                header = json.loads(handle.read(length))
                total += sum(math.prod(entry["shape"]) for name, entry in header.items() if name != "__metadata__")
            except (ValueError, TypeError, KeyError, AttributeError):
                raise ConfigError(f"{key}: {path} is not a safetensors file (its header is damaged); "
                                  "re-save the model") from None
    return total


def config_parameters(config: dict[str, Any], directory: Path, key: str) -> int:
    """Parameters the config's shape implies (recipe.memory: a llama-style decoder's count)."""
    from recipe.memory import parameter_count, shape_of

    try:
        shape = shape_of(SimpleNamespace(**{name: value for name, value in config.items() if name.isidentifier()}))
        count = parameter_count(shape)
    except (AttributeError, TypeError, ZeroDivisionError):
        raise ConfigError(f"{key}: {directory}/config.json lacks the sizes of a decoder (hidden_size, "
                          "intermediate_size, num_hidden_layers, num_attention_heads, vocab_size as integers); "
                          "re-save the model with save_pretrained") from None
    if not isinstance(count, int) or count <= 0:
        raise ConfigError(f"{key}: {directory}/config.json gives sizes that are not positive integers; "
                          "re-save the model with save_pretrained")
    return count


@functools.lru_cache(maxsize=32)
def _checked(directory: str, mtime_ns: int, key: str) -> tuple[int, dict]:
    path = Path(directory)
    config = read_json_object(path / "config.json", key, "model config")
    check_no_custom_code(config, path, key)
    check_architecture(config, path, key)
    parameters = config_parameters(config, path, key)
    return parameters, config


def model_directory_parameters(directory: str | Path, key: str = "model.path") -> tuple[int, dict[str, Any]]:
    """(parameters its config implies, the config) of a model directory whose config, architecture and custom
    code were checked; files are checked by check_model_files once memory has been held against the size."""
    path = Path(directory)
    if not (path / "config.json").is_file():
        what = "no such directory" if not path.exists() else "not a model directory (no config.json)"
        raise ConfigError(f"{key}: got {str(directory)!r}, {what}; give a Hugging Face model directory "
                          "(save_pretrained), or `embedded` for the testbed's model")
    return _checked(str(path.resolve()), (path / "config.json").stat().st_mtime_ns, key)


def check_model_files(directory: str | Path, key: str = "model.path") -> int:
    """The tokenizer and weights files a run loads are there; returns the parameter count (the safetensors
    headers' when there are any, else the config's)."""
    path = Path(directory)
    parameters, config = model_directory_parameters(path, key)
    check_files_present(path, key)
    return safetensors_parameters(path, key) or parameters
