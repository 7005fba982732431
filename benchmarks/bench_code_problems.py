"""The step-0 pass rate of SmolLM2-135M-Instruct on the generated code problems (recipe/code_problems.py).

    .venv/bin/python -m benchmarks.bench_code_problems --problems 60 --samples 4

The model (model.path smollm2-135m-instruct: recipe/pretrained.py converts it on first use) answers each
problem --samples times at --temperature (and once greedily), in its own chat template, up to --max-new-tokens;
each response's program (the last ```python block) runs against the problem's five hidden tests in the sandbox
(recipe.code_reward.CodeReward, every layer this machine offers). Prints, per family and overall: the share of
sampled responses that pass every test (the step-0 reward's pass rate), the greedy one, and how many responses
had a fenced program at all; machine, date and load beside them.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
from collections import defaultdict
from pathlib import Path

from recipe.code_problems import FAMILIES, build_code_problem_task, family_of
from recipe.code_reward import CodeReward, extract_program
from recipe.code_tests import decode_tests
from recipe.pretrained import pretrained_dir
from recipe.sandbox import Sandbox


def generate(model, tokenizer, prompts: list[str], samples: int, temperature: float, max_new_tokens: int,
             batch: int) -> list[list[str]]:
    """samples responses per prompt (temperature 0: one greedy response)."""
    import torch

    responses: list[list[str]] = []
    for start in range(0, len(prompts), batch):
        chunk = prompts[start:start + batch]
        encoded = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            output = model.generate(**encoded, max_new_tokens=max_new_tokens, do_sample=temperature > 0,
                                    temperature=temperature if temperature > 0 else None, top_p=None, top_k=None,
                                    num_return_sequences=samples, pad_token_id=tokenizer.pad_token_id)
        texts = tokenizer.batch_decode(output[:, encoded["input_ids"].shape[1]:], skip_special_tokens=True)
        responses += [texts[i * samples:(i + 1) * samples] for i in range(len(chunk))]
    return responses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=60)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(args.seed)
    torch.set_num_threads(2)
    cache = Path(os.environ.get("SCALERL_CACHE", Path.home() / ".cache" / "scalerl-sweep"))
    directory = pretrained_dir("smollm2-135m-instruct", cache)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    print(f"{datetime.date.today()}, {platform.node()}, {os.cpu_count()} CPUs; load before {os.getloadavg()[0]:.2f}")
    with Sandbox(workers=2) as sandbox:
        task = build_code_problem_task(args.problems, 0, args.seed, tokenizer, CodeReward(sandbox))
        problems = task.train
        families = [family_of(problem.prompt) for problem in problems]
        prompts = [problem.prompt for problem in problems]
        for label, samples, temperature in (("sampled", args.samples, args.temperature), ("greedy", 1, 0.0)):
            responses = generate(model, tokenizer, prompts, samples, temperature, args.max_new_tokens, args.batch)
            flat = [(family, problem, text) for family, problem, texts in zip(families, problems, responses)
                    for text in texts]
            rewards = task.reward.rewards([text for _, _, text in flat],
                                          [decode_tests(problem.answer) for _, problem, _ in flat])
            by_family: dict[str, list[float]] = defaultdict(list)
            for (family, _, _), reward in zip(flat, rewards):
                by_family[family].append(reward > 0)
            fenced = sum(extract_program(text) is not None for _, _, text in flat)
            overall = sum(reward > 0 for reward in rewards) / len(rewards)
            print(f"\n{label} (temperature {temperature}, {samples} a problem, {len(flat)} responses): pass rate "
                  f"{overall:.3f}; with a fenced program {fenced / len(flat):.2f}; load {os.getloadavg()[0]:.2f}")
            print("| family | pass rate |\n|---|---|")
            for family in FAMILIES:
                passes = by_family.get(family, [])
                rate = f"{sum(passes) / len(passes):.2f} ({len(passes)})" if passes else "-"
                print(f"| {family} | {rate} |")


if __name__ == "__main__":
    main()
