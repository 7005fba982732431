"""The embedded model's code domain: infer f(x) = x + K from one example and write it as Python, run in the sandbox.

    prompt    "f(38)=083;f(x)=<think>"
    response  "514000</think>x+45"   then <eos>
    program   "x = int(input())\\nprint(x+45)\\n", run against five hidden tests (x -> x + 45)

The model's answer section is a Python expression in x, the task's extraction wraps it into a program
(recipe.code_reward.CodeReward's `extract`), and the program runs in the sandbox like any model-written
code: a response that prints the example's value, writes `045` (a SyntaxError in Python 3) or anything else
fails the hidden tests, drawn from 0..999 so only the rule passes them.

The thinking trace finds K = y - x by the column method, least-significant column first, two digits a
column: the difference digit and the borrow out. The noisy teacher's wrong method forgets every borrow
(each column's digit is (y_i - x_i) mod 10), and every problem has a borrow, so the two methods disagree
as the addition task's carry and no-carry methods do: the warm start (warm_start.code_frac) holds both,
mostly the wrong one, and RL must find the right one from the tests' verdicts.
"""

from __future__ import annotations

import functools
import random

from recipe.code_reward import CodeReward, CodeTask
from recipe.code_tests import encode_tests
from recipe.sandbox import StdioTest
from recipe.tasks import THINK_OPEN, Problem, final_answer

X_DIGITS, Y_DIGITS = 2, 3  # the example's x (0..99) and y = x + K (K 1..99), zero-padded in the prompt
MAX_K = 99
TESTS_PER_PROBLEM = 5
TEST_RANGE = 999  # hidden inputs 0..999: wider than the example's, so a constant or a digit trick fails


def column_differences(y: int, x: int, borrow: bool) -> list[tuple[int, int]]:
    """(digit, borrow out) per column of y - x, least-significant first; borrow=False forgets every borrow."""
    dy, dx = f"{y:0{Y_DIGITS}d}"[::-1], f"{x:0{Y_DIGITS}d}"[::-1]
    columns, borrow_in = [], 0
    for i in range(Y_DIGITS):
        d = int(dy[i]) - int(dx[i]) - borrow_in
        out = 1 if d < 0 else 0
        columns.append((d % 10, out))
        borrow_in = out if borrow else 0
    return columns


def read_difference(columns: list[tuple[int, int]]) -> int:
    """K from the trace: the digits, most significant first (the leading zeros dropped)."""
    return int("".join(str(digit) for digit, _ in reversed(columns)))


def code_solution(x: int, k: int, borrow: bool = True) -> tuple[str, str]:
    """(thinking trace, answer expression) of the example f(x) = x + k by the column method, with or without
    borrowing: f(38)=083 has the columns 3-8 (5, borrow 1), 8-3-1 (4, 0), 0-0 (0, 0): "514000" and x+45; forgetting
    the borrow gives "515000" and x+55."""
    columns = column_differences(x + k, x, borrow)
    trace = "".join(f"{digit}{out}" for digit, out in columns)
    return trace, f"x+{read_difference(columns)}"


def has_borrow(x: int, k: int) -> bool:
    """True when some column of (x + k) - x borrows, i.e. forgetting borrows gives a wrong K."""
    return code_solution(x, k, borrow=True)[1] != code_solution(x, k, borrow=False)[1]


def sample_example(rng: random.Random) -> tuple[int, int]:
    """(x, K), x in 0..99 and K in 1..MAX_K, redrawn until a column borrows."""
    while True:
        x, k = rng.randint(0, 10 ** X_DIGITS - 1), rng.randint(1, MAX_K)
        if has_borrow(x, k):
            return x, k


@functools.lru_cache(maxsize=None)
def count_code_problems() -> int:
    """How many distinct (x, K) the task can draw (a plan checks pool sizes against it)."""
    return sum(has_borrow(x, k) for x in range(10 ** X_DIGITS) for k in range(1, MAX_K + 1))


def code_prompt(x: int, k: int) -> str:
    return f"f({x:0{X_DIGITS}d})={x + k:0{Y_DIGITS}d};f(x)={THINK_OPEN}"


def hidden_tests(rng: random.Random, k: int) -> tuple[StdioTest, ...]:
    return tuple(StdioTest(f"{x}\n", str(x + k)) for x in rng.sample(range(TEST_RANGE + 1), TESTS_PER_PROBLEM))


def expression_program(response: str) -> str | None:
    """The program of a response: its answer section (after `</think>`) as the expression printed for x read from
    stdin; None when the thinking never closed or the answer is empty (the reward is then -1, no sandbox)."""
    expression = final_answer(response)
    if not expression:
        return None
    return f"x = int(input())\nprint({expression})\n"


def teacher_code_example(rng: random.Random, correct_prob: float) -> tuple[str, str, str]:
    """(prompt, trace, answer) of one warm-start target: the right method with probability correct_prob."""
    x, k = sample_example(rng)
    trace, answer = code_solution(x, k, borrow=rng.random() < correct_prob)
    return code_prompt(x, k), trace, answer


def build_embedded_code_task(train_size: int, validation_size: int, data_seed: int,
                             reward: CodeReward | None) -> CodeTask:
    """Distinct (x, K) problems, validation drawn first and disjoint from train; each with its hidden tests and
    the reference response (the right trace and expression) the evaluation's control variate takes."""
    available = count_code_problems()
    if train_size + validation_size > available:
        raise ValueError(f"train_size + validation_size = {train_size + validation_size}, but the embedded code "
                         f"task has {available} distinct problems; lower them")
    rng = random.Random(data_seed)
    seen: set[tuple[int, int]] = set()
    problems: list[Problem] = []
    while len(problems) < train_size + validation_size:
        x, k = sample_example(rng)
        if (x, k) in seen:
            continue
        seen.add((x, k))
        trace, answer = code_solution(x, k)
        problems.append(Problem(code_prompt(x, k), encode_tests(hidden_tests(rng, k)), reference_thinking=trace,
                                reference_answer=answer))
    return CodeTask("embedded_code", train=problems[validation_size:], validation=problems[:validation_size],
                    reward=reward)

