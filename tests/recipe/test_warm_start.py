"""Warm start: the noisy teacher's targets and the on-disk cache shared by the jobs of a sweep."""

from __future__ import annotations

import dataclasses
import random

from recipe.run_config import ModelConfig, TaskConfig, WarmStartConfig
from recipe.tasks import sample_operands, solution
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


def test_terse_traces_come_with_the_configured_probability_and_the_default_stream_is_unchanged():
    cfg = WarmStartConfig(teacher_correct_prob=0.5, interrupted_frac=0.0, terse_frac=0.25)
    rng, terse = random.Random(0), 0
    for _ in range(2000):
        prompt, response = teacher_example(rng, cfg, TASK)
        a, b = (int(x) for x in prompt.removesuffix("=<think>").split("+"))
        styles = {f"{t}</think>{s}": style for carry in (True, False) for style, (t, s) in
                  (("long", solution(a, b, carry)), ("terse", solution(a, b, carry, terse=True)))}
        terse += styles[response] == "terse"  # a KeyError here: a target in neither style
    assert abs(terse / 2000 - 0.25) < 0.04  # binomial sd ~0.01
    # terse_frac 0 draws nothing more: the targets, and so the shipped build and its key, are the ones before it.
    plain = WarmStartConfig()
    old_rng, new_rng = random.Random(3), random.Random(3)
    for _ in range(50):
        a, b = sample_operands(old_rng, TASK.min_digits, TASK.max_digits)
        trace, answer = solution(a, b, carry=old_rng.random() < plain.teacher_correct_prob)
        if old_rng.random() < plain.interrupted_frac:
            old_rng.randrange(len(trace))
        assert teacher_example(new_rng, plain, TASK)[1].endswith(f"</think>{answer}")
    # another build at terse_frac > 0; at 0 the key is the shipped one (test_the_shipped_warm_start_is_...)
    assert warm_start_key(SMALL_MODEL, plain, TASK) != warm_start_key(SMALL_MODEL, cfg, TASK)


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
    assert warm_start_key(SMALL_MODEL, cfg, TASK) == \
        warm_start_key(SMALL_MODEL, dataclasses.replace(cfg, cache_dir="x"), TASK)
    assert warm_start_key(SMALL_MODEL, cfg, TASK) != warm_start_key(SMALL_MODEL, dataclasses.replace(cfg, seed=1), TASK)
    # The phrase is the tokenizer's added token: a cache built with another phrase is another key.
    monkeypatch.setattr("recipe.warm_start.INTERRUPTION_PHRASE", "Stop.</think>")
    assert warm_start_key(SMALL_MODEL, cfg, TASK) != first.name
    monkeypatch.undo()
    # $SCALERL_CACHE is the default location.
    monkeypatch.setenv("SCALERL_CACHE", str(tmp_path / "env"))
    from_env = warm_start_dir(SMALL_MODEL, dataclasses.replace(cfg, cache_dir=None), TASK)
    assert from_env.parent.parent == tmp_path / "env"


def test_build_reports_progress_and_a_waiting_job_sees_the_builders_progress(tmp_path):
    import fcntl
    import json
    import threading
    import time

    cfg = WarmStartConfig(steps=4, batch_size=4, cache_dir=str(tmp_path))
    built = []
    warm_start_dir(SMALL_MODEL, cfg, TASK, on_progress=lambda done, total: built.append((done, total)))
    assert built[0] == (0, 4) and built[-1] == (4, 4) and built == sorted(built)

    # Another job holds the build lock: the waiter reports what the builder wrote, then builds itself
    # once the lock is free (the "builder" here never finished).
    cfg = WarmStartConfig(steps=3, batch_size=4, seed=1, cache_dir=str(tmp_path))
    root = tmp_path / "warm_start"
    key = warm_start_key(SMALL_MODEL, cfg, TASK)
    (root / f"{key}.progress.json").write_text(json.dumps({"done": 120, "total": 1000}))
    seen = []
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        waiter = threading.Thread(target=warm_start_dir, args=(SMALL_MODEL, cfg, TASK),
                                  kwargs={"on_progress": lambda done, total: seen.append((done, total))})
        waiter.start()
        deadline = time.time() + 30
        while (120, 1000) not in seen and time.time() < deadline:
            time.sleep(0.05)
    waiter.join(timeout=60)
    assert seen[0] == (120, 1000) and seen[-1] == (3, 3)
    assert (root / key / "warm_start.json").is_file() and not (root / f"{key}.progress.json").exists()


def test_a_run_shows_the_warm_start_as_its_phase_while_it_builds(tmp_path, monkeypatch):
    from recipe.config import load_recipe
    from recipe.run import model_directory
    from recipe.tracking import read_phase

    monkeypatch.setenv("SCALERL_CACHE", str(tmp_path / "cache"))
    cfg = load_recipe(None, ["model.hidden_size=16", "model.intermediate_size=32", "model.num_layers=1",
                             "model.num_heads=2", "warm_start.steps=2", "warm_start.batch_size=4"])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    phases = []
    import recipe.run

    original = recipe.run.write_phase

    def spy(path, phase, done=None, total=None):  # the real writer; the test reads back each state
        original(path, phase, done, total)
        phases.append(read_phase(path))

    monkeypatch.setattr(recipe.run, "write_phase", spy)
    model_directory(cfg, run_dir=run_dir)
    progress = [(p["phase"], p["done"], p["total"]) for p in phases if p is not None]
    assert progress[0] == ("warm start", 0, 2) and progress[-1] == ("warm start", 2, 2)
    assert phases[-1] is None and read_phase(run_dir) is None  # cleared once the model is ready


def test_a_shipped_warm_start_is_used_for_its_key_unless_use_shipped_is_false(tmp_path, monkeypatch):
    import recipe.warm_start

    cfg = WarmStartConfig(steps=2, batch_size=4, cache_dir=str(tmp_path / "cache"))
    key = warm_start_key(SMALL_MODEL, cfg, TASK)
    shipped_root = tmp_path / "shipped"
    recipe.warm_start.build_warm_start(SMALL_MODEL, cfg, TASK, shipped_root / key)
    monkeypatch.setattr(recipe.warm_start, "SHIPPED_DIR", shipped_root)
    assert warm_start_dir(SMALL_MODEL, cfg, TASK) == shipped_root / key
    assert not (tmp_path / "cache").exists()  # nothing built
    # use_shipped=False builds this machine's own, in the cache; the flag is not part of the key.
    own = warm_start_dir(SMALL_MODEL, dataclasses.replace(cfg, use_shipped=False), TASK)
    assert own == tmp_path / "cache" / "warm_start" / key and (own / "warm_start.json").is_file()
    assert warm_start_key(SMALL_MODEL, dataclasses.replace(cfg, use_shipped=False), TASK) == key
    # Another key finds nothing shipped and builds.
    other = warm_start_dir(SMALL_MODEL, dataclasses.replace(cfg, seed=1), TASK)
    assert other.parent == tmp_path / "cache" / "warm_start"


def test_the_shipped_warm_start_is_the_base_recipes_and_loads():
    """Fails when the base recipe's model, warm start or task digits change without re-shipping
    (scripts/ship_warm_start.py)."""
    import json

    from recipe.config import load_recipe
    from recipe.model import load_model_dir
    from recipe.warm_start import SHIPPED_DIR

    cfg = load_recipe()
    key = warm_start_key(cfg.model, cfg.warm_start, cfg.task)
    shipped = sorted(p.name for p in SHIPPED_DIR.iterdir() if p.is_dir())
    assert shipped == [key], (f"recipe/warm_starts/ holds {shipped}, the base recipe's warm start is {key}: "
                              "run scripts/ship_warm_start.py and commit the result")
    assert warm_start_dir(cfg.model, cfg.warm_start, cfg.task) == SHIPPED_DIR / key
    info = json.loads((SHIPPED_DIR / key / "warm_start.json").read_text())
    assert info["key"] == key and info["steps"] == cfg.warm_start.steps
    model, tokenizer = load_model_dir(SHIPPED_DIR / key)
    assert (model.config.hidden_size, model.config.num_hidden_layers) == (cfg.model.hidden_size, cfg.model.num_layers)
    assert len(tokenizer) == model.config.vocab_size
    # Its tokenizer holds the base recipe's phrase as one token: forcing it costs 2 tokens, as it did in the build.
    assert len(tokenizer.encode(cfg.length_control["phrase"], add_special_tokens=False)) == 2
