"""No import circles among the project's modules, lazy imports inside functions included.

A circle ties two modules that should stand one above the other (issue 49 found three: recipe.config and
recipe.scalerl, recipe.engines.pipeline and recipe.run, sweeps.planner and sweeps.tune_spec); the fix is
to move the one name that ties them. A lazy import hides a circle from Python, not from this test.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("components", "recipe", "sweeps", "fitting", "reports")


def module_files(root: Path, packages=PACKAGES) -> dict[str, Path]:
    """Dotted module name -> its file, for every .py file of the packages (a package is its __init__)."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imported_names(path: Path, module: str) -> set[str]:
    """Every dotted name a file imports, anywhere in it (`from a.b import c` gives a.b and a.b.c);
    relative imports are resolved against the file's package."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph(root: Path, packages=PACKAGES) -> dict[str, set[str]]:
    """module -> the project modules it imports. A name resolves to its longest project-module prefix; a
    module importing its own package's __init__ is not an edge (Python runs the parent first anyway)."""
    modules = module_files(root, packages)
    graph = {}
    for module, path in modules.items():
        targets = set()
        for name in imported_names(path, module):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module and not module.startswith(name + "."):
                targets.add(name)
        graph[module] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = counter
                    counter += 1
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
    return sorted(found)


def test_the_package_has_no_import_circle():
    assert circles(import_graph(REPO)) == []


def test_a_planted_circle_is_found_through_a_lazy_import_and_a_relative_one(tmp_path):
    package = tmp_path / "recipe"
    (package / "engines").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "engines" / "__init__.py").write_text("")
    (package / "config.py").write_text("from recipe.engines.job import Job\n")
    (package / "engines" / "job.py").write_text("def f():\n    from ..config import RecipeConfig\n")
    (package / "alone.py").write_text("import recipe.config\n")  # imports into the circle, not part of it
    assert circles(import_graph(tmp_path, ("recipe",))) == [["recipe.config", "recipe.engines.job"]]
    (package / "engines" / "job.py").write_text("import json\n")
    assert circles(import_graph(tmp_path, ("recipe",))) == []
