"""recipe/code_problems: the generated problems are distinct, split, hidden-tested, and solvable in the sandbox."""

from __future__ import annotations

import random

import pytest

from recipe.code_problems import FAMILIES, build_code_problem_task, code_problem, family_of
from recipe.code_reward import CodeReward
from recipe.code_tests import decode_tests
from recipe.sandbox import Limits, Sandbox

REFERENCE = {  # a correct program per family, the kind of answer the model is asked for
    "sum": "a, b = map(int, input().split())\nprint(a + b)",
    "product": "a, b = map(int, input().split())\nprint(a * b)",
    "difference": "a, b = map(int, input().split())\nprint(a - b)",
    "larger": "print(max(map(int, input().split())))",
    "square": "n = int(input())\nprint(n * n)",
    "sum_of_line": "print(sum(int(x) for x in input().split()))",
    "reverse": "print(input()[::-1])",
    "upper": "print(input().upper())",
    "length": "print(len(input()))",
    "parity": "print('even' if int(input()) % 2 == 0 else 'odd')",
}


class ChatTemplateTokenizer:
    """The one tokenizer method the task builder calls, with SmolLM2's turn markers."""
    chat_template = "chatml"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return turns + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def test_a_problem_shows_its_example_and_hides_five_other_tests():
    rng = random.Random(0)
    for name, family in FAMILIES.items():
        question, tests = code_problem(rng, name)
        example = question.split("Example input:\n")[1].split("\n")[0]
        assert family.statement in question and family.solve(example) in question
        assert len(tests) == 5 and example + "\n" not in [test.stdin for test in tests]


def test_the_task_splits_distinct_problems_deterministically():
    tokenizer = ChatTemplateTokenizer()
    task = build_code_problem_task(40, 10, 3, tokenizer, reward=None)
    again = build_code_problem_task(40, 10, 3, tokenizer, reward=None)
    prompts = [problem.prompt for problem in task.validation + task.train]
    assert len(task.train) == 40 and len(task.validation) == 10 and len(set(prompts)) == 50
    assert prompts == [problem.prompt for problem in again.validation + again.train]
    assert all(prompt.endswith("<|im_start|>assistant\n") for prompt in prompts)
    with pytest.raises(ValueError, match="chat template"):
        build_code_problem_task(4, 1, 0, object(), reward=None)


def test_every_family_is_solvable_and_a_wrong_program_fails():
    task = build_code_problem_task(20, 0, 1, ChatTemplateTokenizer(), reward=None)
    with Sandbox(workers=2, limits=Limits(cpu_seconds=1, wall_seconds=2.0)) as sandbox:
        reward = CodeReward(sandbox)
        right = [f"```python\n{REFERENCE[family_of(problem.prompt)]}\n```" for problem in task.train]
        tests = [decode_tests(problem.answer) for problem in task.train]
        assert reward.rewards(right, tests) == [1.0] * len(right)
        assert reward.rewards(["```python\nprint(input())\n```"] * len(tests), tests) == [-1.0] * len(tests)
