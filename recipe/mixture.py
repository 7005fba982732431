"""Task mixtures at run time: the parts' prompts in one training pool, each checked by its part's reward, drawn into
every batch by weight (PartwiseCurriculum), and the sets every evaluation scores (each part's validation split and
the downstream sets). recipe/task_parts.py states and checks the config; recipe/evaluation.py scores the sets.

The pool is the parts' training problems in the config's order, part j owning ids offset_j .. offset_j + n_j - 1.
"""

from __future__ import annotations

import bisect
import copy
import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from components.registry import ConfigError
from recipe.code_problems import build_code_problem_task
from recipe.code_reward import CodeReward, CodeTask, JobSandbox
from recipe.embedded_code import build_embedded_code_task, expression_program
from recipe.task_parts import Part, batch_counts, mixture_parts
from recipe.run_config import CODE_TASKS, FILE_TASKS
from recipe.task_files import read_code_file, read_rows_of
from recipe.tasks import (MathTask, Problem, Task, build_addition_task, build_math_task, build_task, file_problems,
                          final_answer)


@dataclass(frozen=True)
class EvaluationSet:
    """Problems an evaluation scores under one name: a part's validation split (weight: its share of the whole)
    or a downstream set (weight None: reported beside the whole, never in it)."""

    name: str
    problems: list[Problem]
    weight: float | None


@dataclass
class MixtureTask(Task):
    """Parts in one pool; `check_all` scores each response with its problem's part's reward, a part's rows at once."""

    checkers: dict[str, BatchChecker] = dataclasses.field(default_factory=dict)
    part_sizes: list[int] = dataclasses.field(default_factory=list)
    weights: list[float] = dataclasses.field(default_factory=list)
    evaluation_sets: list[EvaluationSet] = dataclasses.field(default_factory=list)

    def check(self, response_text: str, answer: str) -> bool:
        raise TypeError("a mixture's problems are checked by their part: call check_part")

    def check_part(self, response_text: str, answer: str, part: str | None) -> bool:
        return self.checkers[part]([response_text], [answer])[0]

    def check_all(self, responses: list[str], answers: list[str], parts: list[str | None]) -> list[bool]:
        """Each part's rows through its checker in one call (a code part's programs run in parallel)."""
        correct = [False] * len(responses)
        for part in dict.fromkeys(parts):
            rows = [i for i, name in enumerate(parts) if name == part]
            for i, ok in zip(rows, self.checkers[part]([responses[i] for i in rows], [answers[i] for i in rows]),
                             strict=True):
                correct[i] = ok
        return correct

    @property
    def part_names(self) -> list[str]:
        return [s.name for s in self.evaluation_sets if s.weight is not None]


def exact_match(response_text: str, answer: str) -> bool:
    """The answer section (after the last `</think>`, else the whole response) is the answer, spaces trimmed."""
    section = final_answer(response_text)
    return (response_text if section is None else section).strip() == answer.strip()


BatchChecker = Callable[[list[str], list[str]], list[bool]]  # (responses, answers) -> each one's verdict


def part_checker(task: Task, reward: str) -> BatchChecker:
    """The checker of a part: its task's own ("default"), or the reward it names (task_parts.REWARDS)."""
    if reward == "math_verify":
        return lambda texts, answers: [MathTask.check(task, text, answer) for text, answer in zip(texts, answers)]
    if reward == "exact_match":
        return lambda texts, answers: [exact_match(text, answer) for text, answer in zip(texts, answers)]
    return lambda texts, answers: task.check_all(texts, answers, [None] * len(texts))


def build_part(part: Part, width: int, tokenizer, key: str, sandbox: JobSandbox, downstream: bool = False) -> Task:
    """One part's task, every problem tagged with the part's name; an embedded part's prompts are padded to the
    mixture's `width` digits (the model's). A downstream set trains on nothing: its validation is what it evaluates
    (an embedded set's validation_size draws; every row of a file, both paths when it has two)."""
    cfg = part.task
    if cfg.name == "embedded":
        task = build_addition_task(0 if downstream else cfg.train_size, cfg.validation_size, cfg.min_digits,
                                   cfg.max_digits, cfg.data_seed, width=width)
    elif cfg.name in FILE_TASKS:
        task = (build_any_task(cfg, tokenizer, sandbox, part.source, key) if cfg.name in CODE_TASKS
                else build_math_task(cfg, tokenizer, source=part.source, key=key))
        if downstream:
            task = dataclasses.replace(task, train=[], validation=task.validation + task.train)
    else:
        task = build_any_task(cfg, tokenizer, sandbox)

    def tag(problems):
        return [dataclasses.replace(p, part=part.name) for p in problems]

    return dataclasses.replace(task, name=part.name, train=tag(task.train), validation=tag(task.validation))


def build_mixture_task(cfg, tokenizer, sandbox: JobSandbox | None = None) -> MixtureTask:
    """cfg: run_config.TaskConfig with parts. Every part and downstream set built, the downstream sets checked
    disjoint from the training pool (a set trained on measures no transfer); code parts share `sandbox`."""
    parts, downstream = mixture_parts(cfg)
    sandbox = sandbox or JobSandbox()
    built = {part.name: build_part(part, cfg.max_digits, tokenizer, f"task.parts.{part.name}", sandbox)
             for part in parts}
    extra = {part.name: build_part(part, cfg.max_digits, tokenizer, f"task.downstream.{part.name}", sandbox,
                                   downstream=True) for part in downstream}
    check_disjoint({name: task.train for name, task in built.items()},
                   {name: task.validation for name, task in extra.items()}, lambda problem: problem.prompt)
    checkers = {part.name: part_checker(built[part.name], part.reward) for part in parts}
    checkers.update({part.name: part_checker(extra[part.name], part.reward) for part in downstream})
    sets = [EvaluationSet(part.name, built[part.name].validation, part.weight) for part in parts]
    sets += [EvaluationSet(part.name, extra[part.name].validation, None) for part in downstream]
    return MixtureTask("mixture", train=[p for task in built.values() for p in task.train],
                       validation=[p for s in sets for p in s.problems], checkers=checkers,
                       part_sizes=[len(built[part.name].train) for part in parts],
                       weights=[part.weight for part in parts], evaluation_sets=sets)


def raw_prompts(part: Part, width: int, downstream: bool) -> tuple[list | None, int]:
    """(prompts, validation prompts) of a part as its data states them, before any chat template: what a plan
    checks without the model's tokenizer (embedded parts are drawn, files read). prompts: a part's training pool,
    a downstream set's evaluated prompts (embedded: its validation draw; a file: every row); None for a task drawn
    through the chat template (word_problems)."""
    cfg = part.task
    if cfg.name == "embedded":
        task = build_addition_task(0 if downstream else cfg.train_size, cfg.validation_size, cfg.min_digits,
                                   cfg.max_digits, cfg.data_seed, width=width)
        return [p.prompt for p in (task.validation if downstream else task.train)], len(task.validation)
    if cfg.name == "embedded_code":
        task = build_embedded_code_task(0 if downstream else cfg.train_size, cfg.validation_size, cfg.data_seed,
                                        reward=None)
        return [p.prompt for p in (task.validation if downstream else task.train)], len(task.validation)
    if cfg.name not in FILE_TASKS:  # drawn through the model's chat template: checked when the job builds it
        return None, cfg.validation_size
    from recipe.task_files import TaskKeys

    read_task_file = read_rows_of(cfg.name)
    keys = TaskKeys(prompt=cfg.prompt_key, answer=cfg.answer_key, part=cfg.part_key)
    paths = [cfg.train_path] + ([cfg.validation_path] if downstream and cfg.validation_path else [])
    rows = [row for path in paths for row in read_task_file(path, keys) if not part.source or row.part == part.source]
    if downstream:
        return [row.prompt for row in rows], len(rows)
    validation = len(read_task_file(cfg.validation_path, keys)) if cfg.validation_path else cfg.validation_size
    return [row.prompt for row in rows], validation


def check_mixture(cfg) -> None:
    """A mixture's plan-time checks (cfg: a RecipeConfig): every part has rows to train on and validation prompts
    for the evaluation, and no downstream set shares a prompt with the training parts."""
    parts, downstream = mixture_parts(cfg.task)
    prompts = {}
    for part, section in [(p, "task.parts") for p in parts] + [(p, "task.downstream") for p in downstream]:
        train, validation = raw_prompts(part, cfg.task.max_digits, section == "task.downstream")
        key = f"{section}.{part.name}"
        if train is None:
            continue
        if not train:
            raise ConfigError(f"{key}: no rows{' with source ' + repr(part.source) if part.source else ''}; "
                              "give the part a file with rows (or a source its task.part_key field holds)")
        if section == "task.parts" and validation < cfg.eval.num_prompts:
            raise ConfigError(f"{key}: its validation split holds {validation:,} prompts, fewer than eval.num_prompts "
                              f"({cfg.eval.num_prompts:,}) each part is scored on; raise its validation_size or lower "
                              "eval.num_prompts")
        prompts[part.name] = train
    check_disjoint({p.name: prompts[p.name] for p in parts if p.name in prompts},
                   {p.name: prompts[p.name] for p in downstream if p.name in prompts}, lambda prompt: prompt)


def check_disjoint(training: dict[str, Sequence], downstream: dict[str, Sequence], prompt_of: Callable) -> None:
    """No downstream set shares a prompt with a part's training pool; ConfigError names both, never the prompt."""
    trained = {}
    for name, problems in training.items():
        for problem in problems:
            trained.setdefault(prompt_key(prompt_of(problem)), name)
    for name, problems in downstream.items():
        shared = [trained[key] for key in map(prompt_key, map(prompt_of, problems)) if key in trained]
        if shared:
            raise ConfigError(f"task.downstream.{name}: {len(shared)} of its prompts are in part {shared[0]!r}'s "
                              "training pool, so it would not measure transfer; draw it from other data (another "
                              "file, other digits or another data_seed), or make it a part")


def prompt_key(prompt: Any) -> str:
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True)


def build_any_task(cfg, tokenizer, sandbox: JobSandbox, source: str = "", key: str = "task") -> Task:
    """recipe.tasks.build_task's tasks, and the code tasks, whose programs run in `sandbox` (source, key: a file
    part's rows and its name, as build_math_task's)."""
    if cfg.name == "embedded_code":
        reward = CodeReward(sandbox, extract=expression_program)
        return build_embedded_code_task(cfg.train_size, cfg.validation_size, cfg.data_seed, reward)
    if cfg.name == "code_problems":
        return build_code_problem_task(cfg.train_size, cfg.validation_size, cfg.data_seed, tokenizer,
                                       CodeReward(sandbox))
    if cfg.name == "code_file":
        if not cfg.train_path:
            raise ValueError("task.train_path: required when task.name is 'code_file' (rows of a prompt and its tests)")
        train, validation = file_problems(cfg, tokenizer, read_code_file, source, key)
        return CodeTask(cfg.name, train=train, validation=validation, reward=CodeReward(sandbox))
    return build_task(cfg, tokenizer)


def build_run_task(cfg, tokenizer, run_dir=None) -> Task:
    """The run's task: a mixture when task.parts names parts, else recipe.tasks.build_task's single task. Its code
    parts run their programs in one sandbox pool, started at the first program, its layers recorded in run_dir."""
    sandbox = JobSandbox(run_dir)
    return build_mixture_task(cfg, tokenizer, sandbox) if cfg.parts else build_any_task(cfg, tokenizer, sandbox)


def is_mixture(task: Task) -> bool:
    return isinstance(task, MixtureTask)


def part_seed(seed: int, index: int) -> int:
    """Part `index`'s curriculum stream from the run's seed: independent of the other parts'."""
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0])


class PartwiseCurriculum:
    """The run's curriculum walked part by part: one copy of it over each part's prompts, and every batch of n
    prompts takes batch_counts(n, weights) of them from the parts, in order. Same interface as a Curriculum
    (components/curricula.py), so a No-Positive-Resampling run retires prompts in every part."""

    def __init__(self, curriculum, part_sizes: Sequence[int], weights: Sequence[float], names: Sequence[str]) -> None:
        self.parts = [copy.deepcopy(curriculum) for _ in part_sizes]
        self.sizes, self.weights, self.names = list(part_sizes), list(weights), list(names)
        self.offsets = [sum(self.sizes[:j]) for j in range(len(self.sizes))]
        self.pool_size = sum(self.sizes)

    def reset(self, pool_size: int, seed: int) -> None:
        if pool_size != self.pool_size:
            raise ValueError(f"PartwiseCurriculum: pool of {pool_size}, but the parts hold {self.pool_size}")
        for index, (part, size) in enumerate(zip(self.parts, self.sizes)):
            part.reset(size, part_seed(seed, index))

    def sample(self, num_prompts: int) -> list[int]:
        counts = batch_counts(num_prompts, self.weights)
        return [offset + i for part, offset, count in zip(self.parts, self.offsets, counts) for i in part.sample(count)]

    def update(self, prompt_ids: Sequence[int], pass_rates: Sequence[float]) -> None:
        for prompt_id, pass_rate in zip(prompt_ids, pass_rates):
            index = bisect.bisect_right(self.offsets, prompt_id) - 1
            self.parts[index].update([prompt_id - self.offsets[index]], [pass_rate])

    def metrics(self) -> dict[str, float]:
        retired = sum(len(part.retired) for part in self.parts)
        metrics = {"curriculum/epoch": float(min(part.epoch for part in self.parts)),
                   "curriculum/retired_frac": retired / self.pool_size}
        for name, part in zip(self.names, self.parts):
            metrics[f"curriculum/retired_frac/{name}"] = len(part.retired) / part.pool_size
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {"parts": [part.state_dict() for part in self.parts]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for part, part_state in zip(self.parts, state["parts"]):
            part.load_state_dict(part_state)


def reset_curriculum(components, task: Task, seed: int) -> None:
    """Reset the run's curriculum over the task's pool; a mixture's becomes a PartwiseCurriculum first."""
    if is_mixture(task):
        components.curriculum = PartwiseCurriculum(components.curriculum, task.part_sizes, task.weights,
                                                   task.part_names)
    components.curriculum.reset(len(task.train), seed)


def part_pass_rates(correct, parts: Sequence[str | None], samples_per_prompt: int) -> dict[str, float]:
    """rollout/pass_rate/<part> of a batch whose prompt i (of part parts[i]) has rows i G .. i G + G - 1; none
    when its prompts have no parts."""
    if not parts or parts[0] is None:
        return {}
    per_prompt = correct.float().view(len(parts), samples_per_prompt).mean(dim=1)
    metrics = {}
    for name in dict.fromkeys(parts):
        rows = [i for i, part in enumerate(parts) if part == name]
        metrics[f"rollout/pass_rate/{name}"] = float(per_prompt[rows].mean())
    return metrics

