"""`sweep run` end to end on a tiny spec: real training jobs, resume after a killed driver, failures."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sweeps.cli import main
from tests.sweeps.tiny_spec import TINY_JOB_OVERRIDES

REPO = Path(__file__).resolve().parents[2]

TINY = """\
name: tiny
axes: {{loss: dapo}}
seeds: [0]
overrides:
  max_steps: {max_steps}
{overrides}budget: {{unit: samples, fit_at: {fit_at}, target: {target}}}
executor: {{name: {executor}, local: {{max_parallel: 2, cores_per_job: 1}}, poll_seconds: 0.5}}
output_dir: {out}
{extra}"""


@pytest.fixture(autouse=True)
def shared_cache(tmp_path_factory, monkeypatch):
    """One warm-start cache for every test here (built once, as a sweep shares it across jobs)."""
    monkeypatch.setenv("SCALERL_CACHE", str(tmp_path_factory.getbasetemp() / "warm-start-cache"))


def write_spec(tmp_path, executor="debug", target=64, extra="", max_steps=200):
    path = tmp_path / "spec.yaml"
    path.write_text(TINY.format(executor=executor, out=tmp_path / "out", fit_at=target // 2, target=target, extra=extra,
                                max_steps=max_steps, overrides=TINY_JOB_OVERRIDES))
    return path


def eval_steps(run_dir: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def assert_complete_curves(out: Path, expected_jobs: int):
    plan = json.loads((out / "plan.json").read_text())
    assert len(plan) == expected_jobs
    for entry in plan:
        run_dir = out / entry["run_dir"]
        assert (run_dir / "done.json").exists(), entry
        steps = eval_steps(run_dir)
        # every 2 steps from 0, no gap, no duplicate, up to the step that reached the target
        assert steps == list(range(0, steps[-1] + 1, 2)), steps


def test_run_then_rerun_skips_finished_jobs(tmp_path, capsys):
    spec = write_spec(tmp_path)
    assert main(["run", str(spec)]) == 0
    out = tmp_path / "out"
    assert_complete_curves(out, 2)
    harness = json.loads((out / "harness.json").read_text())  # the driver's own time, by phase
    assert set(harness["phases"]) == {"plan", "launch", "poll", "finalize"}
    assert 0 < harness["harness_seconds"] <= harness["wall_seconds"]
    before = {p: p.stat().st_mtime_ns for p in out.glob("runs/*/metrics.jsonl")}
    assert main(["run", str(spec)]) == 0
    assert {p: p.stat().st_mtime_ns for p in out.glob("runs/*/metrics.jsonl")} == before
    assert main(["status", str(out)]) == 0
    assert "2 done, 0 running, 0 pending, 0 failed" in capsys.readouterr().out



def test_a_second_launch_of_a_job_whose_run_another_process_trains_watches_it_and_counts_no_failure(
        tmp_path, capsys, monkeypatch):
    # A driver killed between submitting a job and recording its id submits it again on the next run; on SLURM
    # both copies may start. The copy that finds the run locked returns at once and the driver watches the other.
    import sweeps.job
    import sweeps.runner
    from sweeps.planner import plan_sweep
    from sweeps.spec import load_spec
    from sweeps.state import LOCK_FILE, read_state

    spec = write_spec(tmp_path)
    out = tmp_path / "out"
    job = plan_sweep(load_spec(spec))[0]
    holders = []

    def hold_the_lock():  # "the first copy", training the run from before the driver looks
        job.run_dir.mkdir(parents=True, exist_ok=True)
        holder = subprocess.Popen([sys.executable, "-c", (  # holds the lock until its stdin closes
            "import fcntl, sys; handle = open(sys.argv[1], 'a+'); fcntl.flock(handle, fcntl.LOCK_EX); "
            "print('held', flush=True); sys.stdin.read()"), str(job.run_dir / LOCK_FILE)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "held"
        holders.append(holder)

    real_result_field = sweeps.runner.job_result_field

    def first_copy_finishes_once_the_second_has_stood_down(handle, key):
        value = real_result_field(handle, key)
        if value is not None and key == sweeps.job.TRAINED_ELSEWHERE:
            holders[0].stdin.close()
        return value

    monkeypatch.setattr(sweeps.runner, "job_result_field", first_copy_finishes_once_the_second_has_stood_down)

    real_write_sweep_files = sweeps.runner.write_sweep_files
    monkeypatch.setattr(sweeps.runner, "write_sweep_files",
                        lambda *args: (real_write_sweep_files(*args), hold_the_lock())[0])
    real_is_locked, looks = sweeps.runner.is_locked, {"count": 0}

    def driver_misses_the_first_copy(run_dir):  # as a driver that lost the first copy's job id does, until
        if run_dir != job.run_dir:               # it has launched the second copy (its two looks before)
            return real_is_locked(run_dir)
        looks["count"] += 1
        return False if looks["count"] <= 2 else real_is_locked(run_dir)

    monkeypatch.setattr(sweeps.runner, "is_locked", driver_misses_the_first_copy)
    monkeypatch.setattr(sweeps.job, "LOCK_WAIT_SECONDS", 0.5)
    try:
        assert main(["run", str(spec)]) == 0  # the debug executor runs the second copy in this process
    finally:
        for holder in holders:
            holder.kill()
    assert holders and holders[0].stdin.closed  # the second copy stood down while the first held the run
    assert "being trained by another process" not in capsys.readouterr().out
    assert_complete_curves(out, 2)
    state = read_state(out, job.run_id)
    assert state.failures == 0 and state.status == "done"


def test_a_raised_target_trains_finished_runs_on_from_their_checkpoints(tmp_path, capsys):
    # A run id hashes the recipe, not the budget: done at target 48 is not done at 96.
    spec = write_spec(tmp_path, target=48)
    assert main(["run", str(spec)]) == 0
    out = tmp_path / "out"
    ended = {run_dir.name: eval_steps(run_dir)[-1] for run_dir in out.glob("runs/*")}
    spec = write_spec(tmp_path, target=96)
    capsys.readouterr()
    assert main(["status", str(spec)]) == 0
    assert "0 done, 0 running, 2 pending, 0 failed" in capsys.readouterr().out
    assert main(["run", str(spec)]) == 0
    assert_complete_curves(out, 2)  # every 2 steps from 0, no gap or repeat: the old curve continued
    for run_dir in out.glob("runs/*"):
        assert json.loads((run_dir / "done.json").read_text())["compute/samples"] >= 96
        assert eval_steps(run_dir)[-1] > ended[run_dir.name]

def test_pipeline_jobs_stop_at_their_target_through_the_supervisor(tmp_path):
    # PipelineRL jobs (trainer and generator processes): the sweep's TargetReached hook runs in the
    # supervisor and stops the trainer right after the evaluation that reached the target.
    spec = write_spec(tmp_path, target=48)
    spec.write_text(spec.read_text().replace("{name: ppo_off_policy, k: 2}", "{name: pipeline_rl, k: 2}"))
    assert main(["run", str(spec)]) == 0
    assert_complete_curves(tmp_path / "out", 2)
    for run_dir in (tmp_path / "out").glob("runs/*"):
        records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert records[-1]["compute/samples"] >= 48 > records[-2]["compute/samples"]
        assert records[-1]["compute/devices"] == 2.0 and "pipeline/trainer_idle_frac" in records[-1]


def test_crashing_job_is_reported_with_its_log_and_retried_by_the_next_run(tmp_path, capsys):
    spec = write_spec(tmp_path, executor="local", extra="faults: {loss=dapo: 3}\n")
    assert main(["run", str(spec)]) == 1
    text = capsys.readouterr().out
    assert "FAILED loss=dapo seed 0: sweeps.job.InjectedFault: fault injected at step 3" in text
    log = re.search(r"\n  log: (\S+)", text).group(1)
    assert "InjectedFault" in Path(log).read_text()
    assert "retried by the next `sweep run`" in text
    spec.write_text(spec.read_text().replace("faults: {loss=dapo: 3}\n", ""))
    assert main(["run", str(spec)]) == 0
    assert_complete_curves(tmp_path / "out", 2)
    # submitit's unexpanded "%j" folder placeholder once left an empty logs/%j/ in every sweep.
    assert not [path for path in (tmp_path / "out").rglob("*") if "%" in path.name]
    assert list((tmp_path / "out" / "logs").glob("*.err")), "each job's stderr log lives in logs/"



def test_resumes_do_not_count_against_max_attempts_only_failures_do(tmp_path, capsys):
    # Two earlier drivers interrupted mid-job (3 launches), then one failure: retried, not given up.
    from sweeps.planner import plan_sweep
    from sweeps.spec import load_spec
    from sweeps.state import JobState, read_state, write_state

    spec = write_spec(tmp_path, extra="faults: {loss=dapo: 3}\n")
    out = tmp_path / "out"
    job = next(job for job in plan_sweep(load_spec(spec)) if job.variant == "loss=dapo")
    assert main(["run", str(spec)]) == 1
    state = read_state(out, job.run_id)
    assert (state.status, state.attempts, state.failures) == ("failed", 1, 1)
    write_state(out, job.run_id, JobState(status="failed", attempts=3, failures=1, last_error=state.last_error))
    capsys.readouterr()
    assert main(["run", str(spec)]) == 1  # 3 launches, 1 failure: launched again
    state = read_state(out, job.run_id)
    assert (state.attempts, state.failures) == (4, 2)
    assert "retried by the next `sweep run`" in capsys.readouterr().out
    assert main(["run", str(spec)]) == 1  # the third failure reaches executor.max_attempts (3)
    assert read_state(out, job.run_id).failures == 3
    assert "failed 3 times (executor.max_attempts)" in capsys.readouterr().out
    assert main(["run", str(spec)]) == 1  # given up: not launched again
    assert read_state(out, job.run_id).attempts == 5

def start_driver_until(spec: Path, out: Path, ready) -> subprocess.Popen:
    """Start `sweep run SPEC` as a separate driver process; return once ready(metrics line counts) holds."""
    command = [sys.executable, "-m", "sweeps.cli", "run", str(spec)]
    driver = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    deadline = time.time() + 240
    while time.time() < deadline:
        if ready([len(p.read_text().splitlines()) for p in out.glob("runs/*/metrics.jsonl")]):
            return driver
        time.sleep(0.2)
    os.killpg(driver.pid, signal.SIGKILL)
    pytest.fail("the jobs never reached the state the test waits for")


def kill_driver_mid_sweep_then_rerun(spec: Path, out: Path, kill_jobs_too: bool = True) -> subprocess.CompletedProcess:
    """kill -9 the driver (and its jobs: a lost node) once some job has 3 evaluation points and none has
    finished, then rerun `sweep run SPEC` to its end; returns the rerun, which must exit 0."""
    driver = start_driver_until(spec, out, lambda lines: lines and max(lines) >= 3)
    if kill_jobs_too:
        os.killpg(driver.pid, signal.SIGKILL)
    else:
        driver.kill()
    driver.wait()
    assert not list(out.glob("runs/*/done.json")), "killed too late: a job had already finished"
    result = subprocess.run([sys.executable, "-m", "sweeps.cli", "run", str(spec)], cwd=REPO, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result


@pytest.mark.parametrize("kill_jobs_too", [False, True], ids=["driver-only", "driver-and-jobs"])
def test_kill_9_of_the_driver_then_rerun_resumes_without_gaps_or_duplicates(tmp_path, kill_jobs_too):
    # driver-only: the jobs live on and the new driver watches them instead of launching twice;
    # driver-and-jobs (a lost node): the new driver resumes every job from its checkpoint.
    # 30 steps a job: a job at its third evaluation point (step 4) is 26 steps (over a second) from done when the
    # kill lands (at 10 steps, 160 samples, a fast machine finished a job between the poll and the kill).
    spec = write_spec(tmp_path, executor="local", target=480)
    out = tmp_path / "out"
    kill_driver_mid_sweep_then_rerun(spec, out, kill_jobs_too)
    assert_complete_curves(out, 2)



def test_jobs_that_finish_while_no_driver_watches_are_mirrored_and_closed_by_the_next_driver(tmp_path):
    from mlflow.tracking import MlflowClient

    from sweeps.state import is_locked
    from sweeps.tracking import mlflow_record

    spec = write_spec(tmp_path, executor="local", target=480)
    out = tmp_path / "out"
    driver = start_driver_until(spec, out, lambda lines: lines and max(lines) >= 3)
    driver.kill()  # the driver alone: its jobs train on to their end with nobody mirroring them
    driver.wait()
    deadline = time.time() + 300
    while time.time() < deadline and (len(list(out.glob("runs/*/done.json"))) < 2
                                      or any(is_locked(run_dir) for run_dir in out.glob("runs/*"))):
        time.sleep(0.5)
    assert len(list(out.glob("runs/*/done.json"))) == 2
    assert main(["run", str(spec)]) == 0
    record = mlflow_record(out)
    client = MlflowClient(record["tracking_uri"])
    for run_id, child in record["child_runs"].items():
        lines = (next(out.glob(f"runs/{run_id}")) / "metrics.jsonl").read_text().splitlines()
        assert client.get_run(child).info.status == "FINISHED"
        assert len(client.get_metric_history(child, "eval/pass_rate")) == len(lines)

def test_cancel_stops_local_jobs_and_run_resumes_them(tmp_path, capsys):
    # The driver dies (kill -9) and its local jobs live on; `sweep cancel` must stop the training
    # processes themselves (submitit's job processes ignore SIGTERM), then `sweep run` resumes them.
    from sweeps.state import is_locked

    # 400 steps, ~18 s of one core a job: still running when cancelled, which happens as soon as the second
    # job has a checkpoint (its second evaluation, step 2; both write one every 2 steps). The first job is
    # ahead by the second's start-up (a few seconds). At 200 steps CI runs on fresh clones saw the first job
    # finish before a cancel that waited for the second's third evaluation, and, once, while `cancel` stopped
    # the jobs one by one with a grace period each (now all at once); at 1,000 steps the rerun took ~50 s.
    spec = write_spec(tmp_path, executor="local", target=6400, max_steps=400)
    out = tmp_path / "out"
    # both jobs training, each past its first checkpoint
    driver = start_driver_until(spec, out, lambda lines: len(lines) == 2 and min(lines) >= 2)
    driver.kill()
    driver.wait()
    run_dirs = list(out.glob("runs/*"))
    assert all(is_locked(run_dir) for run_dir in run_dirs), "the jobs should outlive their driver"
    assert main(["cancel", str(spec)]) == 0
    assert "cancelled 2 job(s)" in capsys.readouterr().out
    assert not any(is_locked(run_dir) for run_dir in run_dirs)
    assert not list(out.glob("runs/*/done.json")), "cancelled too late: a job had already finished"
    assert main(["run", str(spec)]) == 0
    assert_complete_curves(out, 2)


# engine trl on the same tiny jobs: the ScaleRL base (No-Positive-Resampling, forced interruption,
# prompt-mean CISPO) with PPO-off-policy in place of PipelineRL, as sweeps/loo-trl.yaml.
TRL_JOB_OVERRIDES = TINY_JOB_OVERRIDES + """\
  engine: {name: trl}
"""


def test_a_trl_sweep_runs_end_to_end_and_resumes_after_kill_9_of_driver_and_jobs(tmp_path):
    spec = tmp_path / "spec.yaml"
    # 24 steps a job (384 samples): far from done at its third evaluation point, where the kill lands (at 10
    # steps a job had 6 steps, about a second, left between the poll and the kill; 24 leave 20, ~8 s).
    spec.write_text(TINY.format(executor="local", out=tmp_path / "out", fit_at=192, target=384, extra="", max_steps=200,
                                overrides=TRL_JOB_OVERRIDES))
    out = tmp_path / "out"
    kill_driver_mid_sweep_then_rerun(spec, out)  # the driver and its jobs: a lost node
    assert_complete_curves(out, 2)
    assert (out / "report.pdf").is_file() and (out / "loo_table.csv").is_file()
    assert list(out.glob("runs/*/trl/checkpoint-*")), "the jobs checkpoint through TRL"


# rollout.generator vllm on the same tiny jobs (one head of 32: a head size vLLM's CPU backend runs).
VLLM_JOB_OVERRIDES = TINY_JOB_OVERRIDES.replace("num_heads: 2}", "num_heads: 1}").replace(
    "samples_per_prompt: 4}", "samples_per_prompt: 4, generator: vllm}")


def test_a_vllm_sweep_runs_end_to_end_and_resumes_after_kill_9_of_driver_and_jobs(tmp_path):
    """A sweep whose jobs generate with vLLM's CPU build: plan, run, kill -9 of the driver and its jobs (each
    job's engine dies with it), rerun to the end from the checkpoints, fit and report."""
    assert "generator: vllm" in VLLM_JOB_OVERRIDES and "num_heads: 1" in VLLM_JOB_OVERRIDES
    spec = tmp_path / "spec.yaml"
    spec.write_text(TINY.format(executor="local", out=tmp_path / "out", fit_at=192, target=384, extra="", max_steps=200,
                                overrides=VLLM_JOB_OVERRIDES))  # 24 steps a job, as the trl sweep's
    out = tmp_path / "out"
    kill_driver_mid_sweep_then_rerun(spec, out)
    assert_complete_curves(out, 2)
    assert (out / "report.pdf").is_file() and (out / "loo_table.csv").is_file()
    for run_dir in out.glob("runs/*"):
        assert "generator: vllm" in (run_dir / "config.yaml").read_text()


def test_a_job_that_stops_on_an_input_error_is_not_retried(tmp_path, capsys, monkeypatch):
    # On SLURM a model path on the cluster's filesystem is checked by the job on its node, not by the plan;
    # the plan-time check is switched off here to stand for that. The job itself runs for real and refuses.
    monkeypatch.setattr("sweeps.runner.check_jobs_can_run", lambda spec, jobs: [])
    spec = write_spec(tmp_path, executor="debug")
    spec.write_text(spec.read_text().replace("  model: {", f"  model: {{path: {tmp_path}/gone, "))
    assert main(["run", str(spec)]) == 1
    text = capsys.readouterr().out
    assert "FAILED base seed 0: input error: model.path: got" in text and "no such directory" in text
    assert "rerunning fails the same way: fix the input it names" in text
    assert not list((tmp_path / "out" / "runs").glob("*/config.yaml")), "no run directory is made for an input error"
    assert main(["run", str(spec)]) == 1  # not relaunched: the same refusal, at once
    assert "rerunning fails the same way" in capsys.readouterr().out
