"""SLURM for real: a one-node cluster (scripts/slurm-cluster.sh) runs sweeps through submitit arrays.

Skipped with the reason when the cluster cannot be brought up here (not root, no apt).
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from sweeps.cli import main
from tests.services import could_not_provide, may_install_system_packages, no_install_reason, record_started
from tests.sweeps.tiny_spec import TINY_JOB_OVERRIDES

# One cluster per machine: these tests run in one pytest worker, one after the other (setup.cfg: --dist loadgroup).
pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group("slurm-cluster")]

REPO = Path(__file__).resolve().parents[2]

SPEC = """\
name: tiny-{executor}
axes: {{loss: dapo}}
seeds: [0]
overrides:
  max_steps: 2000
{overrides}budget: {{unit: samples, fit_at: {fit_at}, target: {target}}}
executor:
  name: {executor}
  local: {{max_parallel: 2, cores_per_job: 1}}
  slurm: {{cpus_per_task: 1, time_minutes: {minutes}, array_parallelism: 2, signal_delay_s: {delay}}}
  poll_seconds: 1
output_dir: {out}
"""


DAEMONS = ("slurmctld", "slurmd", "munged")


def state_dir() -> Path:
    """Where scripts/slurm-cluster.sh keeps the cluster's state and pid files."""
    return Path(os.environ.get("SCALERL_SLURM_DIR", "/tmp/scalerl-slurm"))


@pytest.fixture(scope="session")
def slurm_cluster():
    """A one-node cluster for this module: brought up (installed only where tests/services.py allows) and,
    when this fixture started it, stopped again at the end, munged included. The session's, not the module's:
    pytest tears a module's fixture down whenever another module's test comes between two of its tests, and a
    second bring-up in one run failed on the first munged's lock."""
    if os.geteuid() != 0:
        pytest.skip("bringing up SLURM needs root")
    if not all(shutil.which(tool) for tool in (*DAEMONS, "sbatch")) and not may_install_system_packages():
        pytest.skip(no_install_reason("slurm-wlm (slurmctld, slurmd, sbatch) with munge"))
    script = REPO / "scripts" / "slurm-cluster.sh"
    state = state_dir()
    was_running = {daemon: pid_alive(state / f"{daemon}.pid") for daemon in DAEMONS}
    result = subprocess.run([str(script), "up"], capture_output=True, text=True, timeout=850)
    if result.returncode != 0:
        why = f"scripts/slurm-cluster.sh up: {result.stderr.strip()[-500:]}"
        if not may_install_system_packages():  # installed, but this machine cannot run it (e.g. no cgroups)
            pytest.skip(f"a one-node SLURM cluster could not be started: {why}")
        could_not_provide("a one-node SLURM cluster", why)
    started = [daemon for daemon in DAEMONS if not was_running[daemon] and pid_alive(state / f"{daemon}.pid")]
    for daemon in started:
        record_started(daemon, pid_alive(state / f"{daemon}.pid"))
    env = subprocess.run([str(script), "env"], capture_output=True, text=True, check=True).stdout
    conf, path = re.search(r"SLURM_CONF=(\S+) PATH=(\S+):\$PATH", env).groups()
    saved = {key: os.environ.get(key) for key in ("SLURM_CONF", "PATH")}
    os.environ["SLURM_CONF"], os.environ["PATH"] = conf, f"{path}:{os.environ['PATH']}"
    yield
    for key, value in saved.items():
        os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
    if started:  # a cluster that was up before the tests stays up; one they brought up goes down
        subprocess.run([str(script), "down"], capture_output=True, text=True, timeout=120)


def pid_alive(pid_file: Path) -> int | None:
    """The pid in pid_file when that process is alive, else None."""
    try:
        pid = int(pid_file.read_text().split()[0])
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError, IndexError):
        return None


@pytest.fixture(autouse=True)
def shared_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SCALERL_CACHE", str(tmp_path_factory.getbasetemp() / "warm-start-cache"))


def write_spec(tmp_path, executor, target=64, minutes=10, delay=120):
    out = tmp_path / executor
    path = tmp_path / f"{executor}.yaml"
    path.write_text(SPEC.format(executor=executor, out=out, fit_at=target // 2, target=target, minutes=minutes,
                                delay=delay, overrides=TINY_JOB_OVERRIDES))
    return path, out


def curves(out: Path) -> dict[str, list[tuple]]:
    """variant -> [(step, samples, pass rate)]: what must match across executors and interruptions."""
    result = {}
    for entry in json.loads((out / "plan.json").read_text()):
        lines = [json.loads(line) for line in (out / entry["run_dir"] / "metrics.jsonl").read_text().splitlines()]
        result[entry["variant"]] = [(r["step"], r["compute/samples"], r["eval/pass_rate"]) for r in lines]
    return result


def test_the_cluster_daemons_hold_no_copy_of_the_apt_lock(slurm_cluster):
    """The daemons run all session; one that inherited the apt lock's descriptor (scripts/apt-install.sh) would
    make every later install in the run (poppler, chromium) wait on it until it timed out."""
    # munged's own pid file too: a munged that munge's post-install script started is not in the state directory.
    pid_files = [state_dir() / f"{daemon}.pid" for daemon in DAEMONS] + [Path("/run/munge/munged.pid")]
    daemons = {pid for pid in map(pid_alive, pid_files) if pid}
    assert daemons, "the cluster's daemons are running"
    lock = os.path.realpath(os.environ.get("SCALERL_APT_LOCK", "/tmp/scalerl-apt-install.lock"))
    for pid in daemons:
        targets = []
        for fd in Path(f"/proc/{pid}/fd").glob("*"):
            try:
                targets.append(os.readlink(fd))
            except OSError:  # closed between the listing and the read
                pass
        assert lock not in targets, f"pid {pid} holds the apt lock {lock}"


def test_slurm_sweep_gives_the_local_executors_loo_table(tmp_path, slurm_cluster):
    local_spec, local_out = write_spec(tmp_path, "local")
    slurm_spec, slurm_out = write_spec(tmp_path, "slurm")
    assert main(["run", str(local_spec)]) == 0
    assert main(["run", str(slurm_spec)]) == 0
    assert curves(slurm_out) == curves(local_out)
    columns = ["variant", "A", "B", "C_mid", "pred_at_target", "observed_at_target", "verdict"]
    local_table = pd.read_csv(local_out / "loo_table.csv")
    slurm_table = pd.read_csv(slurm_out / "loo_table.csv")
    pd.testing.assert_frame_equal(slurm_table[[c for c in columns if c in local_table]],
                                  local_table[[c for c in columns if c in local_table]])
    assert list((slurm_out / "logs").iterdir()), "no SLURM job logs in the sweep directory"



def test_a_partition_the_cluster_lacks_is_one_line_naming_the_key_and_the_sweep_is_kept(tmp_path, slurm_cluster,
                                                                                         capsys):
    spec, out = write_spec(tmp_path, "slurm")
    spec.write_text(spec.read_text().replace("slurm: {cpus_per_task: 1,", "slurm: {partition: no-such-part, "
                                                                          "cpus_per_task: 1,"))
    assert main(["run", str(spec)]) == 2
    error = capsys.readouterr().err
    assert "the scheduler refused the sweep's jobs:" in error and "executor.slurm.partition" in error
    assert "Traceback" not in error and (out / "sweep.json").exists()  # rerun after the fix resumes this sweep

@pytest.mark.slow  # ~4 minutes: SLURM's 1-minute minimum limit and ~30 s checks; `pytest -m slow` runs it
def test_a_time_limit_requeues_and_the_job_resumes_to_the_same_curve(tmp_path, slurm_cluster):
    # 1-minute limit, USR2 30 s before it: a ~2-minute job is requeued at least once.
    reference_spec, reference_out = write_spec(tmp_path, "local", target=1600)
    limited_spec, limited_out = write_spec(tmp_path, "slurm", target=1600, minutes=1, delay=30)
    assert main(["run", str(limited_spec)]) == 0
    logs = "\n".join(path.read_text() for path in (limited_out / "logs").rglob("*.err"))
    assert "requeued" in logs.lower() or "timed-out" in logs.lower() or "timeout" in logs.lower(), logs[-3000:]
    assert main(["run", str(reference_spec)]) == 0
    assert curves(limited_out) == curves(reference_out)


def test_scancel_then_sweep_run_resumes_from_the_checkpoint(tmp_path, slurm_cluster):
    # 200 steps: still running when cancelled (cancel_slurm_jobs stops them with SIGINT at once; scancel
    # alone left them KillWait to go on, and on a fast CPU they finished in it)
    spec, out = write_spec(tmp_path, "slurm", target=3200)
    driver = subprocess.Popen([sys.executable, "-m", "sweeps.cli", "run", str(spec)], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 300
    while time.time() < deadline:
        lines = [len(p.read_text().splitlines()) for p in out.glob("runs/*/metrics.jsonl")]
        if lines and min(lines) >= 4 and len(lines) == 2:
            break
        time.sleep(0.5)
    assert main(["cancel", str(spec)]) == 0
    output = driver.communicate(timeout=180)[0]
    assert driver.returncode == 1, output[-2000:]
    assert "FAILED" in output and "retried by the next `sweep run`" in output
    assert len(list(out.glob("runs/*/done.json"))) < 2, "cancelled too late: every job had finished"
    assert main(["run", str(spec)]) == 0
    for steps in curves(out).values():
        assert [step for step, _, _ in steps] == list(range(0, steps[-1][0] + 1, 2))


def test_a_restarted_driver_watches_a_job_still_queued_instead_of_submitting_it_again(tmp_path, slurm_cluster,
                                                                                      capsys):
    # Two jobs of all the node's CPUs each: one runs, one waits in the queue (no run lock yet). A driver killed
    # then and started again must watch the queued one, not submit it a second time (the copy would wait for
    # the first's run lock and fail). 50 steps a job: the first still trains when the new driver starts, a
    # second after the kill (at 200 steps the two jobs, one after the other, took 250 s of a CI-like run).
    from sweeps.planner import plan_sweep
    from sweeps.spec import load_spec
    from sweeps.state import read_state

    # The node's CPUs as SLURM counts them (slurmd -C honours a cpuset that os.cpu_count() does not).
    node = subprocess.run(["sinfo", "-h", "-o", "%c"], capture_output=True, text=True, check=True)
    cpus = int(node.stdout.split()[0])
    spec, out = write_spec(tmp_path, "slurm", target=800)
    spec.write_text(spec.read_text().replace("cpus_per_task: 1,", f"cpus_per_task: {cpus},"))
    driver = subprocess.Popen([sys.executable, "-m", "sweeps.cli", "run", str(spec)], cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    jobs = plan_sweep(load_spec(spec))
    deadline = time.time() + 300
    while time.time() < deadline:
        started = [job for job in jobs if (job.run_dir / "metrics.jsonl").exists()]
        ids = [read_state(out, job.run_id).launcher_id for job in jobs]
        if len(started) == 1 and all(ids):
            break
        time.sleep(0.5)
    else:
        raise AssertionError("no moment with one job running and one queued")
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    queued = next(job for job in jobs if not (job.run_dir / "metrics.jsonl").exists())
    before = read_state(out, queued.run_id)
    assert main(["run", str(spec)]) == 0
    after = read_state(out, queued.run_id)
    assert (after.launcher_id, after.attempts, after.failures) == (before.launcher_id, before.attempts, 0)
    assert len(list(out.glob("runs/*/done.json"))) == 2
    # `sweep cancel` of a run whose job is over (its done.json removed: the job id is COMPLETED or purged):
    # nothing to cancel, no scancel error
    (queued.run_dir / "done.json").unlink()
    capsys.readouterr()
    assert main(["cancel", str(spec)]) == 0
    assert "cancelled 0 job(s)" in capsys.readouterr().out

TRL_SPEC = """\
name: trl-slurm
seeds: [0]
overrides:
  max_steps: 2000
{overrides}  engine: {{name: trl, num_processes: 2}}
  aggregation: token_mean
  curriculum: uniform
  length_control: none
budget: {{unit: samples, fit_at: 32, target: 64}}
executor:
  name: slurm
  slurm:
    cpus_per_task: 2
    time_minutes: 10
    nodes: 1
    tasks_per_node: 1
    setup: ['echo "$SLURM_JOB_ID $(hostname -s)" > {marker}']
    additional_parameters: {{comment: scalerl-cluster-options}}
output_dir: {out}
"""


def test_a_trl_job_of_two_processes_runs_through_the_slurm_launch_path_with_setup_lines_and_extra_options(
        tmp_path, slurm_cluster):
    """One node of the cluster: the batch script holds every line `sweep plan --verbose` shows, the setup line
    runs before the job, the extra sbatch option reaches SLURM, and the trl job trains under accelerate with the
    machines read from SLURM's environment (the multi-node path, with one node)."""
    import functools

    from recipe.engines.launch import launch_command
    from recipe.tracking import read_metrics
    from sweeps.job import TrainingJob
    from sweeps.launcher import Launcher
    from sweeps.planner import plan_sweep
    from sweeps.runner import sweep_job_recipe
    from sweeps.slurm_options import batch_script_lines
    from sweeps.spec import load_spec
    from tests.recipe.test_launch import parsed

    out, marker = tmp_path / "out", tmp_path / "setup-ran"
    path = tmp_path / "trl.yaml"
    path.write_text(TRL_SPEC.format(overrides=TINY_JOB_OVERRIDES, marker=marker, out=out))
    spec = load_spec(path)
    [job] = plan_sweep(spec)
    launcher = Launcher(spec, out / "logs")
    training = TrainingJob(sweep_job_recipe(job), str(job.run_dir), spec.budget.unit, spec.budget.target,
                           launcher.threads)
    probe = functools.partial(launch_command, "/runs/a", 2, port=12345)  # what the job's launch sees of SLURM
    handle, probe_handle = launcher.submit([training, probe])
    summary = handle.result()
    assert summary["compute/samples"] >= 64, summary
    assert {record["engine/processes"] for record in read_metrics(job.run_dir)} == {2}
    job_id, host = marker.read_text().split()  # written by the setup line, in the batch script, before srun
    assert job_id.isdigit() and host
    args = parsed(probe_handle.result())
    assert (args.num_machines, args.machine_rank, args.main_process_ip, args.main_process_port) == (1, 0, host, 12345)
    [script] = (out / "logs").glob("*_submission.sh")
    lines = script.read_text().splitlines()
    for line in batch_script_lines(spec):
        assert line in lines, line
    comment = subprocess.run(["squeue", "--states=all", "--noheader", "--format=%k", f"--jobs={handle.job_id}"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
    assert comment == "scalerl-cluster-options"
