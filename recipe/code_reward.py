"""The code reward: a response's program run against its row's tests in the sandbox, +1 when all pass, else -1.

    sandbox = Sandbox(workers=2)                       # recipe/sandbox: one pool per job
    reward = CodeReward(sandbox)                       # partial=True: 2 * fraction_passed - 1 instead
    reward.rewards(responses, [read_row_tests(row) for row in rows])   # recipe.code_tests

A response's program is the last fenced ```python (```py, ```python3) block, or what a given `extract`
returns; a response without one scores -1 without a sandbox. Problem.answer of a code task holds its tests
as text (recipe.code_tests.encode_tests); CodeTask is a Task whose rewards run the whole batch through the
sandbox in parallel.
"""

from __future__ import annotations

import atexit
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from recipe.code_tests import decode_tests
from recipe.sandbox import Job, Limits, Outcome, Sandbox
from recipe.tasks import Task

PYTHON_FENCES = ("python", "python3", "py")


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(info string, body) of each closed ``` fence; a fence cut off by the token budget is not a block."""
    blocks, language, lines = [], None, []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            if language is None:
                language, lines = stripped[3:].strip().lower(), []
            else:
                blocks.append((language, "\n".join(lines) + "\n"))
                language = None
        elif language is not None:
            lines.append(line)
    return blocks


def extract_program(response: str) -> str | None:
    """The last fenced Python block of the response, or None."""
    programs = [body for language, body in fenced_blocks(response) if language in PYTHON_FENCES]
    return programs[-1] if programs else None


@dataclass(frozen=True)
class CodeScore:
    reward: float  # +1 / -1, or 2 * fraction - 1 with partial credit
    passed: int
    total: int
    verdicts: tuple[str, ...]

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


class JobSandbox:
    """The job's sandbox pool, started when its first program runs (a run without code starts none): which layers
    hold is said once on stderr and written to run_dir/sandbox.json; the pool closes when the process exits.
    workers: programs run at once (None: the CPUs this process may use, the job's cores)."""

    def __init__(self, run_dir: str | Path | None = None, workers: int | None = None):
        self.run_dir, self.workers, self._sandbox = run_dir, workers, None

    def run(self, jobs: Sequence[Job]) -> list[Outcome]:
        if self._sandbox is None:
            self._sandbox = Sandbox(workers=self.workers)
            atexit.register(self._sandbox.close)
            record = self._sandbox.layers_record()
            off = [f"{name} ({why})" for name, why in record["layers"].items() if name not in record["active"]]
            print(f"sandbox: {record['backend']}, {record['workers']} workers; layers on: "
                  f"{', '.join(record['active']) or 'the base only'}; off: {', '.join(off) or 'none'}",
                  file=sys.stderr, flush=True)
            if self.run_dir is not None:
                self._sandbox.write_layers_record(self.run_dir)
        return self._sandbox.run(jobs)


class CodeReward:
    """partial: reward 2 * fraction - 1 and run every test; else +1 / -1 and stop at the first failing test."""

    def __init__(self, sandbox: Sandbox | JobSandbox, *, partial: bool = False,
                 extract: Callable[[str], str | None] = extract_program, limits: Limits | None = None):
        self.sandbox, self.partial, self.extract, self.limits = sandbox, partial, extract, limits

    def score(self, responses: Sequence[str], tests: Sequence[Sequence]) -> list[CodeScore]:
        jobs = [Job(self.extract(response), tuple(row_tests), stop_at_first_failure=not self.partial,
                    limits=self.limits) for response, row_tests in zip(responses, tests, strict=True)]
        return [self.scored(outcome) for outcome in self.sandbox.run(jobs)]

    def scored(self, outcome: Outcome) -> CodeScore:
        if self.partial:
            reward = 2.0 * outcome.fraction - 1.0
        else:
            reward = 1.0 if outcome.all_passed else -1.0
        return CodeScore(reward, outcome.passed, outcome.total, outcome.verdicts)

    def rewards(self, responses: Sequence[str], tests: Sequence[Sequence]) -> list[float]:
        return [score.reward for score in self.score(responses, tests)]


@dataclass
class CodeTask(Task):
    """A Task whose answers are encoded tests; its rewards run the batch through the sandbox in parallel."""
    reward: CodeReward | None = None

    def rewards(self, responses: list[str], answers: list[str]) -> list[float]:
        if self.reward is None:
            raise ValueError(f"task {self.name}: a CodeTask needs reward=CodeReward(Sandbox(...))")
        return self.reward.rewards(responses, [decode_tests(answer) for answer in answers])

    def check(self, response_text: str, answer: str) -> bool:
        return self.rewards([response_text], [answer])[0] > 0

    def check_all(self, responses: list[str], answers: list[str], parts: list[str | None]) -> list[bool]:
        return [reward > 0 for reward in self.rewards(responses, answers)]
