"""reports/ reads run and study directories: it never imports a driver (the sweep or tune loop, a launcher, a command).

A report can then be rebuilt from the files alone, and the drivers import reports without a circle
(issue 39: reports.study and sweeps.tune imported each other).
"""

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REPORT_MODULES = sorted(f"reports.{path.stem}" for path in (REPO / "reports").glob("*.py") if path.stem != "__init__")
# The modules that run sweeps and studies; the `*_command` modules of the CLI count too.
DRIVERS = {"sweeps.tune", "sweeps.runner", "sweeps.launcher", "sweeps.job", "sweeps.finalize", "sweeps.cli",
           "sweeps.tracking"}


def is_driver(module: str) -> bool:
    return module in DRIVERS or (module.startswith("sweeps.") and module.endswith("_command"))


def imported_modules(source: str) -> set[str]:
    """Every module a source imports, at the top or inside a function: `from sweeps import tune` gives sweeps.tune."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_the_check_sees_a_lazy_import_of_a_driver():
    source = "def f():\n    from sweeps.tune import read_records\n    from sweeps import runner\n"
    assert sorted(filter(is_driver, imported_modules(source))) == ["sweeps.runner", "sweeps.tune"]
    assert not any(map(is_driver, imported_modules("from sweeps.trials import read_records\nimport sweeps.spec\n")))


def test_no_report_module_imports_a_driver():
    offenders = {path.name: sorted(filter(is_driver, imported_modules(path.read_text())))
                 for path in sorted((REPO / "reports").glob("*.py"))}
    assert {name: found for name, found in offenders.items() if found} == {}


def test_importing_every_report_module_loads_no_driver():
    code = ("import importlib, sys\n"
            f"for name in {REPORT_MODULES!r}: importlib.import_module(name)\n"
            "print(' '.join(sorted(sys.modules)))\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    loaded = result.stdout.split()
    assert "reports.study" in loaded
    assert [name for name in loaded if is_driver(name)] == []
