"""Sandboxed programs a second (every layer on, each off, a fresh sandbox per sample), and what a step's code
reward adds.

    .venv/bin/python -m benchmarks.bench_sandbox --samples 300 --workers 2

Workload: short model-style programs (sum a list, reverse words, count vowels, max of pairs, FizzBuzz line) with
5 stdin/stdout tests each, all correct, so every test of every program runs (the worst case of a pass/fail
reward, which stops at the first failure). Each configuration gets its own Sandbox (started and warmed with one
batch, not timed), then --samples programs in one batch, --workers at a time. The step figure runs
CodeReward.rewards on a step's responses (fenced programs, half of them wrong at their second test) and
reports its wall-clock seconds. The load average (`uptime`'s 1-minute figure) is printed before and after:
other engineers share the 2 cores, and a figure is only the machine's when the load was ~0 beside it.
Output: markdown tables on stdout.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import time

from recipe.code_reward import CodeReward
from recipe.sandbox import LAYERS, Job, Sandbox, StdioTest

PROGRAMS = {  # name -> (correct program, wrong program, test input maker, expected output maker)
    "sum": ("print(sum(map(int, input().split())))\n", "print(sum(map(int, input().split())) + 1)\n",
            lambda i: " ".join(str(j) for j in range(i + 3)), lambda i: str(sum(range(i + 3)))),
    "reverse_words": ("print(' '.join(reversed(input().split())))\n", "print(input())\n",
                      lambda i: " ".join(f"w{j}" for j in range(i + 2)),
                      lambda i: " ".join(f"w{j}" for j in reversed(range(i + 2)))),
    "vowels": ("print(sum(c in 'aeiou' for c in input()))\n", "print(len(input()))\n",
               lambda i: "banana" * (i + 1), lambda i: str(3 * (i + 1))),
    "max_pair": ("n = int(input())\nbest = max(sum(map(int, input().split())) for _ in range(n))\nprint(best)\n",
                 "n = int(input())\nprint(n)\n", lambda i: f"{i + 1}\n" + "\n".join(f"{j} {i}" for j in range(i + 1)),
                 lambda i: str(2 * i)),
    "fizzbuzz": ("n = int(input())\nprint(' '.join('FizzBuzz' if k % 15 == 0 else 'Fizz' if k % 3 == 0 else "
                 "'Buzz' if k % 5 == 0 else str(k) for k in range(1, n + 1)))\n", "print(input())\n",
                 lambda i: str(10 + i),
                 lambda i: " ".join('FizzBuzz' if k % 15 == 0 else 'Fizz' if k % 3 == 0 else 'Buzz' if k % 5 == 0
                                    else str(k) for k in range(1, 11 + i))),
}


def tests_of(name: str) -> tuple[StdioTest, ...]:
    _, _, make_input, make_output = PROGRAMS[name]
    return tuple(StdioTest(make_input(i) + "\n", make_output(i)) for i in range(5))


def jobs(count: int) -> list[Job]:
    names = list(PROGRAMS)
    return [Job(PROGRAMS[names[i % len(names)]][0], tests_of(names[i % len(names)])) for i in range(count)]


def programs_per_second(samples: int, workers: int, **arguments) -> tuple[float, list[str]]:
    with Sandbox(workers=workers, **arguments) as sandbox:
        sandbox.run(jobs(2 * workers))  # warm: every slot's sandbox started
        batch = jobs(samples)
        started = time.perf_counter()
        outcomes = sandbox.run(batch)
        seconds = time.perf_counter() - started
        if not all(outcome.all_passed for outcome in outcomes):
            raise SystemExit(f"bench_sandbox: a correct program failed under {arguments}: the sandbox is broken here")
        return samples / seconds, sandbox.layers_record()["active"]


def step_seconds(step_samples: int, workers: int) -> tuple[float, float]:
    """(seconds CodeReward.rewards takes for a step, the mean reward): half the responses wrong."""
    names = list(PROGRAMS)
    responses, tests = [], []
    for i in range(step_samples):
        name = names[i % len(names)]
        program = PROGRAMS[name][i % 2]
        responses.append(f"Here is my solution.\n```python\n{program}```\n")
        tests.append(tests_of(name))
    with Sandbox(workers=workers) as sandbox:
        reward = CodeReward(sandbox)
        reward.rewards(responses[:2 * workers], tests[:2 * workers])
        started = time.perf_counter()
        rewards = reward.rewards(responses, tests)
        return time.perf_counter() - started, sum(rewards) / len(rewards)


def load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, nargs="+", default=[64, 256])
    args = parser.parse_args()
    print(f"{datetime.date.today()}, {platform.node()}, {os.cpu_count()} CPUs, kernel {platform.release()}; "
          f"load before {load()}")
    print("\n| configuration | active layers | programs/s |\n|---|---|---|")
    configurations = [("every layer on", {}), ("fresh sandbox per sample", {"warm": False})]
    configurations += [(f"{layer} off", {"disable": (layer,)}) for layer in LAYERS if layer != "user"]
    configurations += [("no namespaces", {"disable": ("pid", "net", "mount")}),
                       ("base only", {"disable": LAYERS})]
    for name, arguments in configurations:
        if "mount" in arguments.get("disable", ()) and os.geteuid() == 0:
            arguments["python"] = "/usr/bin/python3"  # the slot uid must read it without the mount layer
        samples = args.samples // 5 if arguments.get("warm") is False else args.samples
        rate, active = programs_per_second(samples, args.workers, **arguments)
        print(f"| {name} | {', '.join(active) or 'none'} | {rate:.1f} |  (load {load()})", flush=True)
    print("\n| step samples | code reward seconds | mean reward |\n|---|---|---|")
    for step in args.steps:
        seconds, mean = step_seconds(step, args.workers)
        print(f"| {step} | {seconds:.2f} | {mean:+.2f} |  (load {load()})", flush=True)
    print(f"\nload after {load()}")


if __name__ == "__main__":
    main()
