"""Simple programming problems with stdin/stdout tests, generated here, for the real model's code domain.

    system    You write Python 3 programs. ... one program in a ```python block ...
    user      Read two integers on one line and print their sum.  Example input: 3 5  Example output: 8
    assistant (the prompt ends here)
    response  ```python\\na, b = map(int, input().split())\\nprint(a + b)\\n```

Ten families of one-line tasks (arithmetic on a line of integers, string reversal and case, parity, counting)
that SmolLM2-135M-Instruct solves some of the time in its own chat format (benchmarks/bench_code_problems.py
measures the step-0 pass rate). A problem is a family with its own example (shown in the prompt) and five
hidden tests drawn from the seeded generator (never the example: a program that prints the example's output
fails). Problem.answer holds the tests (recipe.code_tests.encode_tests); the reward is
recipe.code_reward.CodeReward. `task.name: code_problems` (or a part's name) trains on them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

from recipe.code_reward import CodeReward, CodeTask
from recipe.code_tests import encode_tests
from recipe.sandbox import StdioTest
from recipe.tasks import Problem

SYSTEM_PROMPT = ("You write Python 3 programs. Reply with one complete program in a ```python code block. "
                 "It reads its input from standard input and prints the answer to standard output.")
TESTS_PER_PROBLEM = 5


@dataclass(frozen=True)
class Family:
    statement: str
    make_input: Callable[[random.Random], str]
    solve: Callable[[str], str]


def integers(count: int) -> Callable[[random.Random], str]:
    return lambda rng: " ".join(str(rng.randint(1, 99)) for _ in range(count))


def word(rng: random.Random) -> str:
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 8)))


def numbers(text: str) -> list[int]:
    return [int(token) for token in text.split()]


FAMILIES = {
    "sum": Family("Read two integers on one line and print their sum.", integers(2),
                  lambda text: str(sum(numbers(text)))),
    "product": Family("Read two integers on one line and print their product.", integers(2),
                      lambda text: str(numbers(text)[0] * numbers(text)[1])),
    "difference": Family("Read two integers a and b on one line and print a - b.", integers(2),
                         lambda text: str(numbers(text)[0] - numbers(text)[1])),
    "larger": Family("Read two integers on one line and print the larger one.", integers(2),
                     lambda text: str(max(numbers(text)))),
    "square": Family("Read an integer n and print n * n.", integers(1), lambda text: str(int(text) ** 2)),
    "sum_of_line": Family("Read a line of integers separated by spaces and print their sum.",
                          lambda rng: integers(rng.randint(3, 6))(rng), lambda text: str(sum(numbers(text)))),
    "reverse": Family("Read a word and print it reversed.", word, lambda text: text[::-1]),
    "upper": Family("Read a word and print it in upper case.", word, lambda text: text.upper()),
    "length": Family("Read a word and print how many letters it has.", word, lambda text: str(len(text))),
    "parity": Family("Read an integer and print even if it is even, otherwise print odd.", integers(1),
                     lambda text: "even" if int(text) % 2 == 0 else "odd"),
}


def code_problem(rng: random.Random, family_name: str) -> tuple[str, tuple[StdioTest, ...]]:
    """(question, hidden tests) of one problem of the family: its example is in the question, not in the tests."""
    family = FAMILIES[family_name]
    example = family.make_input(rng)
    inputs: list[str] = []
    while len(inputs) < TESTS_PER_PROBLEM:
        candidate = family.make_input(rng)
        if candidate != example and candidate not in inputs:
            inputs.append(candidate)
    question = (f"{family.statement}\n\nExample input:\n{example}\n\nExample output:\n{family.solve(example)}")
    return question, tuple(StdioTest(text + "\n", family.solve(text)) for text in inputs)


def family_of(prompt: str) -> str:
    """The family a problem's prompt (or question) belongs to."""
    return next(name for name, family in FAMILIES.items() if family.statement in prompt)


def code_prompt(question: str, tokenizer) -> str:
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def build_code_problem_task(train_size: int, validation_size: int, data_seed: int, tokenizer,
                            reward: CodeReward | None) -> CodeTask:
    """Distinct problems (by question), families in turn, validation drawn first and disjoint from train."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("code problems ask through the model's chat template, and this tokenizer has none; use a "
                         "chat model (e.g. model.path smollm2-135m-instruct)")
    rng = random.Random(data_seed)
    names = list(FAMILIES)
    seen: set[str] = set()
    problems: list[Problem] = []
    attempts = 0
    while len(problems) < train_size + validation_size:
        if attempts > 20 * (train_size + validation_size) + 1000:
            raise ValueError(f"{train_size} + {validation_size} distinct code problems could not be drawn; lower the "
                             "sizes")
        question, tests = code_problem(rng, names[attempts % len(names)])
        attempts += 1
        if question not in seen:
            seen.add(question)
            problems.append(Problem(code_prompt(question, tokenizer), encode_tests(tests)))
    return CodeTask("code_problems", train=problems[validation_size:], validation=problems[:validation_size],
                    reward=reward)
