"""Shared fixtures: a tiny warm-started model directory and tiny recipes around it (recipe and sweep tests)."""

from __future__ import annotations

import pytest

from recipe.run_config import ModelConfig, TaskConfig, WarmStartConfig

# A ~50k-parameter model on 1-2 digit problems: built in seconds, yet it answers some problems right,
# so RL steps see groups with mixed rewards (zero-variance filtering would otherwise drop everything).
TINY_MODEL = ModelConfig(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=2, max_positions=64)
TINY_TASK = TaskConfig(train_size=256, validation_size=32, min_digits=1, max_digits=2)
TINY_WARM_START = WarmStartConfig(steps=400, batch_size=64, lr=5e-3, teacher_correct_prob=0.5)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A Hugging Face model directory saved by the project (the warm start's own output)."""
    import torch

    from recipe.warm_start import build_warm_start

    torch.set_num_threads(1)
    path = tmp_path_factory.mktemp("tiny_model") / "model"
    build_warm_start(TINY_MODEL, TINY_WARM_START, TINY_TASK, path)
    return path


@pytest.fixture(scope="session")
def tiny_learner_dir(tmp_path_factory):
    """The tiny model warm-started to a low pass rate (~0.16, teacher right 10% of the time), like the
    embedded testbed: RL has room to raise it within a few dozen steps (learning tests)."""
    import dataclasses

    import torch

    from recipe.warm_start import build_warm_start

    torch.set_num_threads(1)
    path = tmp_path_factory.mktemp("tiny_learner") / "model"
    build_warm_start(TINY_MODEL, dataclasses.replace(TINY_WARM_START, teacher_correct_prob=0.1), TINY_TASK, path)
    return path


def tiny_override_list(model_dir, run_steps: int = 8) -> list[str]:
    """Overrides that turn the ScaleRL base recipe into a seconds-long run of the tiny model."""
    return [
        f"model.path={model_dir}",
        "task.train_size=256", "task.validation_size=32", "task.min_digits=1", "task.max_digits=2",
        "rollout.prompts_per_batch=4", "rollout.samples_per_prompt=4", "rollout.max_new_tokens=12",
        "length_control.min_thinking=6", "length_control.max_thinking=8", "length_control.answer_budget=4",
        "eval.every_steps=4", "eval.points_per_doubling=0", "eval.num_prompts=8", "eval.samples_per_prompt=2",
        "checkpoint.every_steps=4",
        # The synchronous schedule: deterministic, so tests can compare runs exactly (PipelineRL's
        # own tests opt in with off_policy=pipeline_rl).
        "off_policy=ppo_off_policy", "off_policy.k=2", "optimizer.lr=3e-4", "optimizer.warmup_steps=1",
        "tracking.mlflow=false", f"max_steps={run_steps}",
    ]


@pytest.fixture
def tiny_overrides(tiny_model_dir):
    """tiny_overrides(*overrides, run_steps=8) -> the override list (for the command line)."""
    return lambda *overrides, run_steps=8: [*tiny_override_list(tiny_model_dir, run_steps), *overrides]


@pytest.fixture
def tiny_recipe(tiny_overrides):
    """tiny_recipe(*overrides, run_steps=8) -> RecipeConfig of the tiny model."""
    from recipe.config import load_recipe

    return lambda *overrides, run_steps=8: load_recipe(None, tiny_overrides(*overrides, run_steps=run_steps))


def pytest_sessionfinish(session, exitstatus):
    """No service the suite started may outlive it (tests/services.py): a leftover one fails the session."""
    from tests.services import still_running

    alive = still_running()
    if alive:
        print(f"\nservices the tests started are still running: {', '.join(alive)}", flush=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# The modules whose tests run whole training jobs in their own processes, tens of seconds each (BENCHMARKS.md,
# "make test"). `make test` hands tests to its two workers one at a time in collection order, so these go first:
# the many short tests then fill the gaps, and the two workers finish together instead of one waiting for
# the other's last long test. An xdist_group's tests (the SLURM cluster's, ~2.5 min; SmolLM2's) go to one worker
# together, so those groups go first of all: started last, one worker ran them alone at the end.
LONG_FIRST = ("tests/sweeps/test_slurm.py", "tests/recipe/test_pretrained.py", "tests/sweeps/test_runner.py",
              "tests/recipe/test_trl_engine.py", "tests/sweeps/test_tune.py", "tests/sweeps/test_scan_run.py",
              "tests/recipe/test_pipeline.py", "tests/recipe/test_vllm_generator.py", "tests/recipe/test_loop.py")


def pytest_collection_modifyitems(session, config, items):
    def rank(item) -> int:
        path = item.nodeid.split("::")[0]
        return LONG_FIRST.index(path) if path in LONG_FIRST else len(LONG_FIRST)

    items.sort(key=rank)  # stable: the order within a module, and of every other module, is kept
