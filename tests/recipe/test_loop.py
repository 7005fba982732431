"""The training loop: every component trains, PPO-off-policy-k, and resume after a kill is exact."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from components import REGISTRIES
from recipe.engines import train
from recipe.tracking import read_metrics

# Timing-dependent metrics: the only ones two identical runs may disagree on.
TIMING = ("compute/device_seconds", "compute/device_hours", "compute/generation_seconds",
          "compute/training_seconds", "compute/evaluation_seconds", "compute/wall_seconds",
          "compute/wall_device_seconds", "compute/cpu_seconds", "eval/seconds")
# Parameters that size an alternative for the tiny testbed (defaults are for long-reasoning models).
TESTBED_PARAMS = {
    ("length_control", "interruption"): {"min_thinking": 6, "max_thinking": 8, "answer_budget": 4},
    ("length_control", "length_penalty"): {"max_length": 12, "cache_length": 4},
}


def alternatives():
    for axis, registry in REGISTRIES.items():
        for name in registry.names():
            if axis == "off_policy" and name == "pipeline_rl":
                continue  # its own processes: tests/recipe/test_pipeline.py
            yield axis, {"name": name, **TESTBED_PARAMS.get((axis, name), {})}
    yield "precision", {"name": "lm_head", "fp32_head": False}


def comparable(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in TIMING}


@pytest.mark.parametrize("axis, spec", list(alternatives()), ids=lambda v: v if isinstance(v, str) else
                         "-".join(str(x) for x in v.values()))
def test_every_alternative_trains_50_steps_with_finite_losses(tiny_recipe, tmp_path, axis, spec):
    cfg = tiny_recipe("eval.every_steps=25", "checkpoint.every_steps=50", run_steps=50)
    cfg = dataclasses.replace(cfg, **{axis: REGISTRIES[axis].check(spec, axis)})
    records = train(cfg, tmp_path / "run")
    assert [r["step"] for r in records] == [0, 25, 50]
    for record in records[1:]:
        assert math.isfinite(record["train/loss"]) and math.isfinite(record["train/grad_norm"])
        assert record["train/skipped"] < 1.0  # some minibatch kept groups and was trained on
        assert math.isfinite(record["eval/pass_rate"])
    # k >= 2: steps after the first of a round train on data some updates old, so ratios move off 1.
    assert records[-1]["train/staleness"] > 0
    assert records[-1]["loss/ratio_max"] != 1.0


def test_run_dir_of_another_config_is_refused(tiny_recipe, tmp_path):
    train(tiny_recipe(run_steps=2), tmp_path / "run")
    with pytest.raises(ValueError, match="config.yaml differs"):
        train(tiny_recipe("seed=1", run_steps=2), tmp_path / "run")


def test_resume_after_an_interruption_reproduces_the_uninterrupted_run(tiny_recipe, tmp_path):
    cfg = tiny_recipe("eval.every_steps=2", run_steps=12)
    reference = train(cfg, tmp_path / "reference")
    # Interrupted: stops at step 6 (checkpoint at 4), metrics for step 6 already written, and a
    # torn half line as a kill during a write would leave.
    interrupted = tmp_path / "interrupted"
    train(cfg, interrupted, stop_at_step=6)
    with open(interrupted / "metrics.jsonl", "a") as handle:
        handle.write('{"step": 8, "eval/pa')
    resumed = train(cfg, interrupted)
    assert [r["step"] for r in read_metrics(interrupted)] == [0, 2, 4, 6, 8, 10, 12]
    assert [comparable(r) for r in resumed] == [comparable(r) for r in reference]


def test_a_kl_penalty_charges_its_reference_and_a_resume_keeps_the_reset_reference(tiny_recipe, tmp_path):
    # reset every 3 steps, checkpoints at 4 and 8: the run resumed from step 4 must penalize toward step 3's policy
    cfg = tiny_recipe("kl_penalty=reference", "kl_penalty.reset_every=3", "eval.every_steps=2", run_steps=12)
    reference = train(cfg, tmp_path / "reference")
    last = reference[-1]
    # the reference's forward is one pass of the rows trained on, the training step's three: 1/4 of the total
    assert last["compute/reference_flops"] == pytest.approx(last["compute/training_flops"] / 4)
    assert all(record["train/kl"] > 0 for record in reference[1:])
    interrupted = tmp_path / "interrupted"
    train(cfg, interrupted, stop_at_step=7)
    resumed = train(cfg, interrupted)
    assert [comparable(r) for r in resumed] == [comparable(r) for r in reference]


def test_a_slow_run_checkpoints_by_the_clock_between_step_checkpoints(tiny_recipe, tmp_path):
    from recipe.checkpoint import load_checkpoint

    # every_steps far away, every_minutes ~0: each round boundary is past the wall-clock interval.
    cfg = tiny_recipe("eval.every_steps=2", "checkpoint.every_steps=1000", "checkpoint.every_minutes=1e-9",
                      run_steps=12)
    reference = train(cfg, tmp_path / "reference")
    interrupted = tmp_path / "interrupted"
    train(cfg, interrupted, stop_at_step=6)
    assert load_checkpoint(interrupted)["step"] == 6  # not 0: the clock took the checkpoint
    resumed = train(cfg, interrupted)
    assert [comparable(r) for r in resumed] == [comparable(r) for r in reference]


def test_kill_9_at_a_random_moment_then_the_same_command_resumes(tiny_recipe, tiny_overrides, tmp_path):
    overrides = tiny_overrides("eval.every_steps=2", "checkpoint.every_steps=4", run_steps=40)
    cfg = tiny_recipe("eval.every_steps=2", "checkpoint.every_steps=4", run_steps=40)
    reference = train(cfg, tmp_path / "reference")
    run_dir = tmp_path / "killed"
    command = [sys.executable, "-m", "sweeps.cli", "train", *overrides, "--run-dir", str(run_dir), "--threads", "1"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # Kill somewhere after the first checkpoint and before the end.
    deadline = time.time() + 120
    while len(read_metrics(run_dir)) < 4 and process.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(random.uniform(0.0, 0.5))
    process.send_signal(signal.SIGKILL)
    process.wait()
    killed_at = read_metrics(run_dir)[-1]["step"]
    assert 0 < killed_at < 40, "the kill should land mid-run"
    finished = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr
    records = read_metrics(run_dir)
    assert [r["step"] for r in records] == list(range(0, 41, 2))
    assert [comparable(r) for r in records] == [comparable(r) for r in reference]


def test_jsonl_task_trains_through_the_same_path(tiny_recipe, tmp_path):
    rows = [{"prompt": f"{a:02d}+{b:02d}=<think>", "answer": str(a + b)}
            for a in range(10, 40, 3) for b in range(5, 60, 7)]
    data = tmp_path / "math.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = tiny_recipe("task.name=jsonl", f"task.train_path={data}", "task.validation_size=8", "batch_filter=none",
                      run_steps=4)
    records = train(cfg, tmp_path / "run")
    assert [r["step"] for r in records] == [0, 4]
    assert math.isfinite(records[-1]["train/loss"])


def test_evaluation_steps_are_log_spaced_with_a_capped_gap():
    from recipe.evaluation import evaluation_steps

    steps = sorted(evaluation_steps(every_steps=20, points_per_doubling=3, max_steps=340))
    # Hand-computed: gaps floor(s (2^(1/3) - 1)) = floor(0.26 s), at least 1, at most 20.
    assert steps[:19] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 18, 22, 27, 34, 42, 52, 65]
    assert steps[19:23] == [81, 101, 121, 141] and steps[-1] == 340
    assert sum(step <= 150 for step in steps) == 23  # >= 20 points before the testbed's 90%-of-gain step
    assert sorted(evaluation_steps(every_steps=5, points_per_doubling=0, max_steps=12)) == [0, 5, 10, 12]


def test_the_smallest_gap_thins_the_first_evaluation_points():
    from recipe.evaluation import evaluation_steps

    # Hand-computed: gaps floor(s (sqrt(2) - 1)) = floor(0.414 s), at least 5, at most 40.
    steps = sorted(evaluation_steps(every_steps=40, points_per_doubling=2, max_steps=240, min_gap_steps=5))
    assert steps == [0, 5, 10, 15, 21, 29, 41, 57, 80, 113, 153, 193, 233, 240]
    # A gap of 1, the default, is the schedule before the key existed (runs begun then evaluate where they did).
    assert sorted(evaluation_steps(20, 3, 340, min_gap_steps=1))[:12] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 15]


def test_a_run_evaluates_at_the_scheduled_steps(tiny_recipe, tmp_path):
    cfg = tiny_recipe("eval.every_steps=4", "eval.points_per_doubling=2", run_steps=14)
    records = train(cfg, tmp_path / "run")
    # gaps floor(s (sqrt(2) - 1)) clipped to [1, 4]: 0 1 2 3 4 5 7 9 12 14(end)
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4, 5, 7, 9, 12, 14]


def test_evaluation_due_places_points_by_compute():
    from types import SimpleNamespace

    from recipe.evaluation import evaluation_due, samples_per_prompt

    cfg = SimpleNamespace(schedule_until=100.0, at_compute=(50.0, 200.0), samples_per_prompt=4, late_from=40.0,
                          late_samples_per_prompt=16)
    scheduled = frozenset([0, 10, 20, 30])
    assert evaluation_due(cfg, 10, scheduled, compute=90.0, last_compute=80.0)  # scheduled, inside the window
    assert not evaluation_due(cfg, 20, scheduled, compute=150.0, last_compute=120.0)  # scheduled, past it
    assert evaluation_due(cfg, 30, scheduled, compute=500.0, last_compute=150.0)  # the run's last step: always
    assert evaluation_due(cfg, 7, scheduled, compute=52.0, last_compute=45.0)  # first step past 50
    assert not evaluation_due(cfg, 8, scheduled, compute=60.0, last_compute=52.0)  # 50 evaluated already
    assert evaluation_due(cfg, 25, scheduled, compute=210.0, last_compute=120.0)  # first past the target
    assert evaluation_due(cfg, 1, scheduled, compute=60.0, last_compute=None)
    assert [samples_per_prompt(cfg, c) for c in (0.0, 39.9, 40.0, 500.0)] == [4, 4, 16, 16]
    off = SimpleNamespace(schedule_until=0.0, at_compute=(), samples_per_prompt=4, late_from=0.0,
                          late_samples_per_prompt=0)
    assert evaluation_due(off, 20, scheduled, compute=1e9, last_compute=0.0)  # the step schedule alone
    assert not evaluation_due(off, 21, scheduled, compute=1e9, last_compute=0.0)
    assert samples_per_prompt(off, 1e9) == 4


def test_a_run_evaluates_at_compute_points_and_samples_more_late(tiny_recipe, tmp_path):
    # eval.compute_unit steps makes compute the step count (the sweeps use flops; recipe.evaluation.compute_of).
    cfg = tiny_recipe("eval.every_steps=4", "eval.points_per_doubling=0", "eval.compute_unit=steps",
                      "eval.schedule_until=9", "eval.at_compute=[6,11]", "eval.late_from=8",
                      "eval.late_samples_per_prompt=3", "eval.samples_per_prompt=2", run_steps=14)
    records = train(cfg, tmp_path / "run")
    # scheduled 0 4 8 (12 is past schedule_until), 6 and 11 from at_compute, 14 the run's end
    assert [r["step"] for r in records] == [0, 4, 6, 8, 11, 14]
    assert [r["eval/samples_per_prompt"] for r in records] == [2, 2, 2, 3, 3, 3]


@pytest.mark.parametrize("override, message", [
    ("eval.at_compute=[0]", "eval.at_compute[0]"), ("eval.compute_unit=minutes", "eval.compute_unit"),
    ("eval.late_samples_per_prompt=-1", "eval.late_samples_per_prompt"),
    ("eval.schedule_until=-1", "eval.schedule_until")])
def test_bad_compute_placed_evaluation_settings_name_their_key(tiny_recipe, override, message):
    from components.registry import ConfigError

    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        tiny_recipe(override)
