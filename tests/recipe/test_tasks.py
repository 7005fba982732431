"""The embedded carry-addition task, its checker, and the JSONL math loader."""

from __future__ import annotations

import json
import random

import pytest

from recipe.tasks import (
    build_addition_task,
    build_math_task,
    final_answer,
    has_carry_in,
    sample_operands,
    solution,
)


def test_solution_with_and_without_carry():
    # 385 + 47, columns least significant first: 5+7 = 12, 8+4+1 = 13, 3+0+1 = 04 -> answer 432.
    assert solution(385, 47) == ("121304", "432")
    # Forgetting carries: 5+7 = 12, 8+4 = 12, 3+0 = 03 -> units digits MSB first 3,2,2 -> 322.
    assert solution(385, 47, carry=False) == ("121203", "322")
    # A final carry becomes the leading digit: 95 + 7: 5+7 = 12, 9+0+1 = 10 -> "1" + "02".
    assert solution(95, 7) == ("1210", "102")
    # Terse: each column's units digit alone, the carries implicit; the same answers.
    assert solution(385, 47, terse=True) == ("234", "432")
    assert solution(385, 47, carry=False, terse=True) == ("223", "322")
    assert solution(95, 7, terse=True) == ("20", "102")


def test_every_problem_has_a_carry_and_matches_python_addition():
    rng = random.Random(0)
    for _ in range(500):
        a, b = sample_operands(rng, 1, 4)
        assert has_carry_in(a, b)
        assert solution(a, b)[1] == str(a + b)
        assert solution(a, b, carry=False)[1] != str(a + b)


def test_split_is_deterministic_disjoint_and_zero_padded():
    task = build_addition_task(300, 50, 1, 3, data_seed=7)
    again = build_addition_task(300, 50, 1, 3, data_seed=7)
    assert task.train == again.train and task.validation == again.validation
    assert not {p.prompt for p in task.train} & {p.prompt for p in task.validation}
    assert all(len(p.prompt) == len("000+000=<think>") for p in task.train)
    a, b = task.train[0].prompt.removesuffix("=<think>").split("+")
    assert task.train[0].answer == str(int(a) + int(b))
    assert build_addition_task(300, 50, 1, 3, data_seed=8).train != task.train


def test_checker_needs_closed_thinking_and_the_exact_answer():
    task = build_addition_task(10, 2, 1, 3, data_seed=0)
    assert task.check("121304</think>432", "432")
    assert task.check("</think> 432 ", "432")
    assert not task.check("121304 432", "432")  # never closed its thinking
    assert not task.check("121304</think>4320", "432")
    assert final_answer("a</think>b</think>c") == "c"
    assert task.rewards(["</think>1", "</think>2"], ["1", "1"]) == [1.0, -1.0]


def test_jsonl_math_task_checks_with_math_verify(tmp_path):
    rows = [{"prompt": f"What is {i} squared?", "answer": str(i * i)} for i in range(10)]
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    from recipe.run_config import TaskConfig

    cfg = TaskConfig(name="jsonl", train_path=str(path), validation_size=3, data_seed=0)
    task = build_math_task(cfg, tokenizer=object())
    assert len(task.train) == 7 and len(task.validation) == 3
    assert task.check("<think>9 times 9</think> The answer is $\\boxed{81}$.", "81")
    assert task.check("</think>\\frac{1}{2}", "0.5")
    assert not task.check("</think>\\boxed{80}", "81")


def test_jsonl_rows_need_prompt_and_answer(tmp_path):
    from recipe.task_files import read_task_file

    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"question": "1+1", "answer": "2"}) + "\n")
    with pytest.raises(ValueError, match="bad.jsonl line 1: no 'prompt' field; set task.prompt_key"):
        read_task_file(path)  # the row's own keys are not echoed (the file may hold anything)
    path.write_text('{"prompt": "1+1", "answer": "2"}\n{"prompt": \n')
    with pytest.raises(ValueError, match="bad.jsonl line 2: not JSON"):
        read_task_file(path)


def test_the_pool_size_is_counted_exactly():
    # Brute force over every operand pair the sampler can draw (has_carry_in is the sampler's own rule).
    from recipe.tasks import count_addition_problems, has_carry_in

    for low, high in ((1, 1), (1, 2), (2, 2)):
        widths = range(low, high + 1)
        brute = sum(1 for a in range(10 ** high) for b in range(10 ** high)
                    if len(str(a)) in widths and len(str(b)) in widths and has_carry_in(a, b))
        assert count_addition_problems(low, high) == brute


def test_validation_split_does_not_depend_on_the_pool_size():
    small, large = build_addition_task(100, 20, 1, 3, data_seed=3), build_addition_task(300, 20, 1, 3, data_seed=3)
    assert small.validation == large.validation
    assert large.train[:100] == small.train
