"""A code row's tests: read from the forms public code data uses, and kept as text in Problem.answer.

    tests = read_row_tests(row)        # DeepCoder, TACO/APPS, LiveCodeBench and MBPP-style rows
    answer = encode_tests(tests)       # Problem.answer of a code task; decode_tests(answer) == tests

Tests come in two forms (recipe.sandbox runs both):

- stdin/stdout pairs (StdioTest): the program reads the input and must print the output;
- calls (CallTest): a function call (`fn_name` and arguments) or an assert statement, parsed here with `ast`
  into the call and its expected value. Only asserts whose comparison can be made outside the sandbox on
  plain data are accepted (== a literal, `is` True/False/None, truthiness, math.isclose and
  abs(x - y) < tol with a literal): anything else (`assert f(x) > 3` would run `>` on the program's object,
  which can forge it) is refused with a CodeTestsError naming the line.

Nothing here runs the row: JSON is parsed and asserts are read as syntax trees.
"""

from __future__ import annotations

import ast
import json
from typing import Sequence

from recipe.sandbox import CallTest, StdioTest


class CodeTestsError(ValueError):
    """A row's tests in no form this reward reads; names the field or line, never the content."""


def literal(node: ast.AST):
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def is_abs_difference(node: ast.expr) -> bool:
    """abs(x - y)"""
    return (isinstance(node, ast.Call) and ast.unparse(node.func) == "abs" and len(node.args) == 1
            and isinstance(node.args[0], ast.BinOp) and isinstance(node.args[0].op, ast.Sub))


def assert_test(test: ast.expr, setup: str, line: int) -> CallTest:
    """One assert's condition as a CallTest whose comparison runs outside the sandbox."""
    where = f"assert tests line {line}"
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return CallTest(ast.unparse(test.operand), compare="falsy", setup=setup)
    if isinstance(test, ast.Call) and ast.unparse(test.func) in ("math.isclose", "isclose") and len(test.args) == 2:
        known, expected = literal(test.args[1])
        tolerances = [literal(keyword.value) for keyword in test.keywords if keyword.arg in ("rel_tol", "abs_tol")]
        if not known or not all(ok for ok, _ in tolerances):
            raise CodeTestsError(f"{where}: isclose needs a literal expected value and tolerances")
        tolerance = max([value for _, value in tolerances] or [1e-9])
        return CallTest(ast.unparse(test.args[0]), float(expected), tolerance=float(tolerance), setup=setup)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, op, right = test.left, test.ops[0], test.comparators[0]
        if isinstance(op, (ast.Lt, ast.LtE)) and is_abs_difference(left):
            known, expected = literal(left.args[0].right)
            bounded, tolerance = literal(right)
            if known and bounded:
                return CallTest(ast.unparse(left.args[0].left), float(expected), tolerance=float(tolerance),
                                setup=setup)
        if isinstance(op, (ast.Eq, ast.Is)):
            known, expected = literal(right)
            expression = left
            if not known:
                known, expected = literal(left)
                expression = right
            if known and isinstance(op, ast.Eq):
                return CallTest(ast.unparse(expression), expected, setup=setup)
            if known and expected in (True, False, None) and type(expected) in (bool, type(None)):
                return CallTest(ast.unparse(expression), expected, compare="is", setup=setup)
        raise CodeTestsError(f"{where}: compare the call with a literal (==, is True/False/None, math.isclose, "
                              "abs(x - y) < tol); other comparisons would run on the program's own objects")
    return CallTest(ast.unparse(test), compare="truthy", setup=setup)


def parse_asserts(source: str, entry_point: str | None = None) -> tuple[CallTest, ...]:
    """CallTests of a test file of assert statements (and imports), or of a HumanEval-style `def check(candidate)`
    (candidate bound to entry_point)."""
    try:
        module = ast.parse(source)
    except SyntaxError as error:
        raise CodeTestsError(f"assert tests line {error.lineno}: not Python") from None
    body = module.body
    checks = [node for node in body if isinstance(node, ast.FunctionDef) and node.name == "check"]
    imports = [ast.unparse(node) for node in body if isinstance(node, (ast.Import, ast.ImportFrom))]
    if checks:
        body = checks[0].body
        imports += [f"candidate = {entry_point}"] if entry_point else []
    setup = "\n".join(imports)
    tests = []
    for node in body:
        if isinstance(node, ast.Assert):
            tests.append(assert_test(node.test, setup, node.lineno))
        elif isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.Expr, ast.Assign)) and not (
                isinstance(node, ast.Expr) and not isinstance(node.value, ast.Constant)):
            continue  # imports, docstrings, METADATA = {...}: nothing to run
        else:
            raise CodeTestsError(f"assert tests line {node.lineno}: only assert statements and imports are read")
    if not tests:
        raise CodeTestsError("assert tests: no assert statement found")
    return tuple(tests)


def call_expression(function: str, arguments: list, method: bool) -> str:
    call = f"{function}(*{tuple(arguments)!r})"
    return f"Solution().{call}" if method else call


def parsed(value, field: str):
    """A field that may hold JSON text (DeepCoder and TACO store tests as strings)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            raise CodeTestsError(f"{field}: not JSON") from None
    return value


def functional_arguments(raw) -> list:
    """LiveCodeBench: one JSON value per line; TACO/DeepCoder: already a list of arguments."""
    if isinstance(raw, list):
        return raw
    try:
        return [json.loads(line) for line in str(raw).splitlines() if line.strip()]
    except (json.JSONDecodeError, RecursionError):
        raise CodeTestsError("tests: a functional test's input is not one JSON value per line") from None


def read_row_tests(row: dict) -> tuple:
    """The tests of a dataset row, in any of the forms the module docstring lists."""
    for key in ("test_list", "test", "asserts"):
        if key in row:
            value = row[key]
            source = "\n".join(value) if isinstance(value, (list, tuple)) else str(value)
            return parse_asserts(source, row.get("entry_point"))
    if "input_output" in row:  # TACO / APPS
        pairs = parsed(row["input_output"], "input_output")
        if not (isinstance(pairs, dict) and isinstance(pairs.get("inputs"), list)
                and isinstance(pairs.get("outputs"), list) and len(pairs["inputs"]) == len(pairs["outputs"])):
            raise CodeTestsError("input_output: expected {\"inputs\": [...], \"outputs\": [...]} of equal length")
        function = pairs.get("fn_name") or row.get("fn_name")
        if function:  # APPS wraps each call's return value in a one-element list
            return tuple(CallTest(call_expression(function, list(args), False),
                                  out[0] if isinstance(out, list) and len(out) == 1 else out, lists_equal_tuples=True)
                         for args, out in zip(pairs["inputs"], pairs["outputs"]))
        return tuple(StdioTest(str(i), str(o)) for i, o in zip(pairs["inputs"], pairs["outputs"]))
    if "tests" in row:  # DeepCoder / LiveCodeBench: a list of {input, output, testtype}; or assert source
        if isinstance(row["tests"], str) and not row["tests"].lstrip().startswith(("[", "{")):
            return parse_asserts(row["tests"], row.get("entry_point"))
        tests = parsed(row["tests"], "tests")
        if not isinstance(tests, list) or not all(isinstance(test, dict) and "input" in test and "output" in test
                                                  for test in tests):
            raise CodeTestsError("tests: expected a list of {\"input\": ..., \"output\": ...} objects")
        return tuple(read_row_test(test, row) for test in tests)
    raise CodeTestsError("row: no tests; expected one of the fields tests, input_output, test_list, test")


def read_row_test(test: dict, row: dict):
    kind = str(test.get("testtype", test.get("type", "stdin"))).lower()
    if kind in ("stdin", "stdin_stdout", "stdio"):
        return StdioTest(str(test["input"]), str(test["output"]))
    if kind not in ("functional", "function_call"):
        raise CodeTestsError(f"tests: a test's testtype must be stdin or functional, not {kind[:20]!r}")
    metadata = parsed(test.get("metadata", row.get("metadata", {})) or {}, "metadata")
    function = test.get("fn_name") or (metadata or {}).get("func_name") or row.get("fn_name")
    if not function:
        raise CodeTestsError("tests: a functional test needs fn_name (or metadata.func_name)")
    expected = test["output"]
    if isinstance(expected, str):
        expected = parsed(expected, "tests output")
    method = "class Solution" in str(row.get("starter_code", ""))
    return CallTest(call_expression(function, functional_arguments(test["input"]), method), expected,
                    lists_equal_tuples=True)


def encode_tests(tests: Sequence) -> str:
    """Tests as text for Problem.answer (a Python literal: tuples and sets survive; read back by literal_eval)."""
    return repr([("stdio", t.stdin, t.stdout, t.tolerance) if isinstance(t, StdioTest) else
                 ("call", t.expression, t.expected, t.compare, t.tolerance, t.lists_equal_tuples, t.setup)
                 for t in tests])


def decode_tests(text: str) -> tuple:
    try:
        items = ast.literal_eval(text)
        return tuple(StdioTest(*item[1:]) if item[0] == "stdio" else CallTest(*item[1:]) for item in items)
    except (ValueError, TypeError, SyntaxError, IndexError, MemoryError, RecursionError):
        raise CodeTestsError("answer: not tests written by encode_tests") from None
