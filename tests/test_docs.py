"""README, BENCHMARKS.md and docs/ against the code: links resolve, what the README shows exists, keys are documented.

Three kinds of check, each able to fail on a real drift:
- links: every relative link of README.md, BENCHMARKS.md and docs/*.md names a file that exists and, with
  a #fragment, a heading of that file (GitHub's anchor rule); every citation of a BENCHMARKS.md section,
  by its title in quotes or by its #anchor, in those pages and in every tracked .py, .yaml, .sh, .cfg and
  .toml file, names a heading of BENCHMARKS.md;
- the README's commands and keys: `make` targets in the Makefile, `sweep` subcommands and their options
  in the CLI's parsers, dotted keys as fields of the recipe / sweep spec / tune spec, dotted Python names
  importable, file paths present, the architecture tree's files present, its YAML specs loadable;
- every field of the config dataclasses (RecipeConfig and its sections, every component's parameters,
  SweepSpec, TuneSpec, a tune parameter, every pruner's parameters) has a table row in its docs page,
  and every row names a field that exists.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import subprocess
import typing
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
PAGES = [README, REPO / "BENCHMARKS.md", *sorted((REPO / "docs").glob("*.md"))]

FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.MULTILINE | re.DOTALL)
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.MULTILINE)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
# A section cited by title (BENCHMARKS.md, then the title in double quotes; or BENCHMARKS alone) or by anchor.
CITED_TITLE = re.compile(r"BENCHMARKS(?:\.md)?,?\s+\"([^\"]+)\"")
CITED_ANCHOR = re.compile(r"BENCHMARKS\.md#([\w-]+)")
CODE_SUFFIXES = (".py", ".yaml", ".yml", ".sh", ".cfg", ".toml")
DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")
FILE_SUFFIXES = {"yaml", "yml", "py", "md", "csv", "pdf", "json", "jsonl", "png", "db", "txt", "sh", "toml", "cfg",
                 "log", "out", "err", "pkl"}
PACKAGES = {"recipe", "sweeps", "fitting", "reports", "components"}


def without_code(text: str) -> str:
    """Markdown text with its fenced code blocks removed (a link or heading inside one does not render)."""
    return FENCE.sub("", text)


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation removed, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown file, duplicates numbered as GitHub numbers them (-1, -2 ...)."""
    seen: dict[str, int] = {}
    found = set()
    for _, heading in HEADING.findall(without_code(path.read_text())):
        anchor = github_anchor(heading)
        found.add(f"{anchor}-{seen[anchor]}" if anchor in seen else anchor)
        seen[anchor] = seen.get(anchor, 0) + 1
    return found


def broken_links(path: Path) -> list[str]:
    """The relative links of one markdown file whose file or heading does not exist."""
    broken = []
    for target in LINK.findall(without_code(path.read_text())):
        if re.match(r"[a-z]+:", target):
            continue
        file_part, _, fragment = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no file {linked.relative_to(REPO) if REPO in linked.parents else linked}")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            broken.append(f"{target}: no heading #{fragment} in {linked.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_every_relative_link_and_anchor_resolves(page):
    assert broken_links(page) == []


def test_a_broken_link_or_anchor_is_caught(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# A `title`, here\n")
    page.write_text("[ok](there.md#a-title-here) [gone](missing.md) [bad](there.md#nope) [self](#nowhere)\n")
    assert broken_links(page) == ["missing.md: no file " + str(tmp_path / "missing.md"),
                                  "there.md#nope: no heading #nope in there.md",
                                  "#nowhere: no heading #nowhere in page.md"]


def benchmark_titles() -> list[str]:
    text = without_code((REPO / "BENCHMARKS.md").read_text())
    return [heading.replace("`", "").lower() for _, heading in HEADING.findall(text)]


def joined_lines(text: str) -> str:
    """Text with its line breaks, and the comment marks that continue a comment, turned into single spaces, so a
    title cited across two lines of a comment or a docstring reads as one."""
    return re.sub(r"[ \t]*\n[ \t]*(?:#[ \t]*)?", " ", text)


def missing_citations(texts: dict[str, str], titles: list[str], heading_anchors: set[str]) -> list[str]:
    """`name: "Title"` for each cited title that is part of no BENCHMARKS.md heading (case and backticks aside),
    `name: #anchor` for each cited anchor that is none of its headings' anchors, over {name: text}."""
    missing = []
    for name, text in texts.items():
        flat = joined_lines(text)
        missing += [f'{name}: "{title}"' for title in CITED_TITLE.findall(flat)
                    if not any(title.replace("`", "").lower() in heading for heading in titles)]
        missing += [f"{name}: #{anchor}" for anchor in CITED_ANCHOR.findall(flat) if anchor not in heading_anchors]
    return missing


def tracked_code_files() -> list[Path]:
    """The repository's tracked files that can cite BENCHMARKS.md in comments and docstrings."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [REPO / name for name in listed.split("\0") if name.endswith(CODE_SUFFIXES) and (REPO / name).is_file()]


def texts_of(paths: list[Path]) -> dict[str, str]:
    return {str(path.relative_to(REPO) if REPO in path.parents else path): path.read_text() for path in paths}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_every_benchmarks_section_named_exists(page):
    assert missing_citations(texts_of([page]), benchmark_titles(), anchors(REPO / "BENCHMARKS.md")) == []


def test_every_benchmarks_section_the_code_cites_exists():
    files = tracked_code_files()
    assert {REPO / "sweeps" / "loo.yaml", REPO / "recipe" / "prefix_attention.py"} <= set(files)
    assert missing_citations(texts_of(files), benchmark_titles(), anchors(REPO / "BENCHMARKS.md")) == []


def test_a_citation_of_a_missing_section_in_a_py_file_is_caught(tmp_path):
    cite = "BENCHMARKS"  # the citations below are built, so this file itself cites nothing
    planted = tmp_path / "planted.py"
    planted.write_text(f'"""A module."""\n\n# two steps (see {cite}.md, "A section that is\n# not there")\n'
                       f'LIMIT = 3  # {cite}.md#no-such-anchor; {cite} "Nowhere either"\n'
                       f'# as measured ({cite}.md, "`make demo`"), {cite}.md#make-demo\n')
    missing = missing_citations(texts_of([planted]), benchmark_titles(), anchors(REPO / "BENCHMARKS.md"))
    assert missing == [f'{planted}: "A section that is not there"', f'{planted}: "Nowhere either"',
                       f"{planted}: #no-such-anchor"]


# ---- what the README shows exists in the code -------------------------------------------------------------


def code_texts(text: str) -> list[str]:
    """The README's code: each fenced or indented block line and each inline code span."""
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    blocks = [line for block in fenced for line in block.splitlines()]
    indented = [line[4:] for line in text.splitlines() if line.startswith("    ") and line.strip()]
    return blocks + indented + CODE_SPAN.findall(FENCE.sub("", text))


def sweep_commands(texts: list[str]) -> list[tuple[str, list[str]]]:
    """(subcommand, its --options) for every `sweep SUBCOMMAND ...` shown, options up to a comment."""
    shown = []
    for text in texts:
        match = re.match(r"\s*(?:[\w./-]*/)?sweep ([a-z]+)([^#`]*)", text)
        if match:
            shown.append((match.group(1), re.findall(r"(?<![\w-])(--[a-z][\w-]*)", match.group(2))))
    return shown


def parser_options(command: str) -> set[str]:
    from sweeps.cli import COMMANDS, ArgumentParser

    module = importlib.import_module(COMMANDS[command][0])
    parser = ArgumentParser(prog=f"sweep {command}")
    module.add_arguments(parser)
    return {option for action in parser._actions for option in action.option_strings}


def test_every_sweep_command_and_option_the_readme_shows_exists():
    from sweeps.cli import COMMANDS

    shown = sweep_commands(code_texts(README.read_text()))
    assert {"plan", "run", "report"} <= {command for command, _ in shown}
    unknown = [command for command, _ in shown if command not in COMMANDS]
    assert unknown == []
    missing = [f"sweep {command} {option}" for command, options in shown for option in options
               if option not in parser_options(command)]
    assert missing == []


def test_a_made_up_subcommand_or_option_is_caught():
    assert sweep_commands(["sweep plan SPEC --powr", ".venv/bin/sweep frobnicate x  # --not-this"]) == [
        ("plan", ["--powr"]), ("frobnicate", [])]
    assert "--power" in parser_options("plan") and "--powr" not in parser_options("plan")


def test_every_make_target_the_readme_shows_exists():
    targets = set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), re.MULTILINE))
    shown = {target for text in code_texts(README.read_text()) for target in re.findall(r"\bmake ([\w-]+)", text)}
    assert {"demo", "test"} <= shown
    assert shown - targets == set()


def documented_prefixes() -> set[str]:
    """Every dotted key of the recipe, the sweep spec and the tune spec, sections included."""
    from recipe.config import RecipeConfig
    from sweeps.spec import SweepSpec
    from sweeps.tune_spec import TuneSpec

    return set(recipe_keys()) | set(field_keys(SweepSpec)) | set(field_keys(TuneSpec)) | set(tune_keys()) | {
        key for schema in (RecipeConfig, SweepSpec, TuneSpec) for key in field_keys(schema)}


def python_name_exists(dotted: str) -> bool:
    """recipe.engines.support.support_table: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[split:]:
            if not hasattr(value, attribute):
                return False
            value = getattr(value, attribute)
        return True
    return False


def dotted_tokens(texts: list[str]) -> list[str]:
    """Dotted names in code: `eval.draws: per_point` -> eval.draws; file names (loo.yaml) left out."""
    tokens = []
    for text in texts:
        for match in DOTTED.finditer(text):
            token = match.group(0)
            before = text[:match.start()]
            if before.endswith(("/", ".", "-", "$")) or token.rsplit(".", 1)[1] in FILE_SUFFIXES:
                continue
            tokens.append(token)
    return tokens


def unknown_dotted(tokens: list[str]) -> list[str]:
    keys = documented_prefixes()
    unknown = []
    for token in tokens:
        root = token.split(".")[0]
        if root in PACKAGES:
            if not python_name_exists(token):
                unknown.append(token)
        elif root in {key.split(".")[0] for key in keys} and token not in keys:
            unknown.append(token)
    return unknown


def test_every_dotted_key_and_python_name_the_readme_shows_exists():
    tokens = dotted_tokens(code_texts(readme_without_tree()))
    assert "budget.min_compute_ratio" in tokens and "executor.slurm" in tokens
    assert unknown_dotted(tokens) == []


def test_a_key_or_name_that_does_not_exist_is_caught():
    tokens = dotted_tokens(["eval.drawz: per_point", "sweeps/loo.yaml", "budget.min_a_shift", "fitting.nope",
                            "recipe.engines.support.support_table()"])
    assert unknown_dotted(tokens) == ["eval.drawz", "fitting.nope"]


TOP_LEVEL = {path.name for path in REPO.iterdir() if path.is_dir() and not path.name.startswith(".")} - {"runs"}


def shown_paths(texts: list[str]) -> list[str]:
    """Repository paths in code: recipe/run.py, docs/, scripts/x.sh; a path counts when it starts at one of the
    repository's folders (metric keys such as eval/pass_rate and generated runs/ paths do not)."""
    paths = []
    for text in texts:
        for token in re.findall(r"(?<![\w./~$-])((?:[\w-]+/)+[\w.-]*)", text):
            if token.split("/")[0] in TOP_LEVEL:
                paths.append(token)
    return paths


def readme_without_tree() -> str:
    """The README less its architecture tree, which test_the_architecture_tree_names_files_that_exist reads."""
    text = README.read_text()
    head, tree = text.split("## Architecture", 1)
    return head + tree.split("```", 2)[2]


def test_every_file_path_the_readme_shows_exists():
    paths = shown_paths(code_texts(readme_without_tree()))
    assert "sweeps/loo.yaml" in paths
    assert [path for path in paths if not (REPO / path).exists()] == []


def architecture_paths(text: str) -> list[str]:
    """The files and folders of the README's architecture tree, each a path built from its indentation."""
    block = text.split("## Architecture", 1)[1].split("```", 2)[1]
    stack: list[str] = []
    paths = []
    for line in block.splitlines()[1:]:
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip())) // 2
        names = [name.strip() for name in re.split(r"\s{2,}", line.strip())[0].split(",")]
        names = [name.split()[0] for name in names if name and name != "..."]
        stack = stack[:depth]
        paths += ["".join(stack) + name for name in names]
        if names[0].endswith("/"):
            stack.append(names[0])
    return paths


def test_the_architecture_tree_names_files_that_exist():
    paths = architecture_paths(README.read_text())
    assert "recipe/engines/native.py" in paths and "fitting/seeds.py" in paths
    assert [path for path in paths if not (REPO / path).exists()] == []


def readme_yaml_blocks() -> list[dict]:
    blocks = re.findall(r"^```yaml\n(.*?)^```", README.read_text(), re.MULTILINE | re.DOTALL)
    return [yaml.safe_load(block) for block in blocks]


def test_the_readme_specs_load_and_plan():
    from sweeps.planner import plan_sweep
    from sweeps.spec import spec_from_dict

    spec_block, scan_block = readme_yaml_blocks()
    spec = spec_from_dict(spec_block, "README")
    assert len(plan_sweep(spec)) == len(spec.seeds) * (1 + len(spec.axes))
    scan = spec_from_dict({**{k: v for k, v in spec_block.items() if k != "axes"}, **scan_block}, "README scan")
    assert len(plan_sweep(scan)) == len(spec.seeds) * len(scan_block["scan"][next(iter(scan_block["scan"]))])


# ---- every config key is documented -----------------------------------------------------------------------


def field_keys(schema: type, prefix: str = "") -> list[str]:
    """Dotted keys of a config dataclass: every field, and the fields of its nested dataclass sections."""
    hints = typing.get_type_hints(schema)
    keys = []
    for field in dataclasses.fields(schema):
        keys.append(prefix + field.name)
        if dataclasses.is_dataclass(hints[field.name]):
            keys += field_keys(hints[field.name], f"{prefix}{field.name}.")
    return keys


def component_keys(registry, axis: str) -> list[str]:
    return [f"{axis}.name"] + [f"{axis}.{parameter}" for name in registry.names()
                               for parameter in registry.parameters(name)]


def recipe_keys() -> list[str]:
    from components import REGISTRIES
    from recipe.config import RecipeConfig

    return field_keys(RecipeConfig) + [key for axis, registry in REGISTRIES.items()
                                       for key in component_keys(registry, axis)]


def tune_keys() -> list[str]:
    """The tune spec's own keys; budget, executor and tracking are the sweep spec's sections (docs/spec.md)."""
    from sweeps.spec import SweepSpec
    from sweeps.tune_spec import PRUNERS, ParamSpec, TuneSpec

    shared = {name for name in typing.get_type_hints(TuneSpec) if dataclasses.is_dataclass(typing.get_type_hints(
        TuneSpec)[name]) and typing.get_type_hints(TuneSpec)[name] is typing.get_type_hints(SweepSpec).get(name)}
    own = [key for key in field_keys(TuneSpec) if key.split(".")[0] not in shared or "." not in key]
    space = [f"space.KEY.{field.name}" for field in dataclasses.fields(ParamSpec) if field.name != "path"]
    return own + space + [key for key in component_keys(PRUNERS, "pruner") if key != "pruner.name"]


def table_keys(page: str) -> set[str]:
    """The keys a docs page documents: table rows whose first cell is one code span."""
    rows = re.findall(r"^\|\s*`([^`|]+)`\s*\|", (REPO / "docs" / page).read_text(), re.MULTILINE)
    return set(rows)


def spec_keys() -> list[str]:
    from sweeps.spec import SweepSpec

    return field_keys(SweepSpec)


PAGES_OF_KEYS = {"recipe.md": recipe_keys, "spec.md": spec_keys, "tune.md": tune_keys}


@pytest.mark.parametrize("page", sorted(PAGES_OF_KEYS))
def test_every_config_field_has_an_entry_in_its_docs_page(page):
    expected = set(PAGES_OF_KEYS[page]())
    documented = table_keys(page)
    assert sorted(expected - documented) == [], f"docs/{page} lacks rows for these keys"
    assert sorted(documented - expected) == [], f"docs/{page} documents keys the code does not have"


@dataclasses.dataclass(frozen=True)
class _Section:
    lr: float = 1.0


@dataclasses.dataclass(frozen=True)
class _Config:
    optimizer: _Section
    seed: int = 0


def test_a_field_without_an_entry_is_caught():
    assert field_keys(_Config) == ["optimizer", "optimizer.lr", "seed"]
    assert {"optimizer.lr", "seed"} - table_keys("recipe.md") == set()
    assert "optimizer.lr_typo" not in table_keys("recipe.md")


@pytest.mark.parametrize("page", sorted((REPO / "docs").glob("*.md")), ids=lambda page: page.name)
def test_every_file_path_a_docs_page_shows_exists(page):
    paths = shown_paths(code_texts(page.read_text()))
    assert [path for path in paths if not (REPO / path).exists()] == []
