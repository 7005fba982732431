"""The generator/trainer logprob mismatch on the embedded testbed, fp32 head against bf16 head (issue 52).

    .venv/bin/python benchmarks/bench_testbed_mismatch.py [--prompts 128 --samples 8 --threads 1]

The FP32-head axis acts through the mismatch between the behaviour logprobs the generator records and the
trainer's recomputation of them (ScaleRL: bf16 logits make the two disagree). Three numerics, each with the
head in fp32 and in bf16 (in both roles, as `precision.fp32_head` sets it):
  fp32 body       the testbed as shipped: generator and trainer in fp32;
  bf16 body       `model.dtype: bfloat16`: both roles under bf16 autocast (fp32 master weights);
  bf16 generator  the generator under bf16 autocast, the trainer in fp32: an inference engine whose numerics
                  differ from the trainer's, as vLLM in bf16 against an fp32 trainer (set here by switching the
                  model's compute dtype between the two roles; the recipe has no such setting).
The shipped warm start, the base's interruption and sampling (32 x 8 at temperature 1, up to 24 tokens); the
trainer recomputes in its own minibatches (recipe.run.select_rows) with autograd on. Per case: |trainer -
behaviour| mean, p99 and max over the sampled tokens, and the sd of the importance ratio exp(trainer - behaviour).
Output: a table on stdout, JSON in benchmarks/out/bench_testbed_mismatch.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
OUT = REPO / "benchmarks" / "out"

from benchmarks.bench_generators import load, machine  # noqa: E402
from benchmarks.bench_smollm2 import gap_summary, trainer_gap  # noqa: E402

CASES = {"fp32 body": ("float32", "float32"), "bf16 body": ("bfloat16", "bfloat16"),
         "bf16 generator": ("bfloat16", "float32")}  # name -> (generator's compute dtype, trainer's)


def mismatch(options) -> dict:
    import numpy as np
    import torch

    from components import REGISTRIES
    from recipe.config import load_recipe
    from recipe.generator import TorchGenerator
    from recipe.model import load_model_dir
    from recipe.run import model_directory
    from recipe.tasks import build_task

    torch.set_num_threads(options.threads)
    cfg = load_recipe(None, [])
    model, tokenizer = load_model_dir(model_directory(cfg), "float32")
    task = build_task(cfg.task, tokenizer)
    prompts = [p.prompt for p in task.validation[:options.prompts] for _ in range(options.samples)]
    control = REGISTRIES["length_control"].build(dict(cfg.length_control))
    results = {}
    for case, (generator_dtype, trainer_dtype) in CASES.items():
        for fp32_head in (True, False):
            precision = REGISTRIES["precision"].build({"name": "lm_head", "fp32_head": fp32_head})
            model.scalerl_compute_dtype = getattr(torch, generator_dtype)  # recipe.model.lm_parts reads it
            rollout = TorchGenerator(model, tokenizer).generate(
                prompts, precision=precision, length_control=control, max_new_tokens=cfg.rollout.max_new_tokens,
                temperature=cfg.rollout.temperature, torch_rng=torch.Generator().manual_seed(0),
                numpy_rng=np.random.default_rng(0), policy_version=0)
            model.scalerl_compute_dtype = getattr(torch, trainer_dtype)
            minibatch = cfg.rollout.prompts_per_batch * cfg.rollout.samples_per_prompt  # one PPO minibatch
            gap = trainer_gap(model, precision, rollout, minibatch, cfg.rollout.temperature)
            label = f"{case}, {'fp32' if fp32_head else 'bf16'} head"
            results[label] = gap_summary(gap)
            print(label, results[label], file=sys.stderr)
    model.scalerl_compute_dtype = torch.float32
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    options = parser.parse_args()
    result = {"machine": machine(), "load_before": load(), "prompts": options.prompts, "samples": options.samples,
              "results": mismatch(options), "load_after": load()}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "bench_testbed_mismatch.json").write_text(json.dumps(result, indent=2))
    print(f"{'case':<32} {'tokens':>7} {'mean':>8} {'p99':>7} {'max':>7} {'ratio sd':>9}")
    for label, r in result["results"].items():
        print(f"{label:<32} {r['tokens']:>7} {r['gap_mean']:>8.5f} {r['gap_p99']:>7.4f} {r['gap_max']:>7.4f} "
              f"{r['ratio_sd']:>9.5f}")


if __name__ == "__main__":
    main()
