"""Throughput benchmark: generation and training tokens/s and achieved GFLOP/s of the RL loop's parts.

    .venv/bin/python -m benchmarks.bench_rl_throughput --threads 2 [model.path=DIR]

Generation: recipe.generator.generate (behaviour logprobs, precision head, length control) on one
rollout batch (32 prompts x 8 samples) against a plain batched KV-cache decode of the same model
(model forward with past_key_values + multinomial, nothing recorded) and against HF `generate`.
Training: recipe.trainer.train_step on that batch. FLOPs use recipe.compute's estimate.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def timed(function, repeats: int):
    """Best-of-`repeats` seconds (the least disturbed by other jobs on a shared machine) and the last result."""
    best, result = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - started)
    return best, result


def plain_decode(model, input_ids, attention_mask, steps: int, rng):
    """Reference: batched KV-cache sampling, full model forward, no bookkeeping."""
    import torch
    from transformers import DynamicCache

    cache = DynamicCache()
    positions = (attention_mask.cumsum(-1) - 1).clamp_min(0)
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions,
                       past_key_values=cache, use_cache=True).logits[:, -1]
        position = positions[:, -1:]
        for _ in range(steps):
            token = torch.multinomial(torch.softmax(logits.float(), -1), 1, generator=rng)
            attention_mask = torch.cat([attention_mask, torch.ones_like(token)], dim=1)
            position = position + 1
            logits = model(input_ids=token, attention_mask=attention_mask, position_ids=position,
                           past_key_values=cache, use_cache=True).logits[:, -1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    from recipe.compute import ModelShape, sequence_cost
    from recipe.config import load_recipe
    from recipe.generator import generate
    from recipe.run import build_components, model_directory
    from recipe.model import load_model_dir
    from recipe.tasks import build_task
    from recipe.trainer import TrainBatch, build_optimizer, train_step

    cfg = load_recipe(None, args.overrides)
    model, tokenizer = load_model_dir(model_directory(cfg), cfg.model.dtype)
    model.eval()
    c = build_components(cfg)
    task = build_task(cfg.task, tokenizer)
    P, G = cfg.rollout.prompts_per_batch, cfg.rollout.samples_per_prompt
    prompts = [p.prompt for p in task.train[:P] for _ in range(G)]
    shape = ModelShape.of(model)
    load = os.getloadavg()[0]

    rng = torch.Generator().manual_seed(0)
    gen_seconds, rollout = timed(lambda: generate(
        model, tokenizer, prompts, precision=c.precision, length_control=c.length_control,
        max_new_tokens=cfg.rollout.max_new_tokens, torch_rng=rng, numpy_rng=np.random.default_rng(0)), args.repeats)
    steps = rollout.response_ids.shape[1]
    new_tokens = int(rollout.lengths.sum())
    encoded = tokenizer(prompts, padding=True, return_tensors="pt")
    plain_seconds, _ = timed(lambda: plain_decode(model, encoded.input_ids, encoded.attention_mask, steps - 1, rng),
                             args.repeats)
    hf_seconds, _ = timed(lambda: model.generate(**encoded, do_sample=True, max_new_tokens=steps, min_new_tokens=steps,
                                                 pad_token_id=tokenizer.pad_token_id), args.repeats)
    prompt_lengths = encoded.attention_mask.sum(1).tolist()
    gen_tokens, gen_context = sequence_cost(prompt_lengths, rollout.lengths.tolist())

    group_ids = torch.arange(P).repeat_interleave(G)
    batch = TrainBatch(rollout, torch.randn(len(prompts)), group_ids, version=0)
    optimizer, schedule = build_optimizer(model, cfg.optimizer)
    train_seconds, _ = timed(lambda: train_step(
        model, optimizer, schedule, batch, loss_fn=c.loss, aggregation=c.aggregation, precision=c.precision,
        temperature=1.0, grad_clip=1.0), args.repeats)
    train_flops = 3 * shape.forward_flops(gen_tokens, gen_context)
    results = {
        "machine": "2-core CPU", "threads": args.threads, "load_avg_1min": load, "params_non_embedding": shape.params,
        "batch": len(prompts), "decode_steps": steps, "new_tokens": new_tokens,
        "generation_seconds": gen_seconds, "generation_new_tokens_per_s": new_tokens / gen_seconds,
        "generation_slots_per_s": len(prompts) * steps / gen_seconds,
        "generation_gflops_per_s": shape.forward_flops(gen_tokens, gen_context) / gen_seconds / 1e9,
        "plain_decode_seconds": plain_seconds, "plain_decode_slots_per_s": len(prompts) * steps / plain_seconds,
        "hf_generate_seconds": hf_seconds, "hf_generate_slots_per_s": len(prompts) * steps / hf_seconds,
        "train_seconds": train_seconds, "train_tokens_per_s": gen_tokens / train_seconds,
        "train_response_tokens_per_s": new_tokens / train_seconds,
        "train_gflops_per_s": train_flops / train_seconds / 1e9,
        "load_avg_1min_after": os.getloadavg()[0],
    }
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
