"""Task mixtures: parts drawn into every batch by weight, each checked by its own reward, evaluated part by part
with the weighted whole, downstream sets evaluated and never trained on; every bad input refused at load time."""

from __future__ import annotations

import json
import math

import pytest
import torch

from components.registry import ConfigError

# Two parts of the tiny task (1..2 digits): all sums, and two-digit sums only, weighted 1 : 3.
PARTS = ("task.parts={all: {train_size: 64, validation_size: 16, weight: 1}, "
         "wide: {min_digits: 2, train_size: 64, validation_size: 16, weight: 3, data_seed: 7}}")
DOWNSTREAM = "task.downstream={held: {min_digits: 2, validation_size: 16, data_seed: 99}}"


def test_batch_counts_split_every_batch_by_weight():
    from recipe.task_parts import batch_counts

    assert batch_counts(16, [1, 2]) == [5, 11]  # 5.33 / 10.67: the larger remainder gets the spare prompt
    assert batch_counts(16, [0.5, 0.5]) == [8, 8]
    assert batch_counts(10, [1, 1, 1]) == [4, 3, 3]  # equal remainders: the earlier part
    assert batch_counts(4, [1, 3]) == [1, 3]


@pytest.mark.parametrize("override, key", [
    ("task.parts={a: {weight: 0}}", "task.parts.a.weight"),
    ("task.parts={a: {weight: -1}}", "task.parts.a.weight"),
    ("task.parts={a: {colour: red}}", "task.parts.a.colour"),
    ("task.parts={a: {reward: code_golf}}", "task.parts.a.reward"),
    ("task.parts={Bad-Name: {}}", "task.parts.a key that is not a name (not shown): a part's name"),
    ("task.parts={whole: {}}", "task.parts.whole"),
    ("task.parts={a: {max_digits: 6}}", "task.parts.a"),  # outside the model's digits (1..4)
    ("task.parts={a: {max_digits: 2}}", "task.parts.a.train_size"),  # 1..2 digits hold 4,455 problems
    ("task.parts={a: {name: file}}", "task.parts.a.train_path"),
    ("task.parts={a: {source: polaris}}", "task.parts.a.source"),
    ("task.downstream={a: {min_digits: 4}}", "task.downstream"),  # without parts
    ("task.parts={a: {}} | task.downstream={a: {}}", "task.downstream.a"),
    ("eval.control_variate=reference | task.parts={a: {name: file, train_path: x.jsonl}}", "task.parts.a ('file')"),
])
def test_bad_parts_are_refused_naming_the_key(override, key):
    from recipe.config import load_recipe

    with pytest.raises(ConfigError) as error:
        load_recipe(None, [part.strip() for part in override.split("|")])
    assert key in str(error.value)


def test_a_task_without_parts_keeps_its_run_id():
    """Keys added with a default that computes what runs computed before stay out of the id."""
    from recipe.config import load_recipe, run_id

    assert run_id(load_recipe()) == run_id(load_recipe(None, ["task.parts={}", "task.downstream={}"]))


def test_partwise_curriculum_draws_by_weight_retires_per_part_and_resumes():
    from components import REGISTRIES
    from recipe.mixture import PartwiseCurriculum

    inner = REGISTRIES["curriculum"].build({"name": "no_positive_resampling", "threshold": 0.9})
    curriculum = PartwiseCurriculum(inner, [10, 30], [1, 3], ["a", "b"])
    curriculum.reset(40, seed=3)
    batch = curriculum.sample(8)
    assert sum(i < 10 for i in batch) == 2 and sum(i >= 10 for i in batch) == 6  # 8 x 1/4, 8 x 3/4
    curriculum.update([batch[0], batch[2]], [1.0, 1.0])  # one prompt of each part solved: both retired
    assert curriculum.parts[0].retired == {batch[0]} and curriculum.parts[1].retired == {batch[2] - 10}
    metrics = curriculum.metrics()
    assert metrics["curriculum/retired_frac"] == pytest.approx(2 / 40)
    assert metrics["curriculum/retired_frac/a"] == pytest.approx(1 / 10)
    state = json.loads(json.dumps(curriculum.state_dict()))  # JSON-able, as the ledger keeps it
    resumed = PartwiseCurriculum(inner, [10, 30], [1, 3], ["a", "b"])
    resumed.reset(40, seed=0)
    resumed.load_state_dict(state)
    assert [resumed.sample(8) for _ in range(6)] == [curriculum.sample(8) for _ in range(6)]
    assert batch[0] not in [i for _ in range(3) for i in curriculum.sample(8)]  # retired prompts never return


def test_weighted_whole_from_hand_figures():
    from recipe.evaluation import weighted_whole

    per_set = {"a": {"eval/pass_rate": 0.2, "eval/pass_rate_se": 0.04},
               "b": {"eval/pass_rate": 0.6, "eval/pass_rate_se": 0.02},
               "d": {"eval/pass_rate": 0.9, "eval/pass_rate_se": 0.01}}  # downstream: not in the weights
    whole = weighted_whole(per_set, {"a": 1.0, "b": 3.0})
    assert whole["eval/pass_rate"] == pytest.approx(0.25 * 0.2 + 0.75 * 0.6)
    assert whole["eval/pass_rate_se"] == pytest.approx(math.sqrt((0.25 * 0.04) ** 2 + (0.75 * 0.02) ** 2))


def test_a_mixture_run_trains_each_part_and_evaluates_parts_whole_and_downstream(tiny_recipe, tmp_path):
    from recipe.engines import train
    from recipe.run import Run

    torch.set_num_threads(1)
    cfg = tiny_recipe(PARTS, DOWNSTREAM, run_steps=4)
    run = Run(cfg, tmp_path / "run", "cpu", devices=1)
    assert {p.part for p in run.task.train} == {"all", "wide"} and len(run.task.train) == 128
    assert all(len(p.prompt) == len(run.task.train[0].prompt) for p in run.task.train)  # padded to the model's width
    held = [s for s in run.task.evaluation_sets if s.name == "held"][0]
    assert held.weight is None and {p.part for p in held.problems} == {"held"}
    assert not {p.prompt for p in held.problems} & {p.prompt for p in run.task.train}
    metrics = run.evaluate()
    for name in ("all", "wide", "held"):
        assert 0 <= metrics[f"eval/pass_rate/{name}"] <= 1 and metrics[f"eval/pass_rate_se/{name}"] >= 0
    assert metrics["eval/pass_rate"] == pytest.approx(0.25 * metrics["eval/pass_rate/all"]
                                                      + 0.75 * metrics["eval/pass_rate/wide"])
    batch = run.c.curriculum.sample(4)
    assert [run.task.train[i].part for i in batch] == ["all", "wide", "wide", "wide"]

    train(tiny_recipe(PARTS, DOWNSTREAM, run_steps=4), tmp_path / "trained", device="cpu")
    records = [json.loads(line) for line in (tmp_path / "trained" / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in records if r["step"] > 0]
    assert trained and all("rollout/pass_rate/all" in r and "rollout/pass_rate/wide" in r for r in trained)
    assert all("eval/pass_rate/held" in r for r in records)
    assert not any("rollout/pass_rate/held" in r for r in records)  # downstream: never trained on


def test_a_downstream_set_that_overlaps_training_is_refused(tiny_recipe, tmp_path):
    """The same digits and data seed as a part draw the same problems (validation first, then the pool): a set of
    40 holds the part's 16 validation problems and its pool's first 24. It would measure no transfer."""
    from recipe.preflight import check_mixture_task

    cfg = tiny_recipe("task.parts={a: {min_digits: 2, train_size: 64, validation_size: 16, data_seed: 5}}",
                      "task.downstream={d: {min_digits: 2, validation_size: 40, data_seed: 5}}")
    with pytest.raises(ConfigError, match=r"task.downstream.d: 24 of its prompts are in part 'a'"):
        check_mixture_task(cfg)


def test_parts_read_from_one_file_by_source_each_with_its_reward(tmp_path):
    """verl's layout: one Parquet-like file whose data_source column says the part; a part keeps its rows."""
    from recipe.config import load_recipe
    from recipe.mixture import build_mixture_task
    from recipe.preflight import check_mixture_task

    rows = [{"prompt": f"{i} + {i} = ?", "answer": str(2 * i), "data_source": "math" if i % 2 else "trivia"}
            for i in range(40)]
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    parts = (f"task.parts={{math: {{name: file, train_path: '{path}', source: math, validation_size: 4}}, "
             f"trivia: {{name: file, train_path: '{path}', source: trivia, validation_size: 4, reward: exact_match}}}}")
    cfg = load_recipe(None, ["task.part_key=data_source", parts, "eval.num_prompts=4"])
    check_mixture_task(cfg)
    task = build_mixture_task(cfg.task, tokenizer=None)
    assert [len(s.problems) for s in task.evaluation_sets] == [4, 4] and len(task.train) == 32
    assert task.check_part("it is 4</think>\\boxed{4}", "4", "math")  # math-verify reads the boxed answer
    assert not task.check_part("it is 4</think>\\boxed{4}", "4", "trivia")  # exact match wants "4" alone
    assert task.check_part("so</think> 4 ", "4", "trivia")
    with pytest.raises(ConfigError, match="task.parts.math: no rows with source 'algebra'"):
        check_mixture_task(load_recipe(None, ["task.part_key=data_source", "eval.num_prompts=4", parts.replace(
            "source: math", "source: algebra")]))


def test_a_budget_metric_no_part_defines_is_refused_at_plan_time():
    from sweeps.planner import plan_sweep
    from sweeps.spec import spec_from_dict

    overrides = {"task": {"parts": {"short": {"max_digits": 2, "train_size": 512}, "long": {"min_digits": 3}}}}
    data = {"name": "t", "budget": {"fit_at": 10, "target": 20, "metric": "long"}, "seeds": [0],
            "overrides": overrides}
    assert [job.recipe.task.parts["long"] for job in plan_sweep(spec_from_dict(data, "spec.yaml"))] == \
        [{"min_digits": 3}]
    data["budget"]["metric"] = "medium"
    with pytest.raises(ConfigError, match="budget.metric: got 'medium', but base's task evaluates no set of that "
                                          "name; use one of whole, short, long"):
        plan_sweep(spec_from_dict(data, "spec.yaml"))
    with pytest.raises(ConfigError, match=r"budget.metric: got 'long'.*use whole \(this task has no parts"):
        plan_sweep(spec_from_dict({**data, "overrides": {}, "budget": {**data["budget"], "metric": "long"}},
                                  "spec.yaml"))


def test_a_part_whose_file_is_missing_is_named(tmp_path):
    from recipe.config import load_recipe
    from recipe.preflight import check_mixture_task

    cfg = load_recipe(None, [f"task.parts={{a: {{name: file, train_path: '{tmp_path}/gone.jsonl'}}}}"])
    with pytest.raises(ConfigError, match=r"task.parts.a.train_path: got '.*gone.jsonl', no such file"):
        check_mixture_task(cfg)


def test_a_mixture_resumed_after_an_interruption_reproduces_the_uninterrupted_run(tiny_recipe, tmp_path):
    """The partwise curriculum's state rides in the checkpoint: the resumed run draws and scores as the other."""
    from recipe.engines import train
    from tests.recipe.test_loop import comparable

    torch.set_num_threads(1)
    cfg = tiny_recipe(PARTS, DOWNSTREAM, "eval.every_steps=2", "curriculum=no_positive_resampling", run_steps=8)
    reference = train(cfg, tmp_path / "reference", device="cpu")
    train(cfg, tmp_path / "interrupted", device="cpu", stop_at_step=6)  # checkpoint at 4
    resumed = train(cfg, tmp_path / "interrupted", device="cpu")
    assert [comparable(r) for r in resumed] == [comparable(r) for r in reference]
    assert "eval/pass_rate/held" in comparable(reference[-1]) and "curriculum/retired_frac/wide" in reference[-1]
