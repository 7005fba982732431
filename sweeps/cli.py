"""The `sweep` command line: one subcommand per module, imported only when that command runs.

Every subcommand module exposes `add_arguments(parser)` and `run(args) -> int`. Only the chosen
module is imported, so `sweep components`, `sweep plan` or `sweep fit` never pay for torch or mlflow.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys

from recipe.process_exit import skip_final_collections

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "components": ("sweeps.components_command", "list every recipe axis, its components, parameters and formula"),
    "fit": ("sweeps.fit_command", "fit sigmoid compute-performance curves to a CSV and score the extrapolation"),
    "plan": ("sweeps.plan_command", "print the jobs a sweep spec expands to (id, axis, choice, seed, resources)"),
    "train": ("sweeps.train_command",
              "run one RL training job from a recipe YAML (resumes if its run directory exists)"),
    "run": ("sweeps.run_command", "run a sweep spec to the end: launch, watch, resume, fit, LOO table, report"),
    "tune": ("sweeps.tune_command",
             "run an Optuna study over recipe parameters; objective from the curve fit, sigmoid-aware pruning"),
    "status": ("sweeps.status_command", "print the state of a sweep's jobs once (spec or sweep directory)"),
    "cancel": ("sweeps.cancel_command", "cancel a sweep's running jobs (SLURM or local); `sweep run` resumes them"),
    "report": ("sweeps.report_command", "build the PDF ablation report of a sweep directory (or an MLflow store)"),
    "ui": ("sweeps.ui_command", "start the MLflow UI on a sweep's tracking store and print its URL"),
}


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2, no traceback."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are UsageErrors: one line (with a pointer to --help) instead of the usage block."""

    def error(self, message: str):
        raise UsageError(f"{message} (sweep {self.prog.split()[-1]} --help lists the arguments)")


def one_line(message: str) -> str:
    """An error message on one line: a newline (from a parser, or a quoted value) becomes a space."""
    return re.sub(r"\s*\n\s*", " ", message.strip())


def print_overview(stream=None) -> None:
    stream = stream or sys.stdout
    print("usage: sweep COMMAND [ARGS ...]   (sweep COMMAND --help for its arguments)\n", file=stream)
    print("Leave-one-out RL recipe ablations with sigmoid compute-performance fits (ScaleRL).\n", file=stream)
    print("commands:", file=stream)
    width = max(len(name) for name in COMMANDS)
    for name, (_, help_text) in COMMANDS.items():
        print(f"  {name.ljust(width)}  {help_text}", file=stream)


def main(argv: list[str] | None = None) -> int:
    skip_final_collections()  # a command that imported mlflow and pandas ends ~1 s sooner
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print_overview()
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"sweep: unknown command {command!r}; valid commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    module_name, help_text = COMMANDS[command]
    module = importlib.import_module(module_name)
    parser = ArgumentParser(prog=f"sweep {command}", description=help_text)
    module.add_arguments(parser)
    # Config and input errors are the user's to fix: one clear line, no traceback.
    from components.registry import ConfigError

    try:
        return int(module.run(parser.parse_args(rest)))
    except (UsageError, ConfigError) as error:
        print(f"sweep {command}: error: {one_line(str(error))}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    # The importable module's main, not this __main__ copy: the commands raise sweeps.cli.UsageError,
    # which this copy's `except UsageError` would not catch (a traceback instead of one line).
    from sweeps.cli import main as module_main

    sys.exit(module_main())
