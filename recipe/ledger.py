"""The run ledger every engine keeps: compute, training metrics, evaluation and checkpoint schedules, records.

A RunLedger holds what a run accounts for between its steps, whichever engine trains it (recipe/run.py's
Run for the native engine and PipelineRL's trainer, recipe/engines/trl's callback for TRL):
- the compute meter (recipe/compute.py) and the means of the train/rollout metrics since the last
  evaluation point (Averager);
- the evaluation schedule: recipe.evaluation.evaluation_due at each step, against the compute of the last
  evaluation;
- the records: an evaluation's results + the pending means + the curriculum's metrics + the compute, as one
  line of metrics.jsonl (and MLflow) through recipe.tracking.Tracker;
- the checkpoint schedule (checkpoint.every_steps, every_minutes) and the resume state of all the above.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from recipe.compute import ComputeMeter
from recipe.config import RecipeConfig, run_id, to_dict
from recipe.evaluation import compute_of, evaluation_due, evaluation_steps
from recipe.tracking import Tracker


class Averager:
    """Means of the train/rollout metrics of the steps since the last evaluation point (maxima for `*_max` keys)."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def add(self, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            if key.endswith("_max"):
                self.sums[key] = max(self.sums.get(key, value), value)
                self.counts[key] = 1
            else:
                self.sums[key] = self.sums.get(key, 0.0) + value
                self.counts[key] = self.counts.get(key, 0) + 1

    def pop(self) -> dict[str, float]:
        means = {key: self.sums[key] / self.counts[key] for key in sorted(self.sums)}
        self.sums, self.counts = {}, {}
        return means


class RunLedger:
    """The bookkeeping of one run (see the module docstring). `state`: what state_dict() returned when the run
    was last checkpointed (None: a new run). `log` False keeps no records (a trl job's ranks other than the main
    one: they learn the main process's decisions by broadcast)."""

    def __init__(self, cfg: RecipeConfig, run_dir: Path, meter: ComputeMeter, curriculum: Any = None,
                 state: dict | None = None, log: bool = True) -> None:
        self.cfg, self.meter, self.curriculum = cfg, meter, curriculum
        self.pending = Averager()
        self.eval_steps = evaluation_steps(cfg.eval.every_steps, cfg.eval.points_per_doubling, cfg.max_steps,
                                           cfg.eval.min_gap_steps)
        self.step = 0
        if state is not None:
            self.load_state_dict(state)
        self.last_checkpoint, self.last_checkpoint_time = self.step, time.monotonic()
        self.tracker = (Tracker(Path(run_dir), cfg.tracking, to_dict(cfg), run_id(cfg),
                                None if state is None else self.step) if log else None)
        # The compute of the last evaluation (evaluation_due's last_compute): the last record's; on resume without
        # records (a rank that keeps none), the checkpoint's, whose evaluations are all in the metrics file.
        records = self.tracker.records if self.tracker is not None else []
        self.last_eval_compute = (self.compute_at(records[-1], records[-1]["step"]) if records
                                  else None if state is None else self.compute())

    def state_dict(self) -> dict[str, Any]:
        """The resume state: the step, the compute meter, the pending means and the curriculum's state."""
        return {"step": self.step, "compute": self.meter.state_dict(),
                "pending": [self.pending.sums, self.pending.counts],
                "curriculum": self.curriculum.state_dict() if self.curriculum is not None else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = state["step"]
        self.meter.load_state_dict(state["compute"])
        self.pending.sums, self.pending.counts = state["pending"]
        if self.curriculum is not None and state.get("curriculum") is not None:
            self.curriculum.load_state_dict(state["curriculum"])

    def compute_at(self, metrics: dict, step: int) -> float:
        return compute_of(metrics, step, self.cfg.eval.compute_unit)

    def compute(self, step: int | None = None) -> float:
        """The compute spent so far in eval.compute_unit (what places and sizes evaluations by compute)."""
        return self.compute_at(self.meter.metrics(), self.step if step is None else step)

    def eval_due(self, step: int | None = None) -> bool:
        """recipe.evaluation.evaluation_due: a scheduled step, or the first step past an eval.at_compute point."""
        step = self.step if step is None else step
        return evaluation_due(self.cfg.eval, step, self.eval_steps, self.compute(step), self.last_eval_compute)

    def record(self, step: int, evaluation: dict, extra: dict | None = None) -> dict:
        """The evaluation point at `step`: its results, `extra`, the training metrics' means since the last point,
        the curriculum's metrics and the compute; logged (metrics.jsonl, MLflow) when this ledger keeps records."""
        self.last_eval_compute = self.compute(step)
        record = {"step": step, **evaluation, **(extra or {})}
        record.update(self.pending.pop())
        record.update(self.curriculum.metrics() if self.curriculum is not None else {})
        record.update(self.meter.metrics())
        if self.tracker is not None:
            self.tracker.log(record)
        return record

    def checkpoint_due(self) -> bool:
        """every_steps steps, or every_minutes of wall-clock, since the last checkpoint; and the last step."""
        every = self.cfg.checkpoint
        return (self.step - self.last_checkpoint >= every.every_steps or self.step == self.cfg.max_steps
                or (self.step > self.last_checkpoint and self.checkpoint_overdue()))

    def checkpoint_overdue(self) -> bool:
        """checkpoint.every_minutes of wall-clock since this process started or last checkpointed."""
        return time.monotonic() - self.last_checkpoint_time >= 60 * self.cfg.checkpoint.every_minutes

    def checkpointed(self) -> None:
        """A checkpoint of this step was taken: both schedules restart from here."""
        self.last_checkpoint, self.last_checkpoint_time = self.step, time.monotonic()

    def finish(self, status: str = "FINISHED") -> None:
        if self.tracker is not None:
            self.tracker.finish(status)

    @property
    def records(self) -> list[dict]:
        return self.tracker.records if self.tracker is not None else []
