"""`sweep train`: one job in-process, a line per evaluation, resume by rerunning, clear usage errors."""

from __future__ import annotations

import pytest

from sweeps.cli import main


@pytest.fixture
def tiny_args(tiny_overrides):
    return tiny_overrides("eval.every_steps=2", run_steps=4)


def test_train_runs_prints_progress_and_resumes(tiny_args, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["train", *tiny_args, "--run-dir", str(run_dir), "--threads", "1"]) == 0
    err = capsys.readouterr().err
    assert [line.split()[1] for line in err.splitlines() if line.startswith("step ")] == ["0/4", "2/4", "4/4"]
    assert (run_dir / "config.yaml").is_file() and (run_dir / "checkpoint.pt").is_file()
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    # The same command again finds the finished checkpoint: nothing is recomputed or duplicated.
    assert main(["train", *tiny_args, "--run-dir", str(run_dir), "--threads", "1"]) == 0
    assert (run_dir / "metrics.jsonl").read_text().splitlines() == lines


def test_default_run_dir_is_the_run_id(tiny_args, tmp_path):
    from recipe.config import load_recipe, run_id

    assert main(["train", *tiny_args, "--runs-dir", str(tmp_path), "--threads", "1"]) == 0
    assert (tmp_path / run_id(load_recipe(None, tiny_args)) / "metrics.jsonl").is_file()


def test_bad_input_is_a_usage_error(tiny_args, tmp_path, capsys):
    assert main(["train", "optimizer.lr=fast", "--run-dir", str(tmp_path)]) == 2
    assert "optimizer.lr" in capsys.readouterr().err
    assert main(["train", str(tmp_path / "missing.yaml")]) == 2
    assert main(["train", *tiny_args, "--threads", "-1", "--run-dir", str(tmp_path)]) == 2
