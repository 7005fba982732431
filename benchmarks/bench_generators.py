"""The torch generator against vLLM (issue 50), side by side in one invocation, each contender in a fresh process.

    .venv/bin/python -m benchmarks.bench_generators step   [--rounds 3 --steps 16 --warmup 8]
    .venv/bin/python -m benchmarks.bench_generators decode [--rounds 2 --rows 64 --tokens 256]
    .venv/bin/python -m benchmarks.bench_generators learn  [--seeds 0 1 2 --steps 160]

step:   the testbed's RL step, the ScaleRL recipe synchronous (PPO-off-policy-8: a round of 8 minibatches of
        32 prompts x 8 samples sampled together, then 8 optimizer steps), rollout.generator torch then vllm,
        alternating per round. Per step: generation (the round's sampling, a k-th to each step; vLLM's weight
        load included) and training seconds, generated tokens (forced ones included). No evaluation.
decode: a random-initialised Qwen2.5-0.5B shape (494 M parameters, the real 151,936-token vocabulary, the
        project's tokenizer for the prompts), fp32, `rows` x `tokens` new tokens sampled at temperature 1 by the
        project's torch generator, transformers' `generate` and vLLM (the CPU build), each after a short
        warm-up call. Tokens/s = rows x tokens / seconds of the measured call.
learn:  the ScaleRL base (PipelineRL-8, the demo's recipe) trained `--steps` steps per seed with each generator
        (`sweep train`), the held-out pass rate at every evaluation step; resumable (a finished run is read back).

Every part records the machine, the date and the load average before and after each contender. Output: JSON on
stdout and in benchmarks/out/bench_generators_<part>.json, then a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import OUT, REPO, loadavg, machine

# Qwen2.5-0.5B's shape (its config.json), random weights: what a decode step costs at that size.
QWEN25_0P5B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                   num_key_value_heads=2, vocab_size=151936, max_position_embeddings=1024, tie_word_embeddings=True,
                   rope_theta=1000000.0, rms_norm_eps=1e-6)


def child(args: list[str]) -> dict:
    """Run this script's --child mode in a fresh process (2 torch threads) and return its JSON."""
    env = {**os.environ, "OMP_NUM_THREADS": "2", "PYTHONPATH": str(REPO)}
    before = loadavg()
    result = subprocess.run([sys.executable, "-m", "benchmarks.bench_generators", "--child", *args], env=env,
                            capture_output=True, text=True, timeout=3600, cwd=REPO)
    if result.returncode != 0:
        raise RuntimeError(f"child {args} failed: {result.stderr[-3000:]}")
    record = json.loads(result.stdout.strip().splitlines()[-1])
    record["load_before"], record["load_after"] = before, loadavg()
    return record


# ------------------------------------------------------------------------------------------------- step

def step_child(generator: str, steps: int, warmup: int) -> dict:
    import torch

    from recipe.config import load_recipe
    from recipe.run import Run, assemble_minibatch, sample_round, train_on

    torch.set_num_threads(2)
    cfg = load_recipe(None, ["off_policy=ppo_off_policy", f"rollout.generator={generator}", "tracking.mlflow=false",
                             f"max_steps={steps + warmup}"])
    with tempfile.TemporaryDirectory() as run_dir:
        run = Run(cfg, Path(run_dir), "cpu", devices=2)
        run.generator  # the engine's start is not a step's cost
        k = run.c.off_policy.k
        records = []
        while run.step < cfg.max_steps:
            orders = [run.c.curriculum.sample(cfg.rollout.prompts_per_batch) for _ in range(k)]
            started = time.perf_counter()
            round_ = sample_round(run.generator, run.task, run.c, cfg, orders, run.rngs, policy_version=run.step)
            generation = (time.perf_counter() - started) / k
            for samples in round_:
                minibatch = assemble_minibatch(samples, run.c)
                started = time.perf_counter()
                train_on(minibatch, run.step, run)
                records.append({"generation_s": generation, "training_s": time.perf_counter() - started,
                                "generated_tokens": int(samples.rollout.lengths.sum())})
                run.step += 1
    measured = records[warmup:]
    return {"generator": generator, "steps": measured}


def step_part(options) -> dict:
    runs = {"torch": [], "vllm": []}
    for round_ in range(options.rounds):
        for generator in ("torch", "vllm"):
            print(f"round {round_ + 1}/{options.rounds}: {generator}", file=sys.stderr, flush=True)
            runs[generator].append(child(["step", generator, str(options.steps), str(options.warmup)]))
    summary = {}
    for generator, records in runs.items():
        steps = [s for record in records for s in record["steps"]]
        seconds = [s["generation_s"] + s["training_s"] for s in steps]
        generation = sum(s["generation_s"] for s in steps)
        summary[generator] = {
            "s_per_step": statistics.median(seconds), "s_per_step_rounds": [
                statistics.median(s["generation_s"] + s["training_s"] for s in r["steps"]) for r in records],
            "generation_s_per_step": generation / len(steps),
            "training_s_per_step": sum(s["training_s"] for s in steps) / len(steps),
            "generated_tokens_per_s": sum(s["generated_tokens"] for s in steps) / generation,
            "loads": [(r["load_before"], r["load_after"]) for r in records]}
    summary["vllm_over_torch_s_per_step"] = summary["vllm"]["s_per_step"] / summary["torch"]["s_per_step"]
    return summary


# ------------------------------------------------------------------------------------------------- decode

def decode_child(contender: str, model_dir: str, rows: int, tokens: int) -> dict:
    import numpy as np
    import torch

    from components import REGISTRIES
    from recipe.model import load_model_dir

    torch.set_num_threads(2)
    model, tokenizer = load_model_dir(model_dir)
    prompts = [f"{row % 97}+{row % 89}=<think>" for row in range(rows)]
    precision = REGISTRIES["precision"].build({"name": "lm_head", "fp32_head": True})
    control = REGISTRIES["length_control"].build({"name": "none"})

    if contender == "hf_generate":
        def run(n_rows: int, n_tokens: int) -> int:
            encoded = tokenizer(prompts[:n_rows], return_tensors="pt", padding=True)
            with torch.no_grad():
                out = model.generate(**encoded, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                     max_new_tokens=n_tokens, min_new_tokens=n_tokens)
            return int((out.shape[1] - encoded.input_ids.shape[1]) * n_rows)
    else:
        if contender == "vllm":
            from recipe.vllm_generator import VllmGenerator, start_engine

            generator = VllmGenerator(start_engine(model_dir, device=torch.device("cpu"), max_model_len=tokens + 64,
                                                   cpu_kv_cache_gib=4), model, tokenizer)
        else:
            from recipe.generator import TorchGenerator

            generator = TorchGenerator(model, tokenizer)

        def run(n_rows: int, n_tokens: int) -> int:
            rollout = generator.generate(prompts[:n_rows], precision=precision, length_control=control,
                                         max_new_tokens=n_tokens, torch_rng=torch.Generator().manual_seed(n_rows),
                                         numpy_rng=np.random.default_rng(0))
            return int(rollout.lengths.sum())

    run(4, 8)  # warm-up: kernels, caches, the engine's first call
    started = time.perf_counter()
    generated = run(rows, tokens)
    seconds = time.perf_counter() - started
    return {"contender": contender, "seconds": seconds, "generated_tokens": generated,
            "tokens_per_s": generated / seconds}


def decode_part(options) -> dict:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    import torch


    work = Path(tempfile.mkdtemp(prefix="bench_generators_"))
    model_dir = work / "qwen25-0.5b-random"
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**QWEN25_0P5B))
    model.save_pretrained(model_dir)
    shipped = next((REPO / "recipe" / "warm_starts").iterdir())  # the project's tokenizer, beside the shipped model
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (model_dir / name).write_bytes((shipped / name).read_bytes())
    parameters = sum(p.numel() for p in model.parameters())
    del model
    runs = []
    for round_ in range(options.rounds):
        for contender in ("torch", "hf_generate", "vllm"):
            print(f"round {round_ + 1}/{options.rounds}: {contender}", file=sys.stderr, flush=True)
            runs.append(child(["decode", contender, str(model_dir), str(options.rows), str(options.tokens)]))
    summary = {"model": "Qwen2.5-0.5B shape, random init, fp32", "parameters": parameters,
               "rows": options.rows, "new_tokens": options.tokens, "runs": runs}
    for contender in ("torch", "hf_generate", "vllm"):
        rates = [r["tokens_per_s"] for r in runs if r["contender"] == contender]
        summary[contender] = {"tokens_per_s": statistics.median(rates), "rounds": rates}
    return summary


# ------------------------------------------------------------------------------------------------- learn

def learn_part(options) -> dict:
    from recipe.tracking import read_metrics

    root = OUT / "bench_generators_learn"
    curves = {}
    for generator in ("torch", "vllm"):
        for seed in options.seeds:
            run_dir = root / f"{generator}-seed{seed}"
            if not (run_dir / "done.json").exists():
                print(f"train {generator} seed {seed}", file=sys.stderr, flush=True)
                before = loadavg()
                started = time.perf_counter()
                subprocess.run([str(REPO / ".venv" / "bin" / "sweep"), "train", f"rollout.generator={generator}",
                                f"seed={seed}", f"max_steps={options.steps}", "tracking.mlflow=false",
                                "--run-dir", str(run_dir)], check=True, env={**os.environ, "OMP_NUM_THREADS": "2"},
                               capture_output=True)
                (run_dir / "done.json").write_text(json.dumps({"wall_s": time.perf_counter() - started,
                                                               "load_before": before, "load_after": loadavg()}))
            records = read_metrics(run_dir)
            curves.setdefault(generator, {})[seed] = {r["step"]: (r["eval/pass_rate"], r["eval/pass_rate_se"])
                                                      for r in records}
            curves[generator][seed]["info"] = json.loads((run_dir / "done.json").read_text())
    steps = sorted(set.intersection(*[{s for s in c if s != "info"} for g in curves.values() for c in g.values()]))
    # The difference of the two generators' seed means, against its standard error: the seeds' spread (sd / sqrt
    # n each) and the evaluation's sampling error. Every run of one generator scores with the same evaluation
    # draws (eval.seed 0: common random numbers), so that error is shared by its seeds, not averaged away, and
    # the two generators draw differently (vLLM samples with its own random numbers): each adds its se whole.
    n = len(options.seeds)
    table = []
    for step in steps:
        row = {"step": step}
        for generator, by_seed in curves.items():
            values = [by_seed[seed][step][0] for seed in options.seeds]
            row[generator] = {"mean": statistics.mean(values), "sd": statistics.stdev(values) if n > 1 else 0.0,
                              "eval_se": statistics.mean(by_seed[seed][step][1] for seed in options.seeds),
                              "values": values}
        se = (sum(row[g]["sd"] ** 2 / n + row[g]["eval_se"] ** 2 for g in ("torch", "vllm"))) ** 0.5
        row["difference"], row["se"] = row["vllm"]["mean"] - row["torch"]["mean"], se
        row["within_2_se"] = abs(row["difference"]) <= 2 * se
        table.append(row)
    return {"seeds": options.seeds, "steps": options.steps, "table": table,
            "info": {g: {s: c[s]["info"] for s in c} for g, c in curves.items()}}


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        part, *rest = sys.argv[2:]
        if part == "step":
            print(json.dumps(step_child(rest[0], int(rest[1]), int(rest[2]))))
        else:
            print(json.dumps(decode_child(rest[0], rest[1], int(rest[2]), int(rest[3]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=("step", "decode", "learn"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=8)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    options = parser.parse_args()
    if options.part == "learn" and options.steps == 16:
        options.steps = 160
    result = {"machine": machine(), "part": options.part,
              **{"step": step_part, "decode": decode_part, "learn": learn_part}[options.part](options)}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"bench_generators_{options.part}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k not in ("runs", "table")}, indent=2))
    for row in result.get("table", []):
        print(row["step"], {g: round(row[g]["mean"], 3) for g in ("torch", "vllm")}, f"diff {row['difference']:+.3f}",
              f"se {row['se']:.3f}", "within 2 se:", row["within_2_se"])


if __name__ == "__main__":
    main()
