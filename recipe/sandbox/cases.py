"""What a sandbox runs and what comes back: limits, tests, jobs, outcomes, and the trusted checks of each test.

Only a test's input goes into the sandbox (StdioTest.stdin, CallTest.expression); its expected output never
does, so nothing inside (the program, or a program that took over the runner) can read it, and a pass needs
output equal to it. Checking happens in the pool (recipe/sandbox/pool.py) on the bytes the sandbox sent back:

- StdioTest: the program's stdout against `stdout`, line by line with trailing whitespace and trailing blank
  lines ignored (the usual judge's rule); with `tolerance`, numeric tokens may differ by
  |a - b| <= tolerance * max(1, |b|).
- CallTest: the value of `expression` (evaluated in the program's namespace) comes back as a repr of plain
  data (exact builtin types: an object with a forged __eq__ is refused inside and fails), is parsed here with
  ast.literal_eval, and compared with `expected` (== by default; numbers within `tolerance` as above); with
  lists_equal_tuples, tuples compare as lists (JSON-sourced expectations, LiveCodeBench's rule).
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field

VERDICTS = ("pass", "wrong", "error", "time_limit", "output_limit", "file_limit", "crashed", "compile_error",
            "no_program", "sandbox_error", "not_run")


@dataclass(frozen=True)
class Limits:
    """What one program may use. Per test: cpu_seconds (RLIMIT_CPU: SIGXCPU, then SIGKILL a second later) and
    wall_seconds (the runner kills the test's processes); per process: memory_bytes (RLIMIT_AS), file_bytes
    (RLIMIT_FSIZE: every file, stdout included), open_files (RLIMIT_NOFILE), no core files; per sandbox:
    processes (RLIMIT_NPROC, counted per uid: it binds only under the uid layer, or for a user who is not root),
    output_bytes (what is read back of stdout), tmpfs_bytes (the private /tmp of the mount layer).
    The pool's backstop ends a sample at start_seconds + tests x (wall_seconds + 0.5)."""
    cpu_seconds: int = 2
    wall_seconds: float = 4.0
    memory_bytes: int = 512 << 20
    file_bytes: int = 16 << 20
    open_files: int = 64
    processes: int = 16
    output_bytes: int = 1 << 20
    tmpfs_bytes: int = 64 << 20
    start_seconds: float = 10.0

    def __post_init__(self):
        for name in ("cpu_seconds", "memory_bytes", "file_bytes", "open_files", "processes", "output_bytes",
                     "tmpfs_bytes"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"sandbox limits.{name}: got {getattr(self, name)!r}, expected a positive integer")
        for name in ("wall_seconds", "start_seconds"):
            if not getattr(self, name) > 0:
                raise ValueError(f"sandbox limits.{name}: got {getattr(self, name)!r}, expected seconds > 0")


@dataclass(frozen=True)
class StdioTest:
    stdin: str
    stdout: str
    tolerance: float | None = None

    def sandbox_input(self) -> tuple[str, str]:
        return ("stdio", self.stdin)

    def check(self, printed: bytes, returned: bytes) -> bool:
        try:
            text = printed.decode("utf-8")
        except UnicodeDecodeError:
            return False
        actual, expected = normalized_lines(text), normalized_lines(self.stdout)
        if actual == expected:
            return True
        if self.tolerance is None or len(actual) != len(expected):
            return False
        return all(tokens_close(a.split(), e.split(), self.tolerance) for a, e in zip(actual, expected))


COMPARES = ("eq", "truthy", "falsy", "is")


@dataclass(frozen=True)
class CallTest:
    """expression (e.g. "add(2, 3)") is evaluated after the program ran, in its namespace (after `setup`: a
    test file's imports); its value must satisfy `compare` against `expected`: eq (==, or within tolerance),
    truthy / falsy (`assert f(x)` / `assert not f(x)`), is (`assert f(x) is None`). Every comparison runs
    here on plain data, never inside on the program's objects (whose __eq__ or __bool__ it could forge)."""
    expression: str
    expected: object = True
    compare: str = "eq"
    tolerance: float | None = None
    lists_equal_tuples: bool = False
    setup: str = ""

    def __post_init__(self):
        if self.compare not in COMPARES:
            raise ValueError(f"CallTest compare: got {self.compare!r}, expected one of {', '.join(COMPARES)}")

    def sandbox_input(self) -> tuple[str, str, str]:
        return ("call", self.expression, self.setup)

    def check(self, printed: bytes, returned: bytes) -> bool:
        try:
            value = ast.literal_eval(returned.decode("utf-8"))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, UnicodeDecodeError):
            return False
        if self.compare in ("truthy", "falsy"):
            return bool(value) == (self.compare == "truthy")
        if self.compare == "is":
            return value is self.expected
        expected = self.expected
        if self.lists_equal_tuples:
            value, expected = tuples_as_lists(value), tuples_as_lists(expected)
        try:
            if self.tolerance is not None:
                return values_close(value, expected, self.tolerance)
            return bool(value == expected)
        except RecursionError:
            return False


def normalized_lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def number(token: str) -> float | None:
    try:
        value = float(token)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def tokens_close(actual: list[str], expected: list[str], tolerance: float) -> bool:
    if len(actual) != len(expected):
        return False
    for a, e in zip(actual, expected):
        if a == e:
            continue
        x, y = number(a), number(e)
        if x is None or y is None or abs(x - y) > tolerance * max(1.0, abs(y)):
            return False
    return True


def tuples_as_lists(value: object) -> object:
    if isinstance(value, (list, tuple)):
        return [tuples_as_lists(item) for item in value]
    if isinstance(value, dict):
        return {key: tuples_as_lists(item) for key, item in value.items()}
    return value


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def values_close(value: object, expected: object, tolerance: float) -> bool:
    """== with numbers within |a - b| <= tolerance * max(1, |b|) when either is a float, through lists, tuples and
    dicts."""
    if isinstance(expected, float) or isinstance(value, float):
        return (is_number(value) and is_number(expected) and math.isfinite(value)
                and abs(value - expected) <= tolerance * max(1.0, abs(expected)))
    if isinstance(expected, (list, tuple)):
        return (type(value) is type(expected) and len(value) == len(expected)
                and all(values_close(v, e, tolerance) for v, e in zip(value, expected)))
    if isinstance(expected, dict):
        return (isinstance(value, dict) and value.keys() == expected.keys()
                and all(values_close(value[key], expected[key], tolerance) for key in expected))
    return value == expected


@dataclass(frozen=True)
class Job:
    """One program and its tests. stop_at_first_failure: the remaining tests are not run (a pass/fail reward)."""
    program: str
    tests: tuple  # of StdioTest / CallTest
    stop_at_first_failure: bool = True
    limits: Limits | None = None  # None: the sandbox's own


@dataclass(frozen=True)
class Outcome:
    """verdicts: one per test, from VERDICTS; seconds: the sample's wall clock in the pool."""
    verdicts: tuple[str, ...]
    seconds: float = 0.0
    detail: str = field(default="", compare=False)  # what went wrong in the sandbox itself (never program output)

    @property
    def passed(self) -> int:
        return self.verdicts.count("pass")

    @property
    def total(self) -> int:
        return len(self.verdicts)

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0
