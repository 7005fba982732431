"""One sweep job: train a recipe in its run directory until the compute target, resumably.

A `TrainingJob` is the picklable callable submitit runs (as a local process, a SLURM array task,
or in-process). It pins torch to its share of the cores, takes the run directory's lock (so two
launches of one job can never write the same run), trains or resumes, and writes done.json once an
evaluation at or past the target is recorded. On SLURM, submitit calls `checkpoint` when the job
hits its time limit or is preempted: the job is requeued and resumes from its last checkpoint.

A job of several SLURM nodes (executor.slurm.nodes, engine trl) runs one task per node: node 0's is the
job above (its launcher is accelerate's machine 0: recipe.engines.launch), every other node's only
starts that node's accelerate processes (`follow_main_node`) and stops them once the run is done.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Optional

from components.registry import ConfigError
from recipe.config import RecipeConfig
from sweeps.progress import compute_key
from sweeps.state import DONE_FILE, LOCK_WAIT_SECONDS, RunLock, is_done, mark_done


# The key of a job's result when it stopped on an input error: deterministic, so the driver does not retry it.
INPUT_ERROR = "input_error"
# The key of a job's result when another process held its run (a second launch of the same job): the driver
# watches that process instead of counting a failure.
TRAINED_ELSEWHERE = "trained_elsewhere"


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

        from recipe.process_exit import skip_final_collections

        skip_final_collections()  # the driver sees the job finished once its process has exited
        # The job's thread count, restored after: the debug executor runs jobs inside the caller's process.
        previous = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            return self.run_training()
        finally:
            torch.set_num_threads(previous)

    def run_training(self) -> dict[str, Any]:
        from recipe.engines import train

        from recipe.engines.launch import slurm_machines

        run_dir = Path(self.run_dir)
        machines = slurm_machines()
        if machines is not None and machines.count > 1 and machines.rank != "0":
            return follow_main_node(self.recipe, run_dir, machines)
        lock = RunLock(run_dir)
        if machines is None or machines.count == 1:
            if not lock.wait(LOCK_WAIT_SECONDS):
                # Another process trains this run: a driver killed between submitting the job and recording its id
                # submits it again, and on SLURM both copies may start. This one leaves the run to the other. (On
                # several nodes node 0 raises instead, in `with lock`: srun then ends the step on every node,
                # whose followers would otherwise wait for a node 0 that never launches.)
                return {TRAINED_ELSEWHERE: f"{run_dir} is being trained by another process (pid {lock.holder()})"}
        with lock:
            if is_done(run_dir, self.unit, self.target):
                return json_summary(run_dir)
            # Finished at a lower target (the spec's budget.target was raised since): train on from the last
            # checkpoint; done.json is written again when the new target is reached.
            (run_dir / DONE_FILE).unlink(missing_ok=True)
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
            summary = {"step": reached.get("step"), key: reached.get(key),
                       "eval/pass_rate": reached.get("eval/pass_rate"),
                       "wall_seconds_this_attempt": time.time() - started}
            mark_done(run_dir, summary)
            return summary

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """submitit's hook on timeout or preemption: requeue this same job (it resumes from disk)."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


# How long a follower node waits for node 0 to write the run's config.yaml, and how often it looks at the run.
CONFIG_WAIT_SECONDS, FOLLOW_POLL_SECONDS = 600.0, 2.0


def follow_main_node(recipe: RecipeConfig, run_dir: Path, machines: Any) -> dict[str, Any]:
    """A node other than 0: run its share of the accelerate processes until they exit or the run is done.

    Node 0's task owns the run (its lock, metrics, done.json) and decides the job's result; this one's
    returned dict only reports (its exit code is in the node's launch log). Node 0 stops its own processes
    at the target; these see done.json and stop too, rather than wait out a collective's timeout. A failure
    of node 0 ends the step on every node (srun --kill-on-bad-exit, sweeps/slurm_options.py).
    """
    import os
    import signal
    import subprocess

    from recipe.engines.launch import launch_command
    from recipe.engines.trl import LAUNCHED_ENV

    deadline = time.time() + CONFIG_WAIT_SECONDS
    while not (run_dir / "config.yaml").is_file():  # written by node 0 before it launches
        if time.time() > deadline:
            raise RuntimeError(f"{run_dir}: node 0 wrote no config.yaml in {CONFIG_WAIT_SECONDS:g} s; see its log")
        time.sleep(FOLLOW_POLL_SECONDS)
    engine = recipe.engine
    command = launch_command(run_dir, engine.num_processes, engine.sharding, recipe.model.dtype, machines=machines)
    with open(run_dir / f"launch-node{machines.rank}.log", "ab") as log:
        process = subprocess.Popen(command, start_new_session=True, stdout=log, stderr=subprocess.STDOUT,
                                   env={**os.environ, LAUNCHED_ENV: "1"})
    try:
        while process.poll() is None and not is_done(run_dir):
            time.sleep(FOLLOW_POLL_SECONDS)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait()
    return {"node": machines.rank, "returncode": process.returncode}


def json_summary(run_dir: Path) -> dict[str, Any]:
    from recipe.tracking import read_json_file

    return read_json_file(run_dir / "done.json")
