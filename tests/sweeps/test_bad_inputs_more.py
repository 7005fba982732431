"""Bad input, second round: every case runs `sweep` as a user would, in its own process, and is measured.

The first corpus (test_bad_inputs.py) runs in-process; these run `python -m sweeps.cli ...` so a child
process's traceback, its peak memory and its wall time are seen as a user sees them. Per case: exit 2,
stderr is one line starting `sweep COMMAND: error:` that names the key, argument or file at fault, no
traceback, none of the planted secrets (a `.env` value, an environment variable, /etc/passwd's lines),
no file written in the working directory beyond what the case set up (a damaged sweep directory is
left byte for byte as it was), peak RSS under MAX_MB and wall time under MAX_SECONDS.

The classes (issue 36): a file's content in an error; accepted at plan time, failing later; tracebacks
from damaged sweep directories and bad task files; memory and time; where output goes; messages that
mislead; exit codes of argument errors.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from tests.sweeps.test_bad_inputs import CSV_HEADER, FIT, SPEC, TUNE

REPO = Path(__file__).resolve().parents[2]
SECRET = "s3cr3t-value-9f2c"  # planted in files and in the environment; must never be printed
MAX_MB, MAX_SECONDS = 700, 60.0

SLURM = SPEC.replace("name: local, local: {max_parallel: 1, cores_per_job: 2}", "name: slurm, slurm: {%s}")
G_RANGE = "rollout.samples_per_prompt: {type: int, low: 2, high: 100000000}"
DOTENV = f"API_KEY={SECRET}\nDATABASE_URL=postgres://u:{SECRET}@h/db\n"
HEADER = CSV_HEADER
CURVE = "".join(f"a,{c},{0.2 + 0.5 * c / (c + 100):.4f}\n" for c in range(0, 400, 20))


def override(text: str) -> str:
    return SPEC + f"overrides: {{{text}}}\n"


# A sweep directory as `sweep run` leaves it (plan.json, sweep.json, spec.yaml, state files, mlflow.json), made by
# the harness's own writers without training anything; a case then damages one file of it.
def sweep_dir(damage: dict[str, str | bytes]) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        from recipe.config import resolved_yaml
        from sweeps.planner import plan_sweep
        from sweeps.runner import sweep_job_recipe, write_sweep_files
        from sweeps.spec import load_spec
        from sweeps.state import JobState, write_state

        (root / "spec.yaml").write_text(SPEC + "output_dir: out\n")
        cwd = os.getcwd()
        os.chdir(root)
        try:
            spec = load_spec("spec.yaml")
            jobs = plan_sweep(spec)
            write_sweep_files(spec, Path("out"), jobs)
            for job in jobs:
                write_state(Path("out"), job.run_id, JobState(status="done", attempts=1))
                job.run_dir.mkdir(parents=True)
                (job.run_dir / "config.yaml").write_text(resolved_yaml(sweep_job_recipe(job)))
            (Path("out") / "mlflow.json").write_text(json.dumps(
                {"tracking_uri": "sqlite:///x.db", "experiment_id": "1", "parent_run_id": "p", "child_runs": {}}))
            for pattern, content in damage.items():
                for path in sorted(Path("out").glob(pattern))[:1]:
                    path.write_bytes(content if isinstance(content, bytes) else content.encode())
        finally:
            os.chdir(cwd)
    return setup


@dataclasses.dataclass
class Case:
    id: str
    argv: list[str]
    names: tuple[str, ...]  # substrings the error line must contain
    files: dict[str, str | bytes] = dataclasses.field(default_factory=dict)
    setup: Callable[[Path], None] | None = None
    links: dict[str, str] = dataclasses.field(default_factory=dict)  # name -> symlink target
    max_mb: int = MAX_MB


def spec(id: str, text: str, names: tuple[str, ...], command: str = "plan", **extra) -> Case:
    return Case(id, [command, "spec.yaml"], names, files={"spec.yaml": text, **extra.pop("files", {})}, **extra)


def fit(id: str, csv: str | bytes, names: tuple[str, ...], options: list[str] = FIT) -> Case:
    return Case(id, ["fit", "c.csv", *options], names, files={"c.csv": csv})


def tune(id: str, text: str, names: tuple[str, ...]) -> Case:
    return Case(id, ["tune", "t.yaml", "--check"], names, files={"t.yaml": text})


ENV_HEADER = ",".join(f"{key}={value}" for key, value in [("HOME", "/root"), ("TOKEN", SECRET), ("SHELL", "/bin/sh")])
NOT_JSON = "{this is not json\n"

CASES = [
    # A file's content in an error: never echoed (keys that are not names, values of unknown files, CSV cells)
    Case("spec-symlink-passwd", ["plan", "s.yaml"], ("s.yaml: not a sweep spec YAML", "holds a str"),
         links={"s.yaml": "/etc/passwd"}),
    Case("tune-symlink-passwd", ["tune", "t.yaml", "--check"], ("t.yaml: not a tune spec YAML",),
         links={"t.yaml": "/etc/passwd"}),
    Case("run-symlink-passwd", ["run", "s.yaml"], ("s.yaml: not a sweep spec YAML",), links={"s.yaml": "/etc/passwd"}),
    spec("spec-dotenv", DOTENV, ("spec.yaml: not a sweep spec YAML", "holds a str")),
    spec("spec-dotenv-export", f"export API_KEY={SECRET}\n", ("spec.yaml: not a sweep spec YAML",)),
    spec("spec-key-holds-secret", SPEC + f"API_KEY={SECRET}: 1\n",
         ("spec.yaml: not a sweep spec YAML", "1 of its 5 top-level keys are not names")),
    spec("spec-long-unknown-key", SPEC + f"{SECRET}-and-then-some-more-text-to-be-long: 1\n",
         ("1 of its 5 top-level keys are not names",)),
    spec("overrides-key-holds-secret", SPEC + f"overrides: {{'API_KEY={SECRET}': 1}}\n",
         ("overrides: a key that is not a name (not shown): unknown key",)),
    spec("axis-name-holds-secret", SPEC.replace("{loss: dapo}", f"{{'{SECRET}': dapo}}"),
         ("axes.a key that is not a name (not shown): unknown axis",)),
    spec("component-param-holds-secret", SPEC.replace("{loss: dapo}", f"{{loss: {{name: dapo, 'k={SECRET}': 1}}}}"),
         ("axes.loss", "unknown parameter of loss 'dapo'")),
    spec("faults-key-holds-secret", SPEC + f"faults: {{'x={SECRET}': 3}}\n", ("faults.a key that is not a name",)),
    Case("status-dir-spec-is-passwd", ["status", "sd"], ("sd/spec.yaml: not a sweep spec YAML",),
         links={"sd/spec.yaml": "/etc/passwd"}),
    Case("cancel-dir-spec-is-dotenv", ["cancel", "sd"], ("sd/spec.yaml: not a sweep spec YAML",),
         files={"sd/spec.yaml": DOTENV}),
    Case("train-recipe-is-dotenv", ["train", ".env"], (".env: not a recipe YAML",), files={".env": DOTENV}),
    fit("fit-env-dump-header", ENV_HEADER + "\n1,2,3\n", ("missing column(s) run, compute, pass_rate",
                                                          "3 other column(s) (not shown)")),
    Case("fit-dotenv", ["fit", ".env", *FIT], (".env is missing column(s)",), files={".env": DOTENV}),
    fit("fit-secret-pass-rate", HEADER + f"a,0,{SECRET}\n", ("line 2: column pass_rate holds a value that is not a number",)),
    fit("fit-secret-compute", HEADER + f"a,{SECRET},0.3\n", ("line 2: column compute holds a value that is not a number",)),
    fit("fit-secret-step", "run,compute,pass_rate,step\na,0,0.3," + SECRET + "\n", ("line 2: column step",)),
    fit("fit-binary", b"\x00\xff\xfe" * 50, ("c.csv",)),
    # Accepted at plan time, failing later: now refused by `sweep plan`
    spec("seed-negative", SPEC + "seeds: [-1]\n", ("seeds: got -1", "[0, 4294967295]")),
    spec("seed-beyond-2-32", SPEC + "seeds: [4294967296]\n", ("seeds: got 4294967296",)),
    spec("target-infinite", SPEC.replace("target: 20", "target: .inf"), ("budget.target: got inf", "finite")),
    spec("fit-at-nan", SPEC.replace("fit_at: 10", "fit_at: .nan"), ("budget.fit_at: got nan",)),
    spec("min-compute-ratio-infinite", SPEC.replace("target: 20", "target: 20, min_compute_ratio: .inf"),
         ("budget.min_compute_ratio",)),
    spec("poll-seconds-zero", SPEC.replace("executor: {", "executor: {poll_seconds: 0, "),
         ("executor.poll_seconds: got 0",)),
    spec("axis-without-alternative", SPEC.replace("{loss: dapo}", "{loss: []}"), ("axes.loss: an empty list",)),
    spec("task-unknown", override("task: {name: gsm8k}"), ("task.name: got 'gsm8k'", "embedded, jsonl")),
    spec("dtype-unknown", override("model: {dtype: float64}"), ("model.dtype: got 'float64'", "bfloat16")),
    spec("model-path-missing", override("model: {path: /nonexistent/model}"),
         ("model.path: got '/nonexistent/model', no such directory",)),
    spec("model-path-not-a-model", override("model: {path: adir}"), ("model.path", "no config.json"),
         files={"adir/weights.bin": b"\x00"}),
    spec("jsonl-without-path", override("task: {name: jsonl}"), ("task.train_path: required",)),
    spec("jsonl-path-missing", override("task: {name: jsonl, train_path: absent.jsonl}"),
         ("task.train_path: got 'absent.jsonl', no such file",)),
    spec("jsonl-not-json", override("task: {name: jsonl, train_path: t.jsonl}"),
         ("task.train_path", "line 2: not JSON"), files={"t.jsonl": '{"prompt": "1+1", "answer": "2"}\n' + NOT_JSON}),
    spec("jsonl-row-without-answer", override("task: {name: jsonl, train_path: t.jsonl}"),
         ("task.train_path", "line 1: a row needs 'prompt' and 'answer'"),
         files={"t.jsonl": json.dumps({"prompt": "1+1", SECRET: SECRET}) + "\n"}),
    spec("lr-infinite", override("optimizer: {lr: .inf}"), ("optimizer.lr: got inf",)),
    spec("temperature-nan", override("rollout: {temperature: .nan}"), ("rollout.temperature: got nan",)),
    spec("heads-not-dividing-width", override("model: {num_heads: 3}"), ("model.num_heads: got 3", "divisor")),
    spec("pool-smaller-than-train-size", override("task: {min_digits: 1, max_digits: 1}"),
         ("task.train_size", "give only 0 distinct problems")),
    spec("off-policy-k-huge", override("off_policy: {k: 1000000000}"), ("off_policy.k: got 1000000000",)),
    spec("warm-start-seed-negative", override("warm_start: {seed: -1}"), ("warm_start.seed: got -1",)),
    spec("eval-seed-huge", override("eval: {seed: 99999999999999}"), ("eval.seed: got 99999999999999",)),
    spec("model-shape-beyond-any-machine", override("model: {hidden_size: 1000000, intermediate_size: 4000000}"),
         ("model.hidden_size", "parameters")),
    spec("model-shape-beyond-this-machine", override("model: {hidden_size: 8192, intermediate_size: 16384, "
                                                     "num_layers: 8, num_heads: 16}"),
         ("model.hidden_size", "GiB of this machine's memory")),
    spec("faults-unknown-variant", SPEC + "faults: {nope: 3}\n", ("faults.nope: not a variant of this sweep",)),
    spec("faults-negative-step", SPEC + "faults: {base: -3}\n", ("faults.base: got -3",)),
    spec("slurm-time-beyond-a-year", SLURM % "time_minutes: 100000000", ("executor.slurm.time_minutes",)),
    spec("slurm-mem-zero", SLURM % "mem_gb: 0", ("executor.slurm.mem_gb: got 0",)),
    spec("slurm-partition-shell", SLURM % "partition: 'a b;rm -rf x'", ("executor.slurm.partition",)),
    spec("slurm-memory-beyond-mem-gb", (SLURM % "mem_gb: 1") + "overrides: {model: {hidden_size: 4096, "
                                       "intermediate_size: 16384, num_layers: 8}}\n",
         ("model.hidden_size", "executor.slurm.mem_gb")),
    tune("tune-pruner-n-boot-huge", TUNE + "pruner: {name: sigmoid_bound, n_boot: 1000000000}\n",
         ("pruner.n_boot: got 1000000000",)),
    tune("tune-trials-huge", TUNE.replace("trials: 2", "trials: 10000000000"), ("trials: got 10000000000",)),
    tune("tune-storage-unknown-scheme", TUNE + "storage: 'foo://bar'\n", ("storage: not a database URL",)),
    tune("tune-mlflow-unknown-scheme", TUNE + "tracking: {mlflow_uri: 'foo://bar'}\n", ("tracking.mlflow_uri",)),
    # Tracebacks from `sweep train` and damaged sweep directories: one line naming the file and what to do
    Case("train-seed-negative", ["train", "seed=-1"], ("seed: got -1",)),
    Case("train-jsonl-not-json", ["train", "task.name=jsonl", "task.train_path=t.jsonl"],
         ("task.train_path", "line 1: not JSON"), files={"t.jsonl": NOT_JSON}),
    Case("train-model-path-missing", ["train", "model.path=/nonexistent/model"], ("model.path",)),
    Case("train-model-shape-beyond-memory", ["train", "model.hidden_size=8192", "model.intermediate_size=16384",
                                             "model.num_layers=8", "model.num_heads=16"], ("GiB",)),
    Case("status-damaged-state", ["status", "spec.yaml"], ("state/", "damaged (not valid JSON)", "remove it"),
         setup=sweep_dir({"state/*.json": '{"stat'})),
    Case("status-state-wrong-type", ["status", "spec.yaml"], ("damaged (attempts: got 'many'",),
         setup=sweep_dir({"state/*.json": '{"status": "done", "attempts": "many"}'})),
    Case("cancel-damaged-state", ["cancel", "spec.yaml"], ("state/", "damaged"), setup=sweep_dir({"state/*.json": "[]"})),
    Case("run-damaged-state", ["run", "spec.yaml"], ("state/", "damaged"), setup=sweep_dir({"state/*.json": b"\xff"})),
    Case("status-damaged-sweep-json", ["status", "spec.yaml"], ("sweep.json: damaged", "rebuild it"),
         setup=sweep_dir({"sweep.json": '{"na'})),
    Case("report-damaged-sweep-json", ["report", "out", "--no-mlflow"], ("sweep.json: damaged",),
         setup=sweep_dir({"sweep.json": "[1, 2]"})),
    Case("run-damaged-sweep-json", ["run", "spec.yaml"], ("sweep.json: damaged",), setup=sweep_dir({"sweep.json": "7"})),
    Case("report-damaged-plan-json", ["report", "out", "--no-mlflow"], ("plan.json: damaged",),
         setup=sweep_dir({"plan.json": '[{"run_id": 1}]'})),
    Case("report-damaged-config", ["report", "out", "--no-mlflow"], ("config.yaml: damaged",),
         setup=sweep_dir({"runs/*/config.yaml": ": : :\n  - ["})),
    Case("run-damaged-config", ["run", "spec.yaml"], ("config.yaml: damaged or of another config",),
         setup=sweep_dir({"runs/*/config.yaml": "seed: 1\n"})),
    Case("ui-damaged-mlflow-json", ["ui", "out", "--detach"], ("mlflow.json: damaged (not valid JSON)",),
         setup=sweep_dir({"mlflow.json": '{"tracking'})),
    Case("run-mlflow-json-wrong-type", ["run", "spec.yaml"], ("mlflow.json: damaged (tracking_uri is not a str)",),
         setup=sweep_dir({"mlflow.json": '{"tracking_uri": 5}'})),
    spec("run-mlflow-unknown-scheme", SPEC + "tracking: {mlflow_uri: 'foo://bar'}\noutput_dir: out\n",
         ("tracking.mlflow_uri: scheme 'foo'",), command="run"),
    # Memory and time: checks that need no allocation come first; nothing is enumerated or expanded whole
    tune("tune-G-range-of-10-8", TUNE.replace("optimizer.lr: {type: float, low: 1.0e-5, high: 3.0e-4, log: true}",
                                              G_RANGE) + "total_batch: 256\n",
         ("total_batch: 256 is not divisible by rollout.samples_per_prompt = 3",)),
    spec("yaml-alias-bomb", "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(7)),
        ("more than 1,000,000 YAML nodes",)),
    spec("yaml-nested-too-deep", "a: " + "[" * 20000 + "]" * 20000 + "\n", ("spec.yaml",)),
    # Where output goes: new, empty, or this sweep's directory; refused before a file is written
    spec("output-dir-etc", SPEC + "output_dir: /etc\n", ("output_dir: '/etc' holds files but no sweep",)),
    spec("status-output-dir-etc", SPEC + "output_dir: /etc\n", ("output_dir: '/etc'",), command="status"),
    spec("run-output-dir-dev-null", SPEC + "output_dir: /dev/null\n", ("output_dir: '/dev/null' exists and is not a "
                                                                       "directory",), command="run"),
    spec("run-output-dir-a-file", SPEC + "output_dir: notes.txt\n", ("output_dir: 'notes.txt' exists",),
         command="run", files={"notes.txt": "mine"}),
    spec("run-output-dir-of-the-user", SPEC + "output_dir: mine\n", ("output_dir: 'mine' holds files but no sweep",),
         command="run", files={"mine/thesis.tex": "mine"}),
    spec("run-output-dir-of-another-sweep", SPEC + "output_dir: other\n", ("holds sweep 'other-sweep', not 't'",),
         command="run", files={"other/sweep.json": '{"name": "other-sweep"}'}),
    # Messages that mislead, and exit codes of argument errors
    fit("fit-all-pass-rates-nan", HEADER + "a,0,0.2\n" + "".join(f"a,{c},nan\n" for c in range(20, 400, 20)),
        ("no curve could be fitted", "dropped 19 row(s) with an empty or NaN pass_rate")),
    Case("fit-missing-arguments", ["fit", "c.csv"], ("required: --fit-until, --target", "sweep fit --help"),
         files={"c.csv": HEADER + CURVE}),
    Case("fit-n-boot-not-an-integer", ["fit", "c.csv", *FIT, "--n-boot", "many"], ("argument --n-boot",),
         files={"c.csv": HEADER + CURVE}),
    Case("plan-without-spec", ["plan"], ("required: spec",)),
    Case("unknown-command", ["plna", "spec.yaml"], ("unknown command 'plna'",)),
]

# Where a case's only output is an allowed in-directory artefact: none; refusals write nothing at all.


def snapshot(root: Path) -> dict[str, str]:
    """Every path under root with a digest of its content (a damaged file must be left exactly as it was)."""
    state = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink() or not path.is_file():
            state[rel] = "link" if path.is_symlink() else "dir"
        else:
            state[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return state


# Peak RSS from /proc/self/status (VmHWM, kB): getrusage's ru_maxrss would also count the pytest process this
# one was forked from (Linux carries the forked memory's high-water mark across exec).
RUNNER = """\
import sys
from sweeps.cli import main
try:
    code = main(sys.argv[2:])
finally:
    status = open("/proc/self/status").read()
    open(sys.argv[1], "w").write(status.split("VmHWM:")[1].split()[0])
sys.exit(code)
"""


def run_sweep_command(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str, str, float, float]:
    """(exit status, stdout, stderr, peak MB, seconds) of `sweep ARGV` in its own process."""
    peak_file = cwd.parent / f"{cwd.name}.peak"
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", RUNNER, str(peak_file), *argv], cwd=cwd, env=env,
                            capture_output=True, text=True, timeout=MAX_SECONDS * 3)
    seconds = time.perf_counter() - started
    peak_mb = int(peak_file.read_text()) / 1024 if peak_file.exists() else float("nan")
    return result.returncode, result.stdout, result.stderr, peak_mb, seconds


@pytest.mark.parametrize("case", [pytest.param(case, id=case.id) for case in CASES])
def test_bad_input_is_refused_in_one_line_within_bounds(case, tmp_path):
    if any(target == "/etc/passwd" for target in case.links.values()) and not Path("/etc/passwd").is_file():
        pytest.skip("no /etc/passwd")
    root = tmp_path / "work"
    root.mkdir()
    for name, content in case.files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    for name, target in case.links.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).symlink_to(target)
    if case.setup is not None:
        case.setup(root)
    before, repo_before = snapshot(root), set(os.listdir(REPO))
    env = {**os.environ, "SCALERL_SECRET": SECRET, "PYTHONPATH": str(REPO), "SCALERL_CACHE": str(tmp_path / "cache")}

    code, out, err, peak_mb, seconds = run_sweep_command(case.argv, root, env)

    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err[-3000:]
    assert len(lines) == 1, err[-3000:]
    assert "Traceback" not in err + out
    assert SECRET not in err + out and "root:x:0" not in err + out and "nologin" not in err + out
    command = case.argv[0] if case.id != "unknown-command" else ""
    assert lines[0].startswith(f"sweep {command}: error: " if command else "sweep: unknown command"), lines[0]
    for name in case.names:
        assert name in lines[0], f"{name!r} not in {lines[0]!r}"
    assert snapshot(root) == before, "a file was written, removed or changed in the working directory"
    assert set(os.listdir(REPO)) == repo_before
    assert peak_mb < case.max_mb, f"peak memory {peak_mb:.0f} MB"
    assert seconds < MAX_SECONDS, f"{seconds:.1f} s"


def test_round_two_covers_every_class_and_command():
    assert len(CASES) >= 60 and len({case.id for case in CASES}) == len(CASES)
    assert {"plan", "run", "status", "cancel", "report", "ui", "fit", "tune", "train"} <= {c.argv[0] for c in CASES}


def test_a_spec_of_10000_jobs_plans_in_seconds(tmp_path):
    """Planning is linear in jobs: 10,000 variants (each a distinct eps_max) plan well under a minute."""
    variants = ", ".join(f"{{name: cispo, eps_max: {1 + i / 10000}}}" for i in range(1, 10000))
    (tmp_path / "big.yaml").write_text(SPEC.replace("{loss: dapo}", f"{{loss: [{variants}]}}"))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code, out, err, peak_mb, seconds = run_sweep_command(["plan", "big.yaml"], tmp_path, env)
    assert code == 0, err[-2000:]
    assert "10000 jobs: 10000 variants x 1 seed(s)" in out
    assert seconds < 30 and peak_mb < 1000, (seconds, peak_mb)


def test_sweep_fit_on_100000_rows_stays_within_its_memory_bound(tmp_path):
    """One curve of 100,000 evaluations (50,000 in the fit window): the fit's grid is held in blocks, so
    memory stays under 1 GB (it was 2.6 GB with the grid held whole)."""
    rows = "".join(f"one,{i * 0.1:.1f},{0.2 + 0.5 / (1 + (3000 / (i * 0.1)) ** 1.5) if i else 0.2:.4f}\n"
                   for i in range(100_000))
    (tmp_path / "c.csv").write_text(HEADER + rows)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code, out, err, peak_mb, seconds = run_sweep_command(
        ["fit", "c.csv", "--fit-until", "5000", "--target", "9000", "--n-boot", "0"], tmp_path, env)
    assert code == 0, err[-2000:]
    assert "one  -     50000" in out  # the points in (0, 5000]
    assert peak_mb < 1000, peak_mb
