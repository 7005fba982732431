"""recipe/embedded_code: the embedded model's code domain, from the hand-worked trace to a run that learns from
the sandbox's verdicts."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from recipe.embedded_code import (build_embedded_code_task, code_prompt, code_solution, count_code_problems,
                                  expression_program, has_borrow, sample_example)


def test_the_trace_is_the_column_difference_with_its_borrows():
    # f(38) = 083: 3 - 8 borrows (5, 1); 8 - 3 - 1 = 4; 0 - 0 = 0 -> K = 045 = 45
    assert code_solution(38, 45) == ("514000", "x+45")
    assert code_solution(38, 45, borrow=False) == ("515000", "x+55")  # every borrow forgotten
    assert code_prompt(38, 45) == "f(38)=083;f(x)=<think>"
    assert code_solution(7, 93) == ("319100", "x+93")  # 100 - 7: two borrows


def test_every_problem_borrows_so_the_two_methods_disagree():
    rng = random.Random(0)
    for _ in range(500):
        x, k = sample_example(rng)
        assert has_borrow(x, k) and code_solution(x, k)[1] != code_solution(x, k, borrow=False)[1]
    assert count_code_problems() == sum(has_borrow(x, k) for x in range(100) for k in range(1, 100))


def test_the_answer_is_an_expression_the_task_wraps_into_a_program():
    assert expression_program("514000</think>x+45") == "x = int(input())\nprint(x+45)\n"
    assert expression_program("5140") is None and expression_program("514000</think> ") is None


def test_problems_are_distinct_and_validation_is_drawn_first():
    task = build_embedded_code_task(200, 50, data_seed=3, reward=None)
    prompts = [p.prompt for p in task.train + task.validation]
    assert len(set(prompts)) == 250
    assert [p.prompt for p in build_embedded_code_task(10, 50, 3, None).validation] == [
        p.prompt for p in task.validation]
    with pytest.raises(ValueError, match="distinct problems; lower them"):
        build_embedded_code_task(count_code_problems(), 1, 0, None)


def test_the_reference_passes_its_hidden_tests_and_the_wrong_methods_fail():
    from recipe.code_reward import CodeReward
    from recipe.sandbox import Limits, Sandbox

    with Sandbox(workers=2, limits=Limits(cpu_seconds=1, wall_seconds=2.0)) as sandbox:
        task = build_embedded_code_task(0, 4, data_seed=1, reward=CodeReward(sandbox, extract=expression_program))
        problems = task.validation
        right = [f"{p.reference_thinking}</think>{p.reference_answer}" for p in problems]
        shown = [p.prompt.split("=")[1].split(";")[0] for p in problems]  # the example's y, zero-padded
        wrong = ["000000</think>x+" + str(int(p.reference_answer[2:]) + 1) for p in problems]
        constant = [f"</think>{int(y)}" for y in shown]  # the example's output, whatever the input
        padded = [f"</think>x+0{p.reference_answer[2:]}" for p in problems]  # 045: a SyntaxError in Python 3
        answers = [p.answer for p in problems]
        assert task.check_all(right, answers, [None] * 4) == [True] * 4
        for responses in (wrong, constant, padded):
            assert task.check_all(responses, answers, [None] * 4) == [False] * 4


def test_a_code_task_on_a_warm_start_that_never_saw_it_is_refused():
    from recipe.config import ConfigError, load_recipe

    with pytest.raises(ConfigError, match="task.parts.code.name: the embedded model's warm start never saw"):
        load_recipe(None, ["task.parts={sums: {}, code: {name: embedded_code, train_size: 512}}"])
    with pytest.raises(ConfigError, match="task.name: the embedded model's warm start never saw"):
        load_recipe(None, ["task.name=embedded_code", "task.train_size=512", "eval.control_variate=none"])
    cfg = load_recipe(None, ["warm_start.code_frac=0.5",
                             "task.parts={sums: {}, code: {name: embedded_code, train_size: 512}}"])
    assert cfg.task.parts["code"]["name"] == "embedded_code"


def test_code_targets_join_the_warm_start_only_when_asked():
    from recipe.run_config import TaskConfig, WarmStartConfig
    from recipe.warm_start import teacher_example

    base = WarmStartConfig()
    plain = [teacher_example(random.Random(5), base, TaskConfig()) for _ in range(1)]
    again = [teacher_example(random.Random(5), dataclasses.replace(base, code_frac=0.0), TaskConfig())]
    assert plain == again  # code_frac 0 draws nothing extra: the shipped warm start's stream is unchanged
    rng = random.Random(5)
    mixed = [teacher_example(rng, dataclasses.replace(base, code_frac=0.5), TaskConfig()) for _ in range(400)]
    code = [response for prompt, response in mixed if prompt.startswith("f(")]
    assert 150 < len(code) < 250 and all("</think>x+" in response for response in code)


def test_a_mixture_of_sums_and_code_trains_and_records_its_sandbox(tmp_path):
    """A tiny model warm-started on both domains trains on a sums + code mixture: each part's pass rate is
    evaluated, the code part's programs ran in the sandbox, whose layers the run directory records."""
    import torch

    from recipe.config import load_recipe
    from recipe.engines import train
    from recipe.warm_start import build_warm_start
    from tests.conftest import TINY_MODEL, TINY_TASK, TINY_WARM_START, tiny_override_list

    torch.set_num_threads(1)
    model_dir = tmp_path / "model"
    build_warm_start(TINY_MODEL, dataclasses.replace(TINY_WARM_START, code_frac=0.5), TINY_TASK, model_dir)
    cfg = load_recipe(None, [*tiny_override_list(model_dir, run_steps=4),
                             "task.parts={sums: {}, code: {name: embedded_code, train_size: 256, "
                             "validation_size: 32}}", "rollout.max_new_tokens=16"])
    records = train(cfg, tmp_path / "run", device="cpu")
    evals = [r for r in records if "eval/pass_rate/code" in r]
    assert evals and all(0.0 <= r["eval/pass_rate/code"] <= 1.0 for r in evals)
    assert all("eval/pass_rate/sums" in r for r in evals)
    record = json.loads((tmp_path / "run" / "sandbox.json").read_text())
    assert "active" in record and record["workers"] >= 1
