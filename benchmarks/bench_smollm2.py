"""SmolLM2-135M-Instruct in the loop (issue 51): the generator/trainer mismatch, and the base recipe's learning.

    .venv/bin/python -m benchmarks.bench_smollm2 mismatch [--prompts 16 --samples 4]
    .venv/bin/python -m benchmarks.bench_smollm2 learn [--sweep runs/scalerl-loo-smollm2]

mismatch: the real model with a bf16 body (fp32 master weights under autocast, as the recipe trains it), its
          word problems sampled by the torch generator and by vLLM (the CPU build, bf16), each with the fp32 head
          and with the bf16 head; the trainer recomputes every sampled token's logprob with the same weights and
          head. Per generator and head: |behaviour - trainer| mean, p99 and max over the sampled tokens, and the
          spread of the importance ratio exp(trainer - behaviour) (the paper's mechanism behind its FP32-head
          result: a mismatch the ratio then corrects or clips).
learn:    the runs of `sweep run sweeps/loo-smollm2.yaml`, read back (its base at 2 seeds is the learning curve,
          its length-penalty variant the length under the other control); per evaluation: compute, held-out
          pass rate (with its standard error), mean response length, interrupted and truncated shares, the
          logprob mismatch; and each job's time split (generation, training, evaluation) from the compute meter.

Output: JSON on stdout and in benchmarks/out/bench_smollm2_<part>.json, then a table. Machine, date and load
are recorded.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import OUT, REPO, loadavg, machine


def mismatch(options) -> dict:
    """Each head in its own process: vLLM's engine tears down its process groups when it closes, and a second
    engine in the same process then fails ("pipeline model parallel group is not initialized")."""
    if len(options.heads) > 1:
        results = {}
        for head in options.heads:
            command = [sys.executable, "-m", "benchmarks.bench_smollm2", "mismatch", "--heads", head,
                       "--prompts", str(options.prompts), "--samples", str(options.samples),
                       "--threads", str(options.threads),
                       "--temperature", str(options.temperature), "--minibatches", str(options.minibatches),
                       *([] if options.vllm else ["--no-vllm"])]
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
            results.update(json.loads((OUT / f"bench_smollm2_mismatch_{head}.json").read_text())["results"])
        return {**mismatch_settings(options), "results": results}
    return {**mismatch_settings(options), "results": mismatch_one_head(options, options.heads[0] == "fp32")}


def mismatch_settings(options) -> dict:
    return {"model": "SmolLM2-135M-Instruct, bf16 body (fp32 master weights)", "task": "word_problems, 1 digit",
            "prompts": options.prompts, "samples": options.samples, "temperature": options.temperature,
            "minibatches": options.minibatches}


def mismatch_one_head(options, fp32_head: bool) -> dict:
    import numpy as np
    import torch

    from components import REGISTRIES
    from recipe.config import load_recipe
    from recipe.generator import TorchGenerator
    from recipe.model import load_model_dir
    from recipe.run import model_directory
    from recipe.tasks import build_task

    torch.set_num_threads(options.threads)
    cfg = load_recipe(None, ["model.path=smollm2-135m-instruct", "model.dtype=bfloat16", "task.name=word_problems",
                             "task.min_digits=1", "task.max_digits=1"])
    model_dir = model_directory(cfg)
    model, tokenizer = load_model_dir(model_dir, "bfloat16")
    task = build_task(cfg.task, tokenizer)
    prompts = [p.prompt for p in task.validation[:options.prompts] for _ in range(options.samples)]
    # The LOO's interruption and response budget (sweeps/loo-smollm2.yaml).
    control = REGISTRIES["length_control"].build({"name": "interruption", "min_thinking": 32, "max_thinking": 48,
                                                  "answer_budget": 8})
    results = {}
    precision = REGISTRIES["precision"].build({"name": "lm_head", "fp32_head": fp32_head})
    generators = {"torch": TorchGenerator(model, tokenizer)}
    if options.vllm:
        from recipe.vllm_generator import VllmGenerator, start_engine

        engine = start_engine(str(model_dir), device=torch.device("cpu"), dtype="bfloat16", fp32_head=fp32_head,
                              max_model_len=1024)
        generators["vllm"] = VllmGenerator(engine, model, tokenizer)
    for name, generator in generators.items():
        started = time.perf_counter()
        rollout = generator.generate(prompts, precision=precision, length_control=control, max_new_tokens=64,
                                     temperature=options.temperature, torch_rng=torch.Generator().manual_seed(0),
                                     numpy_rng=np.random.default_rng(0), policy_version=0)
        seconds = time.perf_counter() - started
        gap = trainer_gap(model, precision, rollout, len(prompts) // options.minibatches, options.temperature)
        label = f"{name}, {'fp32' if fp32_head else 'bf16'} head"
        results[label] = {"seconds": seconds, **gap_summary(gap)}
        print(label, results[label], file=sys.stderr)
        if name == "vllm":
            generator.close()
    return results


def trainer_gap(model, precision, rollout, rows_per_minibatch: int, temperature: float):
    """trainer - behaviour logprob of every sampled token, as the trainer computes it: a minibatch at a time
    (PPO-off-policy-k trains a rollout in k minibatches), each cut to its own width by recipe.run.select_rows
    (prompt columns that are padding in all its rows go: bf16 rounds a narrower shape differently), in train
    mode with autograd, at the sampling temperature."""
    import torch

    from recipe.run import select_rows
    from recipe.trainer import sequence_logprobs

    model.train()
    gaps = []
    rows = rollout.input_ids.shape[0]
    for start in range(0, rows, rows_per_minibatch):
        part = select_rows(rollout, torch.arange(start, min(start + rows_per_minibatch, rows)))
        trainer, _ = sequence_logprobs(model, precision, part.input_ids, part.attention_mask, part.prompt_width,
                                       temperature, with_entropy=True)
        gaps.append((trainer.detach() - part.old_logprobs)[part.loss_mask].float())
    model.eval()
    return torch.cat(gaps)


def gap_summary(gap) -> dict:
    """|gap| mean, p99 and max over the tokens, and the importance ratio exp(gap)'s sd and range."""
    ratio = gap.exp()
    return {"tokens": int(gap.numel()), "gap_mean": float(gap.abs().mean()),
            "gap_p99": float(gap.abs().quantile(0.99)), "gap_max": float(gap.abs().max()),
            "ratio_sd": float(ratio.std()), "ratio_min": float(ratio.min()), "ratio_max": float(ratio.max())}


def learn(options) -> dict:
    """The LOO sweep's own runs, read back (nothing is trained again): per job its evaluations and time split."""
    from recipe.tracking import read_metrics

    sweep_dir = Path(options.sweep)
    keys = ("step", "compute/device_seconds", "eval/pass_rate", "eval/pass_rate_se", "eval/len_mean",
            "eval/interrupted_frac", "eval/truncated_frac", "rollout/len_mean", "train/logprob_mismatch")
    runs = {}
    for job in json.loads((sweep_dir / "plan.json").read_text()):
        records = read_metrics(sweep_dir / job["run_dir"])
        if not records:
            continue
        runs[f"{job['variant']}, seed {job['seed']}"] = {
            "axis": job["axis"], "seed": job["seed"],
            "curve": [{key: record.get(key) for key in keys} for record in records],
            "split": {key: records[-1].get(f"compute/{key}_seconds") for key in ("generation", "training",
                                                                                  "evaluation")}}
    return {"sweep": str(sweep_dir), "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=("mismatch", "learn"))
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--minibatches", type=int, default=4,
                        help="the trainer's minibatches (the LOO's: 8 x 4 rows in 2 minibatches of 16 rows)")
    parser.add_argument("--no-vllm", dest="vllm", action="store_false")
    parser.add_argument("--heads", nargs="+", choices=("fp32", "bf16"), default=["fp32", "bf16"])
    parser.add_argument("--threads", type=int, default=2, help="torch threads (mismatch)")
    parser.add_argument("--temperature", type=float, default=0.7, help="sampling temperature (mismatch)")
    parser.add_argument("--sweep", default=str(REPO / "runs" / "scalerl-loo-smollm2"),
                        help="the directory `sweep run sweeps/loo-smollm2.yaml` wrote")
    options = parser.parse_args()
    result = {"machine": machine(), "part": options.part, "load_before": loadavg(),
              **(mismatch(options) if options.part == "mismatch" else learn(options)), "load_after": loadavg()}
    OUT.mkdir(parents=True, exist_ok=True)
    suffix = f"_{options.heads[0]}" if options.part == "mismatch" and len(options.heads) == 1 else ""
    (OUT / f"bench_smollm2_{options.part}{suffix}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result if options.part == "mismatch" else {k: v for k, v in result.items() if k != "runs"},
                     indent=2))
    if options.part == "learn":
        for name, run in result["runs"].items():
            print(f"{name}: " + ", ".join(
                f"{p['compute/device_seconds']:.0f}s {p['eval/pass_rate']:.3f} len {p['eval/len_mean']:.1f}"
                for p in run["curve"]))
            print(f"  split {run['split']}")


if __name__ == "__main__":
    main()
