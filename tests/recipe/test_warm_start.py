"""Warm start: the noisy teacher's targets and the on-disk cache shared by the jobs of a sweep."""

from __future__ import annotations

import dataclasses
import random

from recipe.run_config import ModelConfig, TaskConfig, WarmStartConfig
from recipe.tasks import solution
from recipe.warm_start import teacher_example, warm_start_dir, warm_start_key

SMALL_MODEL = ModelConfig(hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2, max_positions=32)
TASK = TaskConfig(min_digits=1, max_digits=2)


def test_teacher_is_right_with_the_configured_probability():
    cfg = WarmStartConfig(teacher_correct_prob=0.3, interrupted_frac=0.0)
    rng = random.Random(0)
    right = 0
    for _ in range(2000):
        prompt, response = teacher_example(rng, cfg, TASK)
        a, b = (int(x) for x in prompt.removesuffix("=<think>").split("+"))
        assert response in (f"{t}</think>{s}" for t, s in (solution(a, b), solution(a, b, carry=False)))
        right += response.endswith(f"</think>{a + b}")
    assert abs(right / 2000 - 0.3) < 0.04  # binomial sd ~0.01


def test_interrupted_targets_use_the_phrase_then_answer():
    cfg = WarmStartConfig(interrupted_frac=1.0)
    _, response = teacher_example(random.Random(1), cfg, TASK)
    assert "Okay, time is up." in response and response.count("</think>") == 1


def test_cache_is_built_once_and_keyed_by_config(tmp_path, monkeypatch):
    cfg = WarmStartConfig(steps=2, batch_size=4, cache_dir=str(tmp_path))
    first = warm_start_dir(SMALL_MODEL, cfg, TASK)
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    again = warm_start_dir(SMALL_MODEL, dataclasses.replace(cfg, cache_dir=str(tmp_path)), TASK)
    assert again == first and (first / "model.safetensors").stat().st_mtime_ns == stamp
    assert (first / "config.json").is_file() and (first / "tokenizer.json").is_file()
    # Where it is cached does not change the key; what determines the weights does.
    assert warm_start_key(SMALL_MODEL, cfg, TASK) == warm_start_key(SMALL_MODEL, dataclasses.replace(cfg, cache_dir="x"), TASK)
    assert warm_start_key(SMALL_MODEL, cfg, TASK) != warm_start_key(SMALL_MODEL, dataclasses.replace(cfg, seed=1), TASK)
    # $SCALERL_CACHE is the default location.
    monkeypatch.setenv("SCALERL_CACHE", str(tmp_path / "env"))
    from_env = warm_start_dir(SMALL_MODEL, dataclasses.replace(cfg, cache_dir=None), TASK)
    assert from_env.parent.parent == tmp_path / "env"
