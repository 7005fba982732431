"""recipe/code_reward and recipe/code_tests: program extraction, the dataset test forms, assert parsing, and the
reward over a sandbox."""

from __future__ import annotations

import json

import pytest

from recipe.code_reward import CodeReward, CodeTask, extract_program
from recipe.code_tests import CodeTestsError, decode_tests, encode_tests, parse_asserts, read_row_tests
from recipe.sandbox import CallTest, Limits, Sandbox, StdioTest
from recipe.tasks import Problem


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=2, limits=Limits(cpu_seconds=1, wall_seconds=2.0)) as pool:
        yield pool


def test_the_program_is_the_last_closed_python_fence():
    response = ("First try:\n```python\nprint(1)\n```\nNo, C++:\n```cpp\nint main(){}\n```\n"
                "Final:\n```py\nprint(2)\n```\nand a cut-off one\n```python\nprint(3)")
    assert extract_program(response) == "print(2)\n"
    assert extract_program("```\nprint(1)\n```") is None and extract_program("no code") is None


def test_asserts_become_calls_whose_comparison_runs_outside():
    tests = parse_asserts("import math\nassert add(1, 2) == 3\nassert [1] == wrap(1)\nassert not odd(2)\n"
                          "assert odd(3)\nassert find(0) is None\nassert math.isclose(half(1), 0.5, rel_tol=1e-6)\n"
                          "assert abs(half(3) - 1.5) < 1e-9\n")
    assert [(t.expression, t.expected, t.compare, t.tolerance) for t in tests] == [
        ("add(1, 2)", 3, "eq", None), ("wrap(1)", [1], "eq", None), ("odd(2)", True, "falsy", None),
        ("odd(3)", True, "truthy", None), ("find(0)", None, "is", None), ("half(1)", 0.5, "eq", 1e-6),
        ("half(3)", 1.5, "eq", 1e-9)]
    assert all(t.setup == "import math" for t in tests)


def test_a_comparison_that_would_run_on_the_programs_object_is_refused_with_its_line():
    with pytest.raises(CodeTestsError, match="line 2: compare the call with a literal"):
        parse_asserts("assert f(1) == 1\nassert f(2) > 3\n")
    with pytest.raises(CodeTestsError, match="line 1: only assert statements"):
        parse_asserts("print(secret)\n")
    with pytest.raises(CodeTestsError, match="line 1: not Python"):
        parse_asserts("assert (\n")


def test_a_humaneval_check_function_binds_candidate_to_the_entry_point():
    tests = parse_asserts('METADATA = {}\n\ndef check(candidate):\n    assert candidate(2) == 4\n', "double")
    assert tests == (CallTest("candidate(2)", 4, setup="candidate = double"),)


def test_every_dataset_form_reads_into_tests():
    taco = {"input_output": json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})}
    apps_call = {"input_output": json.dumps({"fn_name": "add", "inputs": [[1, 2]], "outputs": [[3]]})}
    livecodebench = {"tests": json.dumps([{"input": "[1, 2]\n3", "output": "[1, 2, 3]", "testtype": "functional",
                                           "metadata": {"func_name": "push"}}]),
                     "starter_code": "class Solution:\n    def push(self, xs, x):"}
    deepcoder = {"tests": [{"input": "4\n", "output": "8\n", "type": "stdin_stdout"}]}
    mbpp = {"test_list": ["assert add(1, 2) == 3"]}
    assert read_row_tests(taco) == (StdioTest("1 2\n", "3\n"),)
    assert read_row_tests(apps_call) == (CallTest("add(*(1, 2))", 3, lists_equal_tuples=True),)
    assert read_row_tests(livecodebench) == (CallTest("Solution().push(*([1, 2], 3))", [1, 2, 3],
                                                      lists_equal_tuples=True),)
    assert read_row_tests(deepcoder) == (StdioTest("4\n", "8\n"),)
    assert read_row_tests(mbpp) == (CallTest("add(1, 2)", 3),)
    for bad, message in (({"prompt": "x"}, "row: no tests"), ({"tests": "[{"}, "tests: not JSON"),
                         ({"input_output": {"inputs": [1]}}, "input_output: expected")):
        with pytest.raises(CodeTestsError, match=message):
            read_row_tests(bad)


def test_tests_survive_the_answer_text():
    tests = (StdioTest("1\n", "2"), CallTest("f()", ({1, 2}, (3,)), compare="eq", setup="import math"))
    assert decode_tests(encode_tests(tests)) == tests
    with pytest.raises(CodeTestsError, match="answer"):
        decode_tests("__import__('os')")


def test_the_reward_is_plus_one_only_when_every_test_passes(sandbox):
    tests = (StdioTest("2\n", "4"), StdioTest("3\n", "9"))
    responses = ["```python\nn = int(input())\nprint(n * n)\n```", "```python\nprint(int(input()) * 2)\n```",
                 "I cannot solve this."]
    assert CodeReward(sandbox).rewards(responses, [tests] * 3) == [1.0, -1.0, -1.0]
    partial = CodeReward(sandbox, partial=True).score(responses, [tests] * 3)
    assert [score.reward for score in partial] == [1.0, 0.0, -1.0] and partial[1].fraction == 0.5


def test_a_forged_eq_or_a_hard_coded_visible_example_does_not_pass(sandbox):
    forged = ("```python\nclass A:\n    def __eq__(self, other):\n        return True\n"
              "def square(x):\n    return A()\n```")
    visible_only = "```python\nprint(4)\n```"
    assert CodeReward(sandbox).rewards([forged, visible_only], [parse_asserts("assert square(3) == 9"),
                                                                (StdioTest("2\n", "4"), StdioTest("5\n", "25"))]) \
        == [-1.0, -1.0]


def test_a_code_task_scores_its_batch_through_the_sandbox(sandbox):
    answer = encode_tests((StdioTest("1 2\n", "3"),))
    task = CodeTask("code", train=[Problem("add two numbers", answer)], validation=[], reward=CodeReward(sandbox))
    good = "```python\nprint(sum(map(int, input().split())))\n```"
    assert task.rewards([good, "```python\nprint(0)\n```"], [answer, answer]) == [1.0, -1.0]
    assert task.check(good, answer)


def test_a_mixtures_code_part_runs_its_rows_in_one_sandbox_batch(sandbox):
    """MixtureTask.check_all hands each part its own rows at once, in order: the code part's programs go to the
    sandbox as one batch (they run in parallel), the other part's rows to its checker."""
    from recipe.mixture import MixtureTask, part_checker
    from recipe.tasks import AdditionTask

    class CountingReward(CodeReward):
        batches: list[int] = []

        def score(self, responses, tests):
            self.batches.append(len(responses))
            return super().score(responses, tests)

    tests = encode_tests((StdioTest("2\n", "4"), StdioTest("5\n", "10")))
    code = CodeTask("code", train=[], validation=[], reward=CountingReward(sandbox))
    addition = AdditionTask("sums", train=[], validation=[])
    task = MixtureTask("mixture", train=[], validation=[],
                       checkers={"code": part_checker(code, "default"), "sums": part_checker(addition, "default")})
    responses = ["```python\nprint(int(input()) * 2)\n```", "0102</think>21", "```python\nprint(4)\n```",
                 "0102</think>12", "```python\nprint(int(input()) + int(input()))\n```"]
    answers = [tests, "21", tests, "21", tests]
    parts = ["code", "sums", "code", "sums", "code"]
    assert task.check_all(responses, answers, parts) == [True, True, False, False, False]
    assert CountingReward.batches == [3]
    assert task.check_part(responses[0], tests, "code") and CountingReward.batches == [3, 1]


def test_a_code_file_part_reads_deepcoder_rows_and_runs_their_tests(sandbox, tmp_path):
    """task.name code_file: DeepCoder-style rows (a problem and its stdin/stdout tests) as a mixture's part,
    checked at plan time (a row without tests is named by file and line, never quoted) and scored in the
    sandbox."""
    from recipe.code_reward import JobSandbox
    from recipe.config import ConfigError, load_recipe
    from recipe.mixture import build_mixture_task
    from recipe.preflight import check_mixture_task

    rows = [{"problem": f"Print the input times {k}.", "tests": [{"input": "3\n", "output": f"{3 * k}\n",
                                                                   "type": "stdin_stdout"}]} for k in range(2, 14)]
    path = tmp_path / "deepcoder.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    part = f"task.parts={{sums: {{}}, code: {{name: code_file, train_path: '{path}', prompt_key: problem, " \
           "validation_size: 4}}"
    cfg = load_recipe(None, [part, "eval.num_prompts=4"])
    check_mixture_task(cfg)
    pool = JobSandbox(tmp_path / "run", workers=2)
    (tmp_path / "run").mkdir()
    task = build_mixture_task(cfg.task, tokenizer=None, sandbox=pool)
    code = [p for p in task.train if p.part == "code"]
    assert len(code) == 8 and sum(s.name == "code" for s in task.evaluation_sets) == 1
    k = int(code[0].prompt.split("times ")[1].rstrip("."))
    responses = [f"```python\nprint(int(input()) * {k})\n```", "```python\nprint(0)\n```"]
    assert task.check_all(responses, [code[0].answer] * 2, ["code", "code"]) == [True, False]
    assert json.loads((tmp_path / "run" / "sandbox.json").read_text())["workers"] == 2

    path.write_text(path.read_text() + json.dumps({"problem": "secret words"}) + "\n")
    with pytest.raises(ConfigError, match=r"deepcoder.jsonl line 13: row: no tests") as caught:
        check_mixture_task(load_recipe(None, [part, "eval.num_prompts=4"]))
    assert "secret" not in str(caught.value)
