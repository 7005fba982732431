"""A corpus of malformed inputs, each run in-process through `sweep`: one clear line, exit 2, nothing written.

Every case runs with the current directory a fresh tmp_path holding only its input files, torch made
unimportable (bad input must fail at config load, before any model is built) and OmegaConf's env
resolver pointed at a secret, so a case that resolved an interpolation would show it. For each case:
the exit status, stderr is exactly one non-empty line with no traceback, that line names the key or
argument at fault, no secret leaked, and no file appeared in tmp_path or at the repository's top level.
"""

from __future__ import annotations

import dataclasses
import importlib.abc
import os
import sys
from pathlib import Path

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
    spec_case("base-is-passwd-like", SPEC + "base: passwd\n", ("base: got 'passwd'", "not a recipe YAML", "`scalerl`"),
              files={"passwd": PASSWD}),
    spec_case("base-is-a-directory", SPEC + "base: recipes\n", ("base: got 'recipes', a directory", "`scalerl`"),
              dirs=("recipes",)),
    spec_case("base-missing", SPEC + "base: absent.yaml\n", ("base: got 'absent.yaml', no such file", "`scalerl`")),
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
              ("base: got 'passwd'", "not a recipe YAML", "`scalerl`"),
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
    fit_case("fit-non-numeric", CSV_HEADER + "a,0,0.3\na,100,high\n", ("line 3: column pass_rate holds a value that is not a number",)),
    fit_case("fit-unterminated-quote", CSV_HEADER + 'a,"0\n', ("cannot read c.csv as CSV",)),
    fit_case("fit-binary", b"\xff\xfe\x00\x00" * 8, ("c.csv",)),
    fit_case("fit-empty-run-name", CSV_HEADER + ",0,0.3\n", ("line 2: empty run name",)),
    fit_case("fit-all-unfittable", CSV_HEADER + "lonely,0,0.3\nno_r0,100,0.4\nno_r0,120,0.5\nno_r0,140,0.55\n",
             ("no curve could be fitted (2 curve(s))", "lonely:", "no_r0: R0 is unknown")),
    fit_case("fit-target-zero", CSV_HEADER + "a,0,0.3\n", ("--target must be a compute value > 0",),
             options=["--fit-until", "150", "--target", "0"]),
    fit_case("fit-window-inverted", CSV_HEADER + "a,0,0.3\n", ("--fit-until must exceed --burn-in",),
             options=["--fit-until", "100", "--burn-in", "200", "--target", "300"]),
    fit_case("fit-one-bootstrap-draw", CSV_HEADER + "a,0,0.3\n", ("--n-boot",), options=[*FIT, "--n-boot", "1"]),
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
