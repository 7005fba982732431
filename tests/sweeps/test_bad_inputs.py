"""A corpus of malformed inputs, each run in-process through `sweep`: one clear line, exit 2, nothing written.

Every case runs with the current directory a fresh tmp_path holding only its input files, torch made
unimportable (bad input must fail at config load, before any model is built) and OmegaConf's env
resolver pointed at a secret, so a case that resolved an interpolation would show it. For each case:
the exit status, stderr is exactly one non-empty line with no traceback, that line names the key or
argument at fault, no secret leaked, and no file appeared in tmp_path or at the repository's top level.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.abc
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from sweeps.cli import main

REPO = Path(__file__).resolve().parents[2]
SECRET = "s3cr3t-value"

SPEC = """\
name: t
axes: {loss: dapo}
budget: {unit: device_seconds, fit_at: 10, target: 20}
executor: {name: local, local: {max_parallel: 1, cores_per_job: 2}}
"""

TUNE = """\
name: t
space:
  optimizer.lr: {type: float, low: 1.0e-5, high: 3.0e-4, log: true}
budget: {unit: device_seconds, fit_at: 150, target: 300}
trials: 2
"""

PASSWD = "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
# A llama config of a small model: a valid model directory needs only its tokenizer and weights beside it.
TINY_CONFIG_DICT = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
                    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 100}
TINY_CONFIG = json.dumps(TINY_CONFIG_DICT)
ROWS = '{"prompt": "1+1=?", "answer": "2"}\n'


def overrides_spec(text: str) -> str:
    return SPEC + f"overrides: {{{text}}}\n"


def model_spec(path: str) -> str:
    return SPEC + f"overrides: {{model: {{path: {path}}}}}\n"


def jsonl_spec(extra: str = "") -> str:
    return SPEC + f"overrides: {{task: {{name: jsonl, train_path: t.jsonl{', ' + extra if extra else ''}}}}}\n"
CSV_HEADER = "run,compute,pass_rate\n"
FIT = ["--fit-until", "150", "--target", "300"]


@dataclasses.dataclass
class Case:
    id: str
    argv: list[str]
    names: tuple[str, ...]  # substrings the error line must contain (the key, argument or file at fault)
    files: dict[str, str | bytes] = dataclasses.field(default_factory=dict)  # inputs written into tmp_path
    dirs: tuple[str, ...] = ()  # empty directories created in tmp_path
    code: int = 2


def spec_case(id: str, text: str, names: tuple[str, ...], command: str = "plan", **extra) -> Case:
    return Case(id, [command, "spec.yaml"], names, files={"spec.yaml": text, **extra.pop("files", {})},
                **extra)


def tune_case(id: str, text: str, names: tuple[str, ...], check: bool = True, **extra) -> Case:
    argv = ["tune", "tune.yaml"] + (["--check"] if check else [])
    return Case(id, argv, names, files={"tune.yaml": text, **extra.pop("files", {})}, **extra)


def fit_case(id: str, csv: str | bytes, names: tuple[str, ...], options: list[str] = FIT) -> Case:
    return Case(id, ["fit", "c.csv", *options], names, files={"c.csv": csv})


CASES = [
    # sweep specs
    spec_case("spec-bad-yaml", SPEC.replace("{loss: dapo}", "{loss: [dapo"), ("spec.yaml: not valid YAML", "line")),
    spec_case("spec-python-tag", SPEC.replace("name: t", 'name: !!python/object/apply:os.system ["touch pwned"]'),
              ("could not determine a constructor", "python/object")),
    spec_case("spec-tab-indent", SPEC + "overrides:\n\tmax_steps: 3\n", ("not valid YAML",)),
    spec_case("spec-top-level-list", "- name\n- t\n", ("not a sweep spec YAML", "it holds a list at the top level")),
    spec_case("spec-empty", "", ("name: missing",)),
    spec_case("name-dotdot", SPEC.replace("name: t", "name: '..'"), ("name: got '..'",)),
    spec_case("name-slash", SPEC.replace("name: t", "name: ../escape"), ("name: got '../escape'",)),
    spec_case("name-subshell", SPEC.replace("name: t", "name: $(touch pwned)"), ("name: got '$(touch pwned)'",)),
    spec_case("name-not-a-string", SPEC.replace("name: t", "name: [t]"), ("name: got ['t']",)),
    spec_case("spec-unknown-key", SPEC + "executor2: {}\n", ("executor2: unknown key",)),
    spec_case("spec-root-key", SPEC + "root: /\n", ("root: unknown key",)),
    spec_case("spec-wrong-type", SPEC + "seeds: zero\n", ("seeds: got 'zero'",)),
    spec_case("spec-string-number", SPEC.replace("fit_at: 10", "fit_at: '10'"), ("budget.fit_at: got '10'",)),
    spec_case("spec-out-of-range", SPEC.replace("max_parallel: 1", "max_parallel: 0"),
              ("executor.local.max_parallel: got 0",)),
    spec_case("spec-fit-after-target", SPEC.replace("target: 20", "target: 5"), ("budget.fit_at", "target")),
    spec_case("spec-unknown-axis", SPEC.replace("loss: dapo", "losses: dapo"), ("axes.losses: unknown axis",)),
    spec_case("spec-unknown-component", SPEC.replace("loss: dapo", "loss: dappo"), ("axes.loss", "'dappo'")),
    spec_case("spec-bad-override", SPEC + "overrides: {optimizer: {lr: fast}}\n", ("overrides: optimizer.lr",)),
    spec_case("spec-interpolation-env", SPEC.replace("name: t", "name: x${oc.env:SCALERL_SECRET}"),
              ("spec.yaml: name: got 'x${oc.env:SCALERL_SECRET}'", "interpolation is not supported")),
    spec_case("spec-interpolation-nested", SPEC + "overrides:\n  tracking: {experiment: '${name}'}\n",
              ("overrides.tracking.experiment", "interpolation is not supported")),
    spec_case("spec-interpolation-malformed", SPEC + "output_dir: x${oc.env:SCALERL_SECRET\n",
              ("output_dir", "interpolation is not supported")),
    spec_case("base-is-passwd-like", SPEC + "base: passwd\n",
              ("base: got 'passwd'", "not a recipe YAML", "a preset name (scalerl, dapo"),
              files={"passwd": PASSWD}),
    spec_case("base-is-a-directory", SPEC + "base: recipes\n",
              ("base: got 'recipes', a directory", "a preset name (scalerl, dapo"),
              dirs=("recipes",)),
    spec_case("base-missing", SPEC + "base: absent.yaml\n",
              ("base: got 'absent.yaml', no such file", "a preset name (scalerl, dapo")),
    spec_case("base-binary", SPEC + "base: model.bin\n", ("base: got 'model.bin'", "not a UTF-8 text file"),
              files={"model.bin": b"\x00\xd0\xff\xfe" * 16}),
    spec_case("base-recipe-broken", SPEC + "base: r.yaml\n", ("r.yaml", "loss: unknown loss 'cispoo'"),
              files={"r.yaml": "loss: cispoo\n"}),
    spec_case("status-spec-interpolation", SPEC.replace("name: t", "name: ${oc.env:SCALERL_SECRET}"),
              ("name: got '${oc.env:SCALERL_SECRET}'",), command="status"),
    spec_case("run-spec-interpolation", SPEC + "output_dir: ${oc.env:SCALERL_SECRET}\n", ("output_dir",),
              command="run"),
    Case("plan-directory", ["plan", "adir"], ("adir: is a directory",), dirs=("adir",)),
    Case("plan-missing", ["plan", "absent.yaml"], ("absent.yaml: no such sweep spec",)),
    Case("status-directory", ["status", "adir"], ("adir: not a sweep directory",), dirs=("adir",)),
    Case("status-missing", ["status", "absent"], ("absent: no such sweep spec",)),
    Case("cancel-missing", ["cancel", "absent"], ("absent: no such sweep spec",)),
    # recipes for `sweep train`
    Case("train-unknown-key", ["train", "r.yaml"], ("r.yaml", "optimiser: unknown key"),
         files={"r.yaml": "optimiser: {lr: 0.1}\n"}),
    Case("train-bad-component", ["train", "loss=dappo"], ("override", "loss", "'dappo'", "valid choices")),
    Case("train-bad-component-file", ["train", "r.yaml"], ("r.yaml", "loss", "'dappo'"),
         files={"r.yaml": "loss: dappo\n"}),
    Case("train-override-interpolation", ["train", "optimizer.lr=${oc.env:SCALERL_SECRET}"],
         ("optimizer.lr: got '${oc.env:SCALERL_SECRET}'", "interpolation is not supported")),
    Case("train-override-interpolation-after-recipe", ["train", "r.yaml", "tracking.experiment=${oc.decode:'1'}"],
         ("tracking.experiment", "interpolation is not supported"), files={"r.yaml": "loss: dapo\n"}),
    Case("train-recipe-interpolation", ["train", "r.yaml"], ("r.yaml", "seed: got '${oc.env:SCALERL_SECRET}'"),
         files={"r.yaml": "seed: ${oc.env:SCALERL_SECRET}\n"}),
    Case("train-recipe-python-tag", ["train", "r.yaml"], ("r.yaml", "could not determine a constructor"),
         files={"r.yaml": "seed: !!python/object/apply:os.getcwd []\n"}),
    Case("train-override-wrong-type", ["train", "rollout.samples_per_prompt='8'"], ("rollout.samples_per_prompt",)),
    Case("train-override-out-of-range", ["train", "rollout.samples_per_prompt=1"],
         ("rollout.samples_per_prompt: got 1",)),
    Case("train-override-no-key", ["train", "=3"], ("override '=3': expected key=value",)),
    Case("train-recipe-directory", ["train", "adir"], ("adir: is a directory",), dirs=("adir",)),
    Case("train-recipe-missing", ["train", "absent.yaml"], ("absent.yaml: no such recipe file",)),
    Case("train-negative-threads", ["train", "--threads", "-1"], ("--threads: got -1",)),
    # tune specs
    tune_case("tune-interpolation", TUNE.replace("low: 1.0e-5", "low: '${oc.env:SCALERL_SECRET}'"),
              ("tune.yaml: space.optimizer.lr.low", "interpolation is not supported")),
    tune_case("tune-interpolation-without-check", TUNE.replace("trials: 2", "trials: ${oc.env:SCALERL_SECRET}"),
              ("trials: got '${oc.env:SCALERL_SECRET}'",), check=False),
    tune_case("tune-unknown-param-path", TUNE.replace("optimizer.lr", "optimizer.lrr"),
              ("space.optimizer.lrr: unknown parameter path", "optimizer.lr")),
    tune_case("tune-base-passwd-like", TUNE + "base: passwd\n",
              ("base: got 'passwd'", "not a recipe YAML", "a preset name (scalerl, dapo"),
              files={"passwd": PASSWD}),
    tune_case("tune-base-directory", TUNE + "base: recipes\n", ("base: got 'recipes', a directory",),
              dirs=("recipes",)),
    tune_case("tune-empty-range", TUNE.replace("high: 3.0e-4", "high: 1.0e-5"), ("space.optimizer.lr", "empty range")),
    Case("tune-directory", ["tune", "adir", "--check"], ("adir: is a directory",), dirs=("adir",)),
    # `sweep fit` CSVs and command lines
    Case("fit-directory", ["fit", "adir", *FIT], ("adir is a directory",), dirs=("adir",)),
    Case("fit-missing", ["fit", "absent.csv", *FIT], ("no such file: absent.csv",)),
    fit_case("fit-empty-file", "", ("cannot read c.csv as CSV", "No columns")),
    fit_case("fit-no-columns", "\n\n\n", ("cannot read c.csv as CSV",)),
    fit_case("fit-wrong-columns", "a;b;c\n1;2;3\n", ("missing column(s) run, compute, pass_rate",)),
    fit_case("fit-header-only", CSV_HEADER, ("has a header but no rows",)),
    fit_case("fit-non-numeric", CSV_HEADER + "a,0,0.3\na,100,high\n",
         ("line 3: column pass_rate holds a value that is not a number",)),
    fit_case("fit-unterminated-quote", CSV_HEADER + 'a,"0\n', ("cannot read c.csv as CSV",)),
    fit_case("fit-binary", b"\xff\xfe\x00\x00" * 8, ("c.csv",)),
    fit_case("fit-empty-run-name", CSV_HEADER + ",0,0.3\n", ("line 2: empty run name",)),
    fit_case("fit-all-unfittable", CSV_HEADER + "lonely,0,0.3\nno_r0,100,0.4\nno_r0,120,0.5\nno_r0,140,0.55\n",
             ("no curve could be fitted (2 curve(s))", "lonely:", "no_r0: R0 is unknown")),
    fit_case("fit-target-zero", CSV_HEADER + "a,0,0.3\n", ("argument --target: got 0, expected a finite number > 0",),
             options=["--fit-until", "150", "--target", "0"]),
    fit_case("fit-window-inverted", CSV_HEADER + "a,0,0.3\n", ("--fit-until must exceed --burn-in",),
             options=["--fit-until", "100", "--burn-in", "200", "--target", "300"]),
    fit_case("fit-one-bootstrap-draw", CSV_HEADER + "a,0,0.3\n", ("--n-boot",), options=[*FIT, "--n-boot", "1"]),
    # issue 70: model directories, data files and sizes checked at plan time by the rules the run uses
    spec_case("model-config-cut-mid-file", model_spec("m"), ("model.path", "m/config.json is not valid JSON", "line 1"),
              files={"m/config.json": TINY_CONFIG[:40]}),
    spec_case("model-512-layers-no-tokenizer", model_spec("m"),
              ("model.path", "B parameters", "GiB to train", "use a smaller model"),
              files={"m/config.json": json.dumps({**TINY_CONFIG_DICT, "hidden_size": 65536,
                                                  "intermediate_size": 262144, "num_hidden_layers": 512,
                                                  "num_attention_heads": 512, "num_key_value_heads": 512})}),
    spec_case("model-custom-code", model_spec("m"),
              ("model.path", "config.json asks for custom code (auto_map)", "never runs code", "convert it"),
              files={"m/config.json": json.dumps({**TINY_CONFIG_DICT, "model_type": "mine", "auto_map": {
                  "AutoModelForCausalLM": "modeling_mine.MineForCausalLM"}}),
                     "m/modeling_mine.py": "open('pwned', 'w').write('ran')\n"}),
    spec_case("model-custom-tokenizer-code", model_spec("m"), ("tokenizer_config.json asks for custom code",),
              files={"m/config.json": TINY_CONFIG, "m/tokenizer_config.json": json.dumps(
                  {"auto_map": {"AutoTokenizer": ["tok.MineTokenizer", None]}})}),
    spec_case("model-unknown-architecture", model_spec("m"), ("model_type", "does not build as a causal LM"),
              files={"m/config.json": json.dumps({**TINY_CONFIG_DICT, "model_type": "notamodel"})}),
    spec_case("model-no-tokenizer", model_spec("m"), ("model.path", "has no tokenizer", "tokenizer.save_pretrained"),
              files={"m/config.json": TINY_CONFIG}),
    spec_case("model-no-weights", model_spec("m"), ("model.path", "has no weights"),
              files={"m/config.json": TINY_CONFIG, "m/tokenizer.json": "{}"}),
    spec_case("jsonl-prompt-a-list", jsonl_spec(), ("task.train_path", "t.jsonl line 2", "'prompt' message 0 is not"),
              files={"t.jsonl": ROWS + '{"prompt": ["a", "b"], "answer": "1"}\n'}),
    spec_case("jsonl-answer-a-mapping", jsonl_spec(), ("t.jsonl line 2", "'answer' is an object"),
              files={"t.jsonl": ROWS + '{"prompt": "x", "answer": {"value": 1}}\n'}),
    spec_case("jsonl-answer-null", jsonl_spec(), ("t.jsonl line 2", "'answer' is null"),
              files={"t.jsonl": ROWS + '{"prompt": "x", "answer": null}\n'}),
    spec_case("jsonl-validation-larger-than-file", jsonl_spec("validation_size: 300"),
              ("task.validation_size: got 300", "holds 3 rows", "task.validation_path"), files={"t.jsonl": ROWS * 3}),
    spec_case("jsonl-eval-beyond-validation-file", jsonl_spec("validation_path: v.jsonl"),
              ("eval.num_prompts: got 128", "holds 2 prompts", "v.jsonl"),
              files={"t.jsonl": ROWS, "v.jsonl": ROWS * 2}),
    spec_case("eval-beyond-validation-size", overrides_spec("eval: {num_prompts: 100000}"),
              ("eval.num_prompts: got 100,000", "256 prompts (task.validation_size)")),
    spec_case("vllm-cpu-cache-100000-gib", overrides_spec("rollout: {generator: vllm, vllm_cpu_kv_cache_gib: 100000}"),
              ("rollout.vllm_cpu_kv_cache_gib: got 100,000 GiB", "set it to at most")),
    spec_case("generator-rows-beyond-memory", overrides_spec("rollout: {rows_per_call: 10000000000}"),
              ("rollout.rows_per_call: one decode batch", "GiB of key/value cache", "decode_token_budget")),
    spec_case("eval-batch-beyond-memory", overrides_spec("eval: {batch_size: 10000000000}"),
              ("eval.batch_size: one decode batch",)),
    Case("train-model-custom-code", ["train", "model.path=m"], ("model.path", "asks for custom code"),
         files={"m/config.json": json.dumps({**TINY_CONFIG_DICT, "auto_map": {"AutoModelForCausalLM": "x.Y"}})}),
    Case("train-jsonl-answer-null", ["train", "task.name=jsonl", "task.train_path=t.jsonl"],
         ("task.train_path", "'answer' is null"), files={"t.jsonl": '{"prompt": "x", "answer": null}\n'}),
    # the literal examples, against the real file
    spec_case("base-is-etc-passwd", SPEC + "base: /etc/passwd\n", ("base: got '/etc/passwd'", "not a recipe YAML")),
    Case("train-etc-passwd", ["train", "/etc/passwd"], ("/etc/passwd: not a recipe YAML",)),
    Case("fit-etc-passwd", ["fit", "/etc/passwd", *FIT], ("/etc/passwd",)),
]


def cases() -> list:
    """CASES as pytest params; those reading /etc/passwd are skipped where there is none."""
    no_passwd = pytest.mark.skipif(not Path("/etc/passwd").is_file(), reason="no /etc/passwd")
    uses_passwd = ["/etc/passwd" in " ".join(case.argv) + " ".join(map(str, case.files.values())) for case in CASES]
    return [pytest.param(case, id=case.id, marks=[no_passwd] if uses else []) for case, uses in zip(CASES, uses_passwd)]


def all_files(root: Path) -> set[str]:
    return {str(path.relative_to(root)) for path in root.rglob("*")}


class BlockTorch(importlib.abc.MetaPathFinder):
    """`import torch` raises ImportError (a None in sys.modules would do it too, but scipy's array API
    helpers then read sys.modules["torch"] and fail on the None)."""

    def find_spec(self, name, path, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"{name} is blocked: bad input must fail before torch is imported")
        return None


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """cwd = tmp_path; torch unimportable; the env resolver would reveal SECRET if anything resolved it."""
    monkeypatch.chdir(tmp_path)
    for name in [name for name in sys.modules if name == "torch" or name.startswith("torch.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [BlockTorch(), *sys.meta_path])
    monkeypatch.setenv("SCALERL_SECRET", SECRET)
    return tmp_path


@pytest.mark.parametrize("case", cases())
def test_bad_input_fails_with_one_line_and_writes_nothing(case, sandbox, capsys):
    for name, content in case.files.items():
        path = sandbox / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    for name in case.dirs:
        (sandbox / name).mkdir()
    before, repo_before = all_files(sandbox), set(os.listdir(REPO))

    code = main(case.argv)

    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == case.code, captured.err
    assert len(lines) == 1 and captured.err.count("\n") == 1, captured.err
    assert "Traceback" not in captured.err and SECRET not in captured.err + captured.out
    assert "root:x:0" not in captured.err + captured.out, "the content of a file that is not a recipe was echoed"
    assert lines[0].startswith(f"sweep {case.argv[0]}: error: ")
    for name in case.names:
        assert name in lines[0], f"{name!r} not in {lines[0]!r}"
    assert all_files(sandbox) == before, "a file appeared in the working directory"
    assert set(os.listdir(REPO)) == repo_before and not (sandbox / "runs").exists()


def test_the_corpus_covers_every_command_that_reads_user_files():
    commands = {case.argv[0] for case in CASES}
    assert {"plan", "status", "run", "cancel", "train", "tune", "fit"} <= commands
    assert len({case.id for case in CASES}) == len(CASES)

# ---------------------------------------------------------------------------------------------------
# Bad input, second round: every case runs `sweep` as a user would, in its own process, and is measured.
#
# The first corpus (above) runs in-process; these run `python -m sweeps.cli ...` so a child
# process's traceback, its peak memory and its wall time are seen as a user sees them. Per case: exit 2,
# stderr is one line starting `sweep COMMAND: error:` that names the key, argument or file at fault, no
# traceback, none of the planted secrets (a `.env` value, an environment variable, /etc/passwd's lines),
# no file written in the working directory beyond what the case set up (a damaged sweep directory is
# left byte for byte as it was), peak RSS under MAX_MB and wall time under MAX_SECONDS.
#
# The classes (issue 36): a file's content in an error; accepted at plan time, failing later; tracebacks
# from damaged sweep directories and bad task files; memory and time; where output goes; messages that
# mislead; exit codes of argument errors.

PLANTED = "s3cr3t-value-9f2c"  # planted in files and in the environment; must never be printed
MAX_MB, MAX_SECONDS = 700, 60.0

SLURM = SPEC.replace("name: local, local: {max_parallel: 1, cores_per_job: 2}", "name: slurm, slurm: {%s}")
G_RANGE = "rollout.samples_per_prompt: {type: int, low: 2, high: 100000000}"
DOTENV = f"API_KEY={PLANTED}\nDATABASE_URL=postgres://u:{PLANTED}@h/db\n"
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
class ProcessCase:
    id: str
    argv: list[str]
    names: tuple[str, ...]  # substrings the error line must contain
    files: dict[str, str | bytes] = dataclasses.field(default_factory=dict)
    setup: Callable[[Path], None] | None = None
    links: dict[str, str] = dataclasses.field(default_factory=dict)  # name -> symlink target
    max_mb: int = MAX_MB


def proc_spec(id: str, text: str, names: tuple[str, ...], command: str = "plan", **extra) -> ProcessCase:
    return ProcessCase(id, [command, "spec.yaml"], names, files={"spec.yaml": text, **extra.pop("files", {})}, **extra)


def proc_fit(id: str, csv: str | bytes, names: tuple[str, ...], options: list[str] = FIT) -> ProcessCase:
    return ProcessCase(id, ["fit", "c.csv", *options], names, files={"c.csv": csv})


def proc_tune(id: str, text: str, names: tuple[str, ...]) -> ProcessCase:
    return ProcessCase(id, ["tune", "t.yaml", "--check"], names, files={"t.yaml": text})


ENV_HEADER = ",".join(f"{key}={value}" for key, value in [("HOME", "/root"), ("TOKEN", PLANTED), ("SHELL", "/bin/sh")])
NOT_JSON = "{this is not json\n"

PROCESS_CASES = [
    # A file's content in an error: never echoed (keys that are not names, values of unknown files, CSV cells)
    ProcessCase("spec-symlink-passwd", ["plan", "s.yaml"], ("s.yaml: not a sweep spec YAML", "holds a str"),
         links={"s.yaml": "/etc/passwd"}),
    ProcessCase("tune-symlink-passwd", ["tune", "t.yaml", "--check"], ("t.yaml: not a tune spec YAML",),
         links={"t.yaml": "/etc/passwd"}),
    ProcessCase("run-symlink-passwd", ["run", "s.yaml"], ("s.yaml: not a sweep spec YAML",),
         links={"s.yaml": "/etc/passwd"}),
    proc_spec("spec-dotenv", DOTENV, ("spec.yaml: not a sweep spec YAML", "holds a str")),
    proc_spec("spec-dotenv-export", f"export API_KEY={PLANTED}\n", ("spec.yaml: not a sweep spec YAML",)),
    proc_spec("spec-key-holds-secret", SPEC + f"API_KEY={PLANTED}: 1\n",
         ("spec.yaml: not a sweep spec YAML", "1 of its 5 top-level keys are not names")),
    proc_spec("spec-long-unknown-key", SPEC + f"{PLANTED}-and-then-some-more-text-to-be-long: 1\n",
         ("1 of its 5 top-level keys are not names",)),
    proc_spec("overrides-key-holds-secret", SPEC + f"overrides: {{'API_KEY={PLANTED}': 1}}\n",
         ("overrides: a key that is not a name (not shown): unknown key",)),
    proc_spec("axis-name-holds-secret", SPEC.replace("{loss: dapo}", f"{{'{PLANTED}': dapo}}"),
         ("axes.a key that is not a name (not shown): unknown axis",)),
    proc_spec("component-param-holds-secret",
         SPEC.replace("{loss: dapo}", f"{{loss: {{name: dapo, 'k={PLANTED}': 1}}}}"),
         ("axes.loss", "unknown parameter of loss 'dapo'")),
    proc_spec("faults-key-holds-secret",
         SPEC + f"faults: {{'x={PLANTED}': 3}}\n", ("faults.a key that is not a name",)),
    ProcessCase("status-dir-spec-is-passwd", ["status", "sd"], ("sd/spec.yaml: not a sweep spec YAML",),
         links={"sd/spec.yaml": "/etc/passwd"}),
    ProcessCase("cancel-dir-spec-is-dotenv", ["cancel", "sd"], ("sd/spec.yaml: not a sweep spec YAML",),
         files={"sd/spec.yaml": DOTENV}),
    ProcessCase("train-recipe-is-dotenv", ["train", ".env"], (".env: not a recipe YAML",), files={".env": DOTENV}),
    proc_fit("fit-env-dump-header", ENV_HEADER + "\n1,2,3\n", ("missing column(s) run, compute, pass_rate",
                                                          "3 other column(s) (not shown)")),
    ProcessCase("fit-dotenv", ["fit", ".env", *FIT], (".env is missing column(s)",), files={".env": DOTENV}),
    proc_fit("fit-secret-pass-rate", CSV_HEADER + f"a,0,{PLANTED}\n",
         ("line 2: column pass_rate holds a value that is not a number",)),
    proc_fit("fit-secret-compute", CSV_HEADER + f"a,{PLANTED},0.3\n",
         ("line 2: column compute holds a value that is not a number",)),
    proc_fit("fit-secret-step", "run,compute,pass_rate,step\na,0,0.3," + PLANTED + "\n", ("line 2: column step",)),
    proc_fit("fit-binary", b"\x00\xff\xfe" * 50, ("c.csv",)),
    # Accepted at plan time, failing later: now refused by `sweep plan`
    proc_spec("seed-negative", SPEC + "seeds: [-1]\n", ("seeds: got -1", "[0, 4294967295]")),
    proc_spec("seed-beyond-2-32", SPEC + "seeds: [4294967296]\n", ("seeds: got 4294967296",)),
    proc_spec("target-infinite", SPEC.replace("target: 20", "target: .inf"), ("budget.target: got inf", "finite")),
    proc_spec("fit-at-nan", SPEC.replace("fit_at: 10", "fit_at: .nan"), ("budget.fit_at: got nan",)),
    proc_spec("min-compute-ratio-infinite", SPEC.replace("target: 20", "target: 20, min_compute_ratio: .inf"),
         ("budget.min_compute_ratio",)),
    proc_spec("poll-seconds-zero", SPEC.replace("executor: {", "executor: {poll_seconds: 0, "),
         ("executor.poll_seconds: got 0",)),
    proc_spec("axis-without-alternative", SPEC.replace("{loss: dapo}", "{loss: []}"), ("axes.loss: an empty list",)),
    proc_spec("task-unknown", override("task: {name: gsm8k}"), ("task.name: got 'gsm8k'", "embedded, file, jsonl")),
    proc_spec("dtype-unknown", override("model: {dtype: float64}"), ("model.dtype: got 'float64'", "bfloat16")),
    proc_spec("model-path-missing", override("model: {path: /nonexistent/model}"),
         ("model.path: got '/nonexistent/model', no such directory",)),
    proc_spec("model-path-not-a-model", override("model: {path: adir}"), ("model.path", "no config.json"),
         files={"adir/weights.bin": b"\x00"}),
    proc_spec("jsonl-without-path", override("task: {name: jsonl}"), ("task.train_path: required",)),
    proc_spec("jsonl-path-missing", override("task: {name: jsonl, train_path: absent.jsonl}"),
         ("task.train_path: got 'absent.jsonl', no such file",)),
    proc_spec("jsonl-not-json", override("task: {name: jsonl, train_path: t.jsonl}"),
         ("task.train_path", "line 2: not JSON"), files={"t.jsonl": '{"prompt": "1+1", "answer": "2"}\n' + NOT_JSON}),
    proc_spec("jsonl-row-without-answer", override("task: {name: jsonl, train_path: t.jsonl}"),
         ("task.train_path", "line 1: no 'answer' or 'reward_model.ground_truth' or 'solution' field"),
         files={"t.jsonl": json.dumps({"prompt": "1+1", PLANTED: PLANTED}) + "\n"}),
    proc_spec("lr-infinite", override("optimizer: {lr: .inf}"), ("optimizer.lr: got inf",)),
    proc_spec("temperature-nan", override("rollout: {temperature: .nan}"), ("rollout.temperature: got nan",)),
    proc_spec("heads-not-dividing-width", override("model: {num_heads: 3}"), ("model.num_heads: got 3", "divisor")),
    proc_spec("pool-smaller-than-train-size", override("task: {min_digits: 1, max_digits: 1}"),
         ("task.train_size", "give only 0 distinct problems")),
    proc_spec("off-policy-k-huge", override("off_policy: {k: 1000000000}"), ("off_policy.k: got 1000000000",)),
    proc_spec("warm-start-seed-negative", override("warm_start: {seed: -1}"), ("warm_start.seed: got -1",)),
    proc_spec("eval-seed-huge", override("eval: {seed: 99999999999999}"), ("eval.seed: got 99999999999999",)),
    proc_spec("model-shape-beyond-any-machine", override("model: {hidden_size: 1000000, intermediate_size: 4000000}"),
         ("model.hidden_size", "parameters")),
    proc_spec("model-shape-beyond-this-machine", override("model: {hidden_size: 8192, intermediate_size: 16384, "
                                                     "num_layers: 8, num_heads: 16}"),
         ("model.hidden_size", "GiB of this machine's memory")),
    proc_spec("faults-unknown-variant", SPEC + "faults: {nope: 3}\n", ("faults.nope: not a variant of this sweep",)),
    proc_spec("faults-negative-step", SPEC + "faults: {base: -3}\n", ("faults.base: got -3",)),
    proc_spec("slurm-time-beyond-a-year", SLURM % "time_minutes: 100000000", ("executor.slurm.time_minutes",)),
    proc_spec("slurm-mem-zero", SLURM % "mem_gb: 0", ("executor.slurm.mem_gb: got 0",)),
    proc_spec("slurm-partition-shell", SLURM % "partition: 'a b;rm -rf x'", ("executor.slurm.partition",)),
    proc_spec("slurm-memory-beyond-mem-gb", (SLURM % "mem_gb: 1") + "overrides: {model: {hidden_size: 4096, "
                                       "intermediate_size: 16384, num_layers: 8}}\n",
         ("model.hidden_size", "executor.slurm.mem_gb")),
    proc_tune("tune-pruner-n-boot-huge", TUNE + "pruner: {name: sigmoid_bound, n_boot: 1000000000}\n",
         ("pruner.n_boot: got 1000000000",)),
    proc_tune("tune-trials-huge", TUNE.replace("trials: 2", "trials: 10000000000"), ("trials: got 10000000000",)),
    proc_tune("tune-storage-unknown-scheme", TUNE + "storage: 'foo://bar'\n", ("storage: not a database URL",)),
    proc_tune("tune-mlflow-unknown-scheme", TUNE + "tracking: {mlflow_uri: 'foo://bar'}\n", ("tracking.mlflow_uri",)),
    # Tracebacks from `sweep train` and damaged sweep directories: one line naming the file and what to do
    ProcessCase("train-seed-negative", ["train", "seed=-1"], ("seed: got -1",)),
    ProcessCase("train-jsonl-not-json", ["train", "task.name=jsonl", "task.train_path=t.jsonl"],
         ("task.train_path", "line 1: not JSON"), files={"t.jsonl": NOT_JSON}),
    ProcessCase("train-model-path-missing", ["train", "model.path=/nonexistent/model"], ("model.path",)),
    ProcessCase("train-model-shape-beyond-memory", ["train", "model.hidden_size=8192", "model.intermediate_size=16384",
                                             "model.num_layers=8", "model.num_heads=16"], ("GiB",)),
    ProcessCase("status-damaged-state", ["status", "spec.yaml"], ("state/", "damaged (not valid JSON)", "remove it"),
         setup=sweep_dir({"state/*.json": '{"stat'})),
    ProcessCase("status-state-wrong-type", ["status", "spec.yaml"], ("damaged (attempts: got 'many'",),
         setup=sweep_dir({"state/*.json": '{"status": "done", "attempts": "many"}'})),
    ProcessCase("cancel-damaged-state", ["cancel", "spec.yaml"], ("state/", "damaged"),
         setup=sweep_dir({"state/*.json": "[]"})),
    ProcessCase("run-damaged-state", ["run", "spec.yaml"], ("state/", "damaged"),
         setup=sweep_dir({"state/*.json": b"\xff"})),
    ProcessCase("status-damaged-sweep-json", ["status", "spec.yaml"], ("sweep.json: damaged", "rebuild it"),
         setup=sweep_dir({"sweep.json": '{"na'})),
    ProcessCase("report-damaged-sweep-json", ["report", "out", "--no-mlflow"], ("sweep.json: damaged",),
         setup=sweep_dir({"sweep.json": "[1, 2]"})),
    ProcessCase("run-damaged-sweep-json", ["run", "spec.yaml"], ("sweep.json: damaged",),
         setup=sweep_dir({"sweep.json": "7"})),
    ProcessCase("report-damaged-plan-json", ["report", "out", "--no-mlflow"], ("plan.json: damaged",),
         setup=sweep_dir({"plan.json": '[{"run_id": 1}]'})),
    ProcessCase("report-damaged-config", ["report", "out", "--no-mlflow"], ("config.yaml: damaged",),
         setup=sweep_dir({"runs/*/config.yaml": ": : :\n  - ["})),
    ProcessCase("run-damaged-config", ["run", "spec.yaml"], ("config.yaml: damaged or of another config",),
         setup=sweep_dir({"runs/*/config.yaml": "seed: 1\n"})),
    ProcessCase("ui-damaged-mlflow-json", ["ui", "out", "--detach"], ("mlflow.json: damaged (not valid JSON)",),
         setup=sweep_dir({"mlflow.json": '{"tracking'})),
    ProcessCase("ui-mlflow-json-without-experiment", ["ui", "out", "--detach"], ("mlflow.json: damaged (it lacks",),
                setup=sweep_dir({"mlflow.json": '{"tracking_uri": "sqlite:///x.db"}'})),
    ProcessCase("run-mlflow-json-wrong-type", ["run", "spec.yaml"],
         ("mlflow.json: damaged (tracking_uri is not a str)",),
         setup=sweep_dir({"mlflow.json": '{"tracking_uri": 5}'})),
    proc_spec("run-mlflow-unknown-scheme", SPEC + "tracking: {mlflow_uri: 'foo://bar'}\noutput_dir: out\n",
         ("tracking.mlflow_uri: scheme 'foo'",), command="run"),
    # Issue 70: what a run would load, checked before it starts, by `sweep plan` and `sweep train` alike
    ProcessCase("train-model-512-layers-no-tokenizer", ["train", "model.path=m"], ("model.path", "GiB to train"),
                files={"m/config.json": json.dumps({**TINY_CONFIG_DICT, "hidden_size": 65536,
                                                    "intermediate_size": 262144, "num_hidden_layers": 512,
                                                    "num_attention_heads": 512})}),
    ProcessCase("train-model-config-cut-mid-file", ["train", "model.path=m"], ("m/config.json is not valid JSON",),
                files={"m/config.json": TINY_CONFIG[:30]}),
    ProcessCase("train-model-custom-code", ["train", "model.path=m"], ("asks for custom code", "never runs code"),
                files={"m/config.json": json.dumps({**TINY_CONFIG_DICT, "auto_map": {"AutoModelForCausalLM": "x.Y"}}),
                       "m/x.py": f"print('{PLANTED}')\n"}),
    ProcessCase("plan-model-no-tokenizer", ["plan", "spec.yaml"], ("has no tokenizer",),
                files={"spec.yaml": model_spec("m"), "m/config.json": TINY_CONFIG}),
    ProcessCase("train-jsonl-prompt-a-list", ["train", "task.name=jsonl", "task.train_path=t.jsonl"],
                ("t.jsonl line 1", "'prompt' message 0 is not"),
                files={"t.jsonl": f'{{"prompt": ["{PLANTED}"], "answer": 1}}\n'}),
    ProcessCase("train-jsonl-validation-larger-than-file", ["train", "task.name=jsonl", "task.train_path=t.jsonl"],
                ("task.validation_size: got 256", "holds 2 rows"), files={"t.jsonl": ROWS * 2}),
    ProcessCase("train-eval-beyond-validation-size", ["train", "eval.num_prompts=5000"],
                ("eval.num_prompts: got 5,000",)),
    ProcessCase("train-vllm-cpu-cache-100000-gib", ["train", "rollout.generator=vllm",
                                                    "rollout.vllm_cpu_kv_cache_gib=100000"],
                ("rollout.vllm_cpu_kv_cache_gib: got 100,000 GiB",)),
    proc_spec("plan-vllm-cpu-cache-100000-gib",
              overrides_spec("rollout: {generator: vllm, vllm_cpu_kv_cache_gib: 100000}"),
              ("rollout.vllm_cpu_kv_cache_gib",)),
    # Memory and time: checks that need no allocation come first; nothing is enumerated or expanded whole
    proc_tune("tune-G-range-of-10-8", TUNE.replace("optimizer.lr: {type: float, low: 1.0e-5, high: 3.0e-4, log: true}",
                                              G_RANGE) + "total_batch: 256\n",
         ("total_batch: 256 is not divisible by rollout.samples_per_prompt = 3",)),
    proc_spec("yaml-alias-bomb", "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(7)),
        ("more than 1,000,000 YAML nodes",)),
    proc_spec("yaml-nested-too-deep", "a: " + "[" * 20000 + "]" * 20000 + "\n", ("spec.yaml",)),
    # Where output goes: new, empty, or this sweep's directory; refused before a file is written
    proc_spec("output-dir-etc", SPEC + "output_dir: /etc\n", ("output_dir: '/etc' holds files but no sweep",)),
    proc_spec("status-output-dir-etc", SPEC + "output_dir: /etc\n", ("output_dir: '/etc'",), command="status"),
    proc_spec("run-output-dir-dev-null", SPEC + "output_dir: /dev/null\n",
         ("output_dir: '/dev/null' exists and is not a "
                                                                       "directory",), command="run"),
    proc_spec("run-output-dir-a-file", SPEC + "output_dir: notes.txt\n", ("output_dir: 'notes.txt' exists",),
         command="run", files={"notes.txt": "mine"}),
    proc_spec("run-output-dir-of-the-user", SPEC + "output_dir: mine\n",
         ("output_dir: 'mine' holds files but no sweep",),
         command="run", files={"mine/thesis.tex": "mine"}),
    proc_spec("run-output-dir-of-another-sweep", SPEC + "output_dir: other\n", ("holds sweep 'other-sweep', not 't'",),
         command="run", files={"other/sweep.json": '{"name": "other-sweep"}'}),
    # Messages that mislead, and exit codes of argument errors
    proc_fit("fit-all-pass-rates-nan", CSV_HEADER + "a,0,0.2\n" + "".join(f"a,{c},nan\n" for c in range(20, 400, 20)),
        ("no curve could be fitted", "dropped 19 row(s) with an empty or NaN pass_rate")),
    ProcessCase("fit-missing-arguments", ["fit", "c.csv"], ("required: --fit-until, --target", "sweep fit --help"),
         files={"c.csv": CSV_HEADER + CURVE}),
    ProcessCase("fit-n-boot-not-an-integer", ["fit", "c.csv", *FIT, "--n-boot", "many"], ("argument --n-boot",),
         files={"c.csv": CSV_HEADER + CURVE}),
    ProcessCase("plan-without-spec", ["plan"], ("required: spec",)),
    ProcessCase("unknown-command", ["plna", "spec.yaml"], ("unknown command 'plna'",)),
    # Issue 49: names and paths past the file system's limits, numbers outside their ranges, work without a bound.
    proc_spec("name-300-bytes", SPEC.replace("name: t", "name: " + "n" * 300), ("name: got 300 bytes", "at most 100")),
    proc_tune("tune-name-300-bytes", TUNE.replace("name: t", "name: " + "n" * 300), ("name: got 300 bytes",)),
    proc_spec("output-dir-component-256-bytes", SPEC + f"output_dir: out/{'o' * 256}\n",
              ("output_dir: a path component of 256 bytes", "at most 255")),
    proc_spec("output-dir-past-path-max", SPEC + f"output_dir: {'/'.join(['p' * 250] * 16)}\n",
              ("output_dir:", "as an absolute path", "4,096-byte path limit")),
    proc_spec("cache-dir-component-300-bytes", override(f"warm_start: {{cache_dir: c/{'c' * 300}}}"),
              ("warm_start.cache_dir: a path component of 300 bytes",)),
    ProcessCase("train-run-dir-component-300-bytes", ["train", "--run-dir", "r" * 300],
                ("--run-dir: a path component",)),
    ProcessCase("train-threads-negative", ["train", "--threads", "-3"], ("argument --threads: got -3",)),
    proc_fit("fit-bootstrap-seed-negative", CSV_HEADER + CURVE,
             ("argument --bootstrap-seed: got -1", "[0, 4,294,967,295]"), [*FIT, "--bootstrap-seed", "-1"]),
    proc_fit("fit-bootstrap-seed-past-32-bits", CSV_HEADER + CURVE, ("argument --bootstrap-seed: got 4294967296",),
             [*FIT, "--bootstrap-seed", str(2**32)]),
    proc_fit("fit-n-boot-past-its-bound", CSV_HEADER + CURVE, ("argument --n-boot: got 100000000",),
             [*FIT, "--n-boot", "100000000"]),
    proc_fit("fit-target-nan", CSV_HEADER + CURVE, ("argument --target: got nan", "a finite number > 0"),
             ["--fit-until", "150", "--target", "nan"]),
    proc_fit("fit-r0-above-1", CSV_HEADER + CURVE, ("argument --r0: got 1.5", "[0, 1]"), [*FIT, "--r0", "1.5"]),
    proc_fit("fit-paper-range-reversed", CSV_HEADER + CURVE, ("--paper-c-mid-range: LO must be below HI",),
             [*FIT, "--method", "paper", "--paper-c-mid-range", "500", "100"]),
    proc_fit("fit-1000-runs-of-100-rows-with-1000-draws",
             CSV_HEADER + "".join(f"r{run},{c},{0.2 + 0.5 * c / (c + 3000):.4f}\n" for run in range(1000)
                                  for c in range(0, 10000, 100)),
             ("1,000 curves x (1 + --n-boot 1000) = 1,001,000 fits", "--allow-long")),
    ProcessCase("report-n-boot-1", ["report", "out", "--n-boot", "1"], ("argument --n-boot: got 1",)),
    ProcessCase("ui-port-70000", ["ui", "out", "--port", "70000"], ("argument --port: got 70000", "[1, 65,535]")),
    proc_spec("run-10000-jobs", SPEC.replace("{loss: dapo}", "{loss: [%s]}" % ", ".join(
        f"{{name: cispo, eps_max: {1 + i / 10000}}}" for i in range(1, 10000))), ("10,000 jobs", "--allow-large"),
              command="run"),
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


@pytest.mark.parametrize("case", [pytest.param(case, id=case.id) for case in PROCESS_CASES])
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
    env = {**os.environ, "SCALERL_SECRET": PLANTED, "PYTHONPATH": str(REPO), "SCALERL_CACHE": str(tmp_path / "cache")}

    code, out, err, peak_mb, seconds = run_sweep_command(case.argv, root, env)

    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err[-3000:]
    assert len(lines) == 1, err[-3000:]
    assert "Traceback" not in err + out
    assert PLANTED not in err + out and "root:x:0" not in err + out and "nologin" not in err + out
    command = case.argv[0] if case.id != "unknown-command" else ""
    assert lines[0].startswith(f"sweep {command}: error: " if command else "sweep: unknown command"), lines[0]
    for name in case.names:
        assert name in lines[0], f"{name!r} not in {lines[0]!r}"
    assert snapshot(root) == before, "a file was written, removed or changed in the working directory"
    assert set(os.listdir(REPO)) == repo_before
    assert peak_mb < case.max_mb, f"peak memory {peak_mb:.0f} MB"
    assert seconds < MAX_SECONDS, f"{seconds:.1f} s"


def test_the_second_corpus_covers_every_command():
    assert len(PROCESS_CASES) >= 60 and len({case.id for case in PROCESS_CASES}) == len(PROCESS_CASES)
    commands = {case.argv[0] for case in PROCESS_CASES}
    assert {"plan", "run", "status", "cancel", "report", "ui", "fit", "tune", "train"} <= commands


def test_a_spec_of_10000_jobs_plans_in_time_linear_in_its_jobs(tmp_path):
    """Planning is linear in jobs: 10,000 variants (each a distinct eps_max) cost less than 12x the CPU time of
    1,000 (the process's start and imports come on top of both; 6.0 s against 0.79 s on the Intel Xeon). In CPU
    seconds of the child, so a busy or slow machine moves both alike; a quadratic planner (8 minutes for 10,000
    once) is ~100x."""
    import resource

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cpu_seconds = {}
    for jobs in (1000, 10000):
        variants = ", ".join(f"{{name: cispo, eps_max: {1 + i / jobs}}}" for i in range(1, jobs))
        (tmp_path / f"big{jobs}.yaml").write_text(SPEC.replace("{loss: dapo}", f"{{loss: [{variants}]}}"))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        code, out, err, peak_mb, _ = run_sweep_command(["plan", f"big{jobs}.yaml"], tmp_path, env)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_seconds[jobs] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        assert code == 0, err[-2000:]
        assert f"{jobs} jobs: {jobs} variants x 1 seed(s)" in out
    assert "warning: 10,000 jobs, each trained to 20 device_seconds (200,000 in all), more than 1,000: starting " \
           "them takes --allow-large" in out
    assert cpu_seconds[10000] < 12 * cpu_seconds[1000], cpu_seconds
    assert peak_mb < 1000, peak_mb


def test_sweep_fit_on_100000_rows_stays_within_its_memory_bound(tmp_path):
    """One curve of 100,000 evaluations (50,000 in the fit window): the fit's grid is held in blocks, so
    memory stays under 1 GB (it was 2.6 GB with the grid held whole)."""
    rows = "".join(f"one,{i * 0.1:.1f},{0.2 + 0.5 / (1 + (3000 / (i * 0.1)) ** 1.5) if i else 0.2:.4f}\n"
                   for i in range(100_000))
    (tmp_path / "c.csv").write_text(CSV_HEADER + rows)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code, out, err, peak_mb, seconds = run_sweep_command(
        ["fit", "c.csv", "--fit-until", "5000", "--target", "9000", "--n-boot", "0"], tmp_path, env)
    assert code == 0, err[-2000:]
    assert "one  -     50000" in out  # the points in (0, 5000]
    assert peak_mb < 1000, peak_mb
