"""Peak memory of one native training step and of one decode against response length (issue 38).

    .venv/bin/python -m benchmarks.bench_train_memory [--lengths 512 1024 2048 4096] [--layers 2]
        [--modes before after checkpointed decode] [--out benchmarks/out/train_memory.json]

The model has Qwen2.5-1.5B's widths (hidden 1,536, MLP 8,960, 12 query and 2 key-value heads of 128,
a tied head over a 151,936-token vocabulary) and --layers decoder layers: every per-token tensor of the
real model, a fraction of its depth. Random weights, fp32 (the CPU's dtype), built from a transformers
config. Each point runs in a fresh process: a 16-token warm-up step allocates the gradients and AdamW's
state, then one step of one 64-token prompt with one T-token response (every token trained; CISPO,
prompt_mean, fp32 head, micro-batch = the row). The figure is the step's own memory: the process's
peak resident set during the step (VmHWM, reset through /proc/self/clear_refs before it) minus its
resident set just before it.

Modes:
  before        the trainer as it was before issue 38: attention over all response queries at once
                (TRAINING_QUERY_BLOCK 0) and the head's logits for the whole batch at once
                (HEAD_CHUNK_BYTES 0);
  after         attention in blocks of 512 queries and the head in 256 MB chunks, each recomputed in the
                backward (the defaults);
  checkpointed  after, with optimizer.gradient_checkpointing;
  decode        one row decoding T tokens with recipe.generator.generate (the shared-prefix cache), its
                peak over the resident set before the call. The vocabulary is the project's character
                one here: a decode step's logits are one row's whatever T is, and the 152k head would
                make 4k steps take minutes on CPU without changing the curve's slope.
The slope of each mode's curve (bytes per response token between the longest two lengths) and the ratio
of successive increments (2 for memory linear in T, 4 for quadratic) are printed and written to --out
with the machine, the date and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.common import REPO, cpu_model
QWEN2P5_1P5B = dict(hidden_size=1536, intermediate_size=8960, num_attention_heads=12, num_key_value_heads=2,
                    head_dim=128, vocab_size=151936)
PROMPT = 64


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM, the peak resident set (Linux >= 4.0)


def peak_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def build_model(layers: int, vocab: int | None = None):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    shape = {**QWEN2P5_1P5B, **({"vocab_size": vocab} if vocab else {})}
    config = Qwen2Config(**shape, num_hidden_layers=layers, max_position_embeddings=32768, tie_word_embeddings=True,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0)
    config._attn_implementation = "sdpa"
    return Qwen2ForCausalLM(config).float().eval()


def train_point(mode: str, T: int, layers: int) -> dict:
    import recipe.prefix_attention
    import recipe.trainer
    from bench_gpu import one_step, synthetic_batch  # the GPU bench's step (CISPO, prompt_mean, fp32 head)
    from recipe.run_config import OptimizerConfig
    from recipe.trainer import build_optimizer

    if mode == "before":
        recipe.prefix_attention.TRAINING_QUERY_BLOCK = 0
        recipe.trainer.HEAD_CHUNK_BYTES = 0
    model = build_model(layers)
    optimizer, schedule = build_optimizer(model, OptimizerConfig(lr=1e-7, warmup_steps=1))

    def step(batch):  # micro-batch 0: the one row at once
        return one_step(model, optimizer, schedule, batch, 0, checkpointing=mode == "checkpointed")

    step(synthetic_batch(model, 1, 1, PROMPT, 16))  # gradients and AdamW state exist from here on
    batch = synthetic_batch(model, 1, 1, PROMPT, T)
    before = rss_bytes()
    reset_peak()
    started = time.perf_counter()
    metrics = step(batch)
    seconds = time.perf_counter() - started
    return {"mode": mode, "response": T, "step_bytes": peak_bytes() - before, "resident_before": before,
            "seconds": round(seconds, 2), "grad_norm": metrics["train/grad_norm"]}


def decode_point(T: int, layers: int) -> dict:
    import torch

    from components import REGISTRIES
    from recipe.generator import generate
    from recipe.model import build_tokenizer

    class NeverEnds:
        """The project's tokenizer with no <eos> id, so a random model decodes all T tokens."""

        eos_token_id = -1

        def __init__(self, tokenizer):
            self.tokenizer = tokenizer

        def __getattr__(self, name):
            return getattr(self.tokenizer, name)

        def __call__(self, *args, **kwargs):
            return self.tokenizer(*args, **kwargs)

    tokenizer = NeverEnds(build_tokenizer())
    model = build_model(layers, vocab=len(tokenizer.tokenizer))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    control = REGISTRIES["length_control"].build({"name": "none"})
    precision = REGISTRIES["precision"].build({"name": "lm_head", "fp32_head": True})
    prompt = "1" * (PROMPT - 1) + "="
    generate(model, tokenizer, [prompt], precision=precision, length_control=control, max_new_tokens=8)
    before = rss_bytes()
    reset_peak()
    started = time.perf_counter()
    with torch.no_grad():
        rollout = generate(model, tokenizer, [prompt], precision=precision, length_control=control, max_new_tokens=T,
                           torch_rng=torch.Generator().manual_seed(0))
    return {"mode": "decode", "response": T, "tokens": int(rollout.lengths.sum()),
            "step_bytes": peak_bytes() - before, "resident_before": before,
            "seconds": round(time.perf_counter() - started, 2)}


def child(args) -> None:
    import torch

    torch.set_num_threads(args.threads)
    result = decode_point(args.point, args.layers) if args.mode == "decode" else \
        train_point(args.mode, args.point, args.layers)
    print(json.dumps(result))


def curve_summary(points: list[dict]) -> dict:
    """Bytes per response token between the longest two lengths, and each doubling's increment ratio."""
    done = sorted((p for p in points if "step_bytes" in p), key=lambda p: p["response"])
    if len(done) < 2:
        return {}
    (a, b) = done[-2], done[-1]
    increments = [q["step_bytes"] - p["step_bytes"] for p, q in zip(done, done[1:])]
    return {"bytes_per_token": round((b["step_bytes"] - a["step_bytes"]) / (b["response"] - a["response"])),
            "increment_ratios": [round(y / x, 2) if x > 0 else None for x, y in zip(increments, increments[1:])]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--modes", nargs="+", default=["before", "after", "checkpointed", "decode"],
                        choices=["before", "after", "checkpointed", "decode"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "train_memory.json"))
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--point", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:
        child(args)
        return 0
    results = {"machine": platform.processor() or platform.machine(), "cpu": cpu_model(),
               "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "load_before": os.getloadavg(),
               "layers": args.layers, "shape": QWEN2P5_1P5B, "prompt": PROMPT, "points": [], "summary": {}}
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": str(args.threads)}
    for mode in args.modes:
        for T in args.lengths:
            command = [sys.executable, "-m", "benchmarks.bench_train_memory", "--mode", mode, "--point", str(T),
                       "--layers", str(args.layers), "--threads", str(args.threads)]
            done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=REPO)
            if done.returncode == 0:
                point = json.loads(done.stdout.strip().splitlines()[-1])
            else:  # killed for memory (-9) is a finding: the curve stops there
                point = {"mode": mode, "response": T, "error": f"exit {done.returncode}: {done.stderr[-300:]}"}
            point["load"] = os.getloadavg()[0]
            results["points"].append(point)
            print(json.dumps(point), file=sys.stderr, flush=True)
            save(results, args.out)  # every point as it comes: a stopped run keeps what it measured
            if "error" in point:
                break
        results["summary"][mode] = curve_summary([p for p in results["points"] if p["mode"] == mode])
    results["load_after"] = os.getloadavg()
    save(results, args.out)
    print(f"{'mode':<13}" + "".join(f"{T:>12}" for T in args.lengths) + "   bytes/token  doubling ratios")
    for mode in args.modes:
        row = {p["response"]: p for p in results["points"] if p["mode"] == mode}
        cells = "".join(f"{row[T]['step_bytes'] / 2**20:>9.0f} MB" if T in row and "step_bytes" in row[T]
                        else f"{'-' if T not in row else 'failed':>12}" for T in args.lengths)
        summary = results["summary"][mode]
        print(f"{mode:<13}{cells}   {summary.get('bytes_per_token', '-'):>11}  {summary.get('increment_ratios', '-')}")
    return 0


def save(results: dict, out: str) -> None:
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    raise SystemExit(main())
