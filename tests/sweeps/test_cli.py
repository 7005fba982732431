"""The `sweep` command line, run in-process."""

import subprocess
import sys

from components import REGISTRIES
from sweeps.cli import main


def test_components_lists_every_axis_and_name_with_formula(capsys):
    assert main(["components"]) == 0
    out = capsys.readouterr().out
    for axis, registry in REGISTRIES.items():
        assert f"\n{axis}:\n" in out
        for name in registry.names():
            assert f" {name}(" in out
    assert "* cispo(eps_max: float = 4.0, eps_min: float = 0.0)" in out
    assert "l_t = -sg(clip(rho_t, eps_min, eps_max)) * A_i * logp_t" in out
    assert "dapo(eps_low: float = 0.2, eps_high: float = 0.26)" in out


def test_components_for_one_axis_and_full_docstrings(capsys):
    assert main(["components", "aggregation", "--full"]) == 0
    out = capsys.readouterr().out
    assert "prompt_mean" in out and "loss:" not in out
    assert "Every prompt weighs the same" in out  # a line past the first docstring line


def test_unknown_axis_and_command_exit_2_with_the_valid_names(capsys):
    assert main(["components", "losses"]) == 2
    assert "valid axes: loss, aggregation" in capsys.readouterr().err
    assert main(["frobnicate"]) == 2
    assert "valid commands: components" in capsys.readouterr().err


def test_help_lists_commands(capsys):
    assert main(["--help"]) == 0
    assert "components" in capsys.readouterr().out


def test_listing_components_and_loading_recipes_never_imports_torch():
    # The sweep planner validates recipes on machines and in processes that never train.
    code = ("import sys; from sweeps.cli import main; main(['components']); "
            "from recipe.config import load_recipe; load_recipe(overrides=['loss=dapo']); "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_a_multi_line_error_is_printed_on_one_line(monkeypatch, capsys):
    # A parser's message or a quoted value can carry newlines; the user still gets one line, exit 2.
    import types

    from components.registry import ConfigError
    from sweeps import cli

    module = types.ModuleType("fake_command")
    module.add_arguments = lambda parser: None

    def run(args):
        raise ConfigError("spec.yaml: while parsing\n  in line 3\nexpected ']'")

    module.run = run
    monkeypatch.setitem(sys.modules, "fake_command", module)
    monkeypatch.setitem(cli.COMMANDS, "fake", ("fake_command", "raises a multi-line error"))
    assert main(["fake"]) == 2
    assert capsys.readouterr().err == "sweep fake: error: spec.yaml: while parsing in line 3 expected ']'\n"
