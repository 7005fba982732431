"""One sweep job: train a recipe in its run directory until the compute target, resumably.

A `TrainingJob` is the picklable callable submitit runs (as a local process, a SLURM array task,
or in-process). It pins torch to its share of the cores, takes the run directory's lock (so two
launches of one job can never write the same run), trains or resumes, and writes done.json once an
evaluation at or past the target is recorded. On SLURM, submitit calls `checkpoint` when the job
hits its time limit or is preempted: the job is requeued and resumes from its last checkpoint.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Optional

from components.registry import ConfigError
from recipe.config import RecipeConfig
from sweeps.progress import compute_key
from sweeps.state import RunLock, is_done, mark_done


# The key of a job's result when it stopped on an input error: deterministic, so the driver does not retry it.
INPUT_ERROR = "input_error"


class TargetReached(Exception):
    """Raised from the evaluation hook once the compute target is reached: training stops there."""


class InjectedFault(RuntimeError):
    """A crash requested by the spec's `faults` (to test failure handling)."""


@dataclasses.dataclass
class TrainingJob:
    recipe: RecipeConfig
    run_dir: str
    unit: str
    target: float
    threads: int
    fault_at_step: Optional[int] = None

    def __call__(self) -> dict[str, Any]:
        import torch

        from recipe.engines import train

        torch.set_num_threads(self.threads)
        run_dir = Path(self.run_dir)
        with RunLock(run_dir):
            if is_done(run_dir):
                return json_summary(run_dir)
            started = time.time()
            key = compute_key(self.unit)
            reached: dict[str, Any] = {}

            def on_eval(record: dict) -> None:
                if record.get(key, 0.0) >= self.target:
                    reached.update(record)
                    raise TargetReached

            def on_step(step: int, meter: Any) -> None:
                if self.fault_at_step is not None and step >= self.fault_at_step:
                    raise InjectedFault(f"fault injected at step {step} by the sweep spec's faults")

            try:
                # device "auto": the GPU where the job got one (SLURM gpus_per_node), else the CPU.
                train(self.recipe, run_dir, device="auto", on_eval=on_eval, on_step=on_step)
            except TargetReached:
                pass
            except ConfigError as error:  # an input only the job's node could check (recipe.preflight)
                return {INPUT_ERROR: " ".join(str(error).split())}
            if not reached:
                raise RuntimeError(
                    f"{run_dir}: max_steps={self.recipe.max_steps} ended before {key} reached {self.target}; "
                    "raise max_steps in the spec's overrides or lower budget.target"
                )
            summary = {"step": reached.get("step"), key: reached.get(key), "eval/pass_rate": reached.get("eval/pass_rate"),
                       "wall_seconds_this_attempt": time.time() - started}
            mark_done(run_dir, summary)
            return summary

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """submitit's hook on timeout or preemption: requeue this same job (it resumes from disk)."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


def json_summary(run_dir: Path) -> dict[str, Any]:
    from recipe.tracking import read_json_file

    return read_json_file(run_dir / "done.json")
