"""PipelineRL's weight channel at a real model's shape on CPU: bytes, publish and receive time, and how long
the generator waits when it asks for weights during a publish, old channel vs new.

    .venv/bin/python benchmarks/bench_publish.py [--layers 28] [--dtype bfloat16] [--repeats 3]
        [--old-commit 72a428b] [--out benchmarks/out/bench_publish.json]

The model is Qwen2.5-1.5B's shape (hidden 1536, intermediate 8960, 12 heads, 2 key/value heads,
vocabulary 151,936, tied embeddings, 28 layers), random weights in fp32 (the trainer's master weights),
with the recipe's compute dtype. The old channel is recipe/engines/pipeline.py's SharedMemoryWeights
at --old-commit (one fp32 copy under one lock); the new one is this tree's (two slots, the Linear
weights in the compute dtype). For each: the bytes of one published copy, the median seconds of a
publish and of a receive into a second model, and the wait: a receive started 30% into a publish,
timed from its start to its return (the old channel makes it wait for the publish to finish).
Run it alone: it holds ~6 GB of model twice plus the channels in memory and /dev/shm.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def qwen_shaped(layers: int, dtype: str):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=1536, intermediate_size=8960, num_attention_heads=12, num_key_value_heads=2,
                         vocab_size=151936, num_hidden_layers=layers, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.float32)
    model.scalerl_compute_dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]
    return model


def old_channel_class(commit: str):
    """SharedMemoryWeights as it was at `commit` (its module loaded from git, beside this tree's)."""
    source = subprocess.run(["git", "show", f"{commit}:recipe/engines/pipeline.py"], cwd=REPO, check=True,
                            capture_output=True, text=True).stdout
    path = Path("/tmp") / f"old_pipeline_{commit}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"old_pipeline_{commit}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module.SharedMemoryWeights


def measure(channel_class, trainer, generator, repeats: int) -> dict:
    import torch

    channel = channel_class(torch.multiprocessing.get_context("spawn"))
    created = channel.create(trainer)
    copy = created[0] if isinstance(created, list) else created
    published_bytes = sum(t.numel() * t.element_size() for t in copy.values())
    publishes, receives, waits = [], [], []
    for version in range(repeats):
        started = time.perf_counter()
        channel.publish(trainer, version)
        publishes.append(time.perf_counter() - started)
        started = time.perf_counter()
        channel.receive(generator)
        receives.append(time.perf_counter() - started)
        writer = threading.Thread(target=channel.publish, args=(trainer, version + 100))
        writer.start()
        time.sleep(0.3 * publishes[-1])  # well into the publish's copy
        started = time.perf_counter()
        channel.receive(generator)
        waits.append(time.perf_counter() - started)
        writer.join()
    del channel, created, copy
    return {"published_bytes": published_bytes, "publish_s": statistics.median(publishes),
            "receive_s": statistics.median(receives), "receive_during_publish_s": statistics.median(waits)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=28)
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--old-commit", default="72a428b")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "bench_publish.json"))
    args = parser.parse_args(argv)
    import torch

    from bench_speed import cpu_model
    from recipe.engines.pipeline import SharedMemoryWeights

    torch.set_num_threads(2)
    load_before = os.getloadavg()[0]
    print(f"building a Qwen2.5-1.5B-shaped model, {args.layers} layers (twice) ...", file=sys.stderr, flush=True)
    trainer, generator = qwen_shaped(args.layers, args.dtype), qwen_shaped(args.layers, args.dtype)
    parameters = sum(p.numel() for p in trainer.parameters())
    result = {"date": datetime.now(timezone.utc).isoformat(timespec="minutes"), "cpu": cpu_model(),
              "load_before": load_before, "parameters": parameters, "layers": args.layers, "dtype": args.dtype,
              "old_commit": args.old_commit}
    for name, channel_class in (("old", old_channel_class(args.old_commit)), ("new", SharedMemoryWeights)):
        print(f"{name} channel ...", file=sys.stderr, flush=True)
        result[name] = measure(channel_class, trainer, generator, args.repeats)
        print(json.dumps({name: result[name]}), flush=True)
    result["load_after"] = os.getloadavg()[0]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"\n{parameters / 1e9:.2f}B parameters, compute dtype {args.dtype} ({result['cpu']}, load "
          f"{load_before:.1f} -> {result['load_after']:.1f})")
    print(f"{'':<28}{'old':>10}{'new':>10}")
    for key, scale, unit in (("published_bytes", 2**30, "GiB"), ("publish_s", 1, "s"), ("receive_s", 1, "s"),
                             ("receive_during_publish_s", 1, "s")):
        print(f"{key + ' (' + unit + ')':<28}{result['old'][key] / scale:>10.2f}{result['new'][key] / scale:>10.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
