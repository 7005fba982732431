"""Tasks with verifiable rewards: the embedded carry-addition task, a JSONL loader for real math data, and the
real model's word problems.

A task is two prompt lists (train pool, held-out validation) with reference answers and a checker:
`task.check(response_text, answer) -> bool`. Rewards are +1 / -1 from that checker.

The embedded task ("column addition with a carry trace"):
    prompt    "0385+0047=<think>"
    response  "121304</think>432"   then <eos>
Operands have 1..max_digits significant digits and are zero-padded to max_digits, so a digit's
column sits at a fixed offset (a ~1M-parameter model then learns the alignment in minutes). The
thinking trace lists the column sums s_i = a_i + b_i + c_i least-significant column first, two
digits each (carry c_{i+1} = s_i // 10), over the significant columns only, so its length grows
with the problem: 2 tokens a column. The answer is read off the trace: the last column's tens digit
(if 1), then every units digit, most significant first. The checker compares the answer exactly.
The noisy teacher's wrong method forgets the carry (s_i = a_i + b_i) and reads the answer off its
trace by the same rule; every problem has at least one carry into a column, so the two methods
always disagree and the warm-started model must find the right one by RL (see warm_start.py).
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass

from recipe.run_config import CODE_TASKS, FILE_TASKS, TASK_NAMES

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


@dataclass(frozen=True)
class Problem:
    prompt: str  # the text the model continues (chat template already applied where there is one)
    answer: str  # reference answer for the checker
    # The reference solution's thinking (the text before `</think>`), where the task has one (the embedded
    # task's column trace): the response the evaluation's reference control variate takes the exact
    # probability of (recipe.evaluation.reference_paths). None: no reference.
    reference_thinking: str | None = None
    # The reference response's answer section where it is not `answer` itself (a code task's answer holds its
    # tests; its reference answers with the program: recipe/embedded_code.py). None: the answer.
    reference_answer: str | None = None
    part: str | None = None  # the mixture part it belongs to (recipe/mixture.py); None outside a mixture


@dataclass
class Task:
    name: str
    train: list[Problem]
    validation: list[Problem]

    def check(self, response_text: str, answer: str) -> bool:
        raise NotImplementedError

    def check_part(self, response_text: str, answer: str, part: str | None) -> bool:
        """The checker of the problem's part: a single task has one (a mixture's: recipe.mixture.MixtureTask)."""
        return self.check(response_text, answer)

    def check_all(self, responses: list[str], answers: list[str], parts: list[str | None]) -> list[bool]:
        """Each row's check_part, in one call: a checker that runs programs (recipe.code_reward.CodeTask) runs the
        batch's in parallel, so a step's rewards are checked here, never row by row."""
        return [self.check_part(text, answer, part) for text, answer, part in zip(responses, answers, parts,
                                                                                  strict=True)]

    def rewards(self, responses: list[str], answers: list[str]) -> list[float]:
        return [1.0 if self.check(text, answer) else -1.0 for text, answer in zip(responses, answers)]


def final_answer(response_text: str) -> str | None:
    """Text after the last `</think>`, or None when the model never closed its thinking."""
    if THINK_CLOSE not in response_text:
        return None
    return response_text.rsplit(THINK_CLOSE, 1)[1].strip()


# ---------------------------------------------------------------------------------------------------
# The embedded task


def column_sums(a: int, b: int, carry: bool) -> list[int]:
    """Column sums least-significant first; with carry=False each column forgets the carry-in."""
    da, db = str(a)[::-1], str(b)[::-1]
    sums, carry_in = [], 0
    for i in range(max(len(da), len(db))):
        s = (int(da[i]) if i < len(da) else 0) + (int(db[i]) if i < len(db) else 0) + carry_in
        sums.append(s)
        carry_in = s // 10 if carry else 0
    return sums


def read_answer(sums: list[int]) -> str:
    """Answer from the trace: the last column's tens digit (when 1), then units digits, MSB first."""
    digits = "".join(str(s % 10) for s in reversed(sums))
    return ("1" + digits) if sums[-1] >= 10 else digits


def solution(a: int, b: int, carry: bool = True, terse: bool = False) -> tuple[str, str]:
    """(thinking trace, answer) of a + b by the column method, with or without carrying.

    The trace lists each column sum as two digits (its tens digit is the carry out), or, terse, as its units
    digit alone (the carry left implicit): 0385+0047 gives "121304" or "234", both with the answer 432."""
    sums = column_sums(a, b, carry)
    trace = "".join(str(s % 10) for s in sums) if terse else "".join(f"{s:02d}" for s in sums)
    return trace, read_answer(sums)


def addition_prompt(a: int, b: int, width: int) -> str:
    return f"{a:0{width}d}+{b:0{width}d}={THINK_OPEN}"


def has_carry_in(a: int, b: int) -> bool:
    """True when some column receives a carry, i.e. forgetting carries gives a wrong answer."""
    return solution(a, b, carry=True)[1] != solution(a, b, carry=False)[1]


def sample_operands(rng: random.Random, min_digits: int, max_digits: int) -> tuple[int, int]:
    """Two operands with independently uniform digit counts, redrawn until some column carries."""
    while True:
        a, b = (rng.randint(10 ** (n - 1) if n > 1 else 0, 10**n - 1)
                for n in (rng.randint(min_digits, max_digits), rng.randint(min_digits, max_digits)))
        if has_carry_in(a, b):
            return a, b


@functools.lru_cache(maxsize=None)
def count_addition_problems(min_digits: int, max_digits: int) -> int:
    """How many distinct (a, b) the embedded task can draw: operand pairs of min..max_digits digits where some
    column receives a carry (has_carry_in).

    Per pair of digit counts (na, nb), all pairs minus those without one: no column but the last
    may carry out, so every earlier column's digits sum to <= 9, and those pairs count as a product
    over columns of the digit pairs (x, y) with x + y <= 9 there, and all pairs in the last column
    (the leading digit 1..9, 0 alone for a one-digit operand). Exact, no enumeration, so a plan can
    check a pool size before any job draws it.
    """
    def digits(length: int, column: int) -> range:
        if column >= length:
            return range(0, 1)
        return range(1 if column == length - 1 and length > 1 else 0, 10)

    total = 0
    for na in range(min_digits, max_digits + 1):
        for nb in range(min_digits, max_digits + 1):
            pairs, carry_free = 1, 1
            last = max(na, nb) - 1
            for column in range(last + 1):
                xs, ys = digits(na, column), digits(nb, column)
                pairs *= len(xs) * len(ys)
                carry_free *= len(xs) * len(ys) if column == last else sum(1 for x in xs for y in ys if x + y <= 9)
            total += pairs - carry_free
    return total


@dataclass
class AdditionTask(Task):
    def check(self, response_text: str, answer: str) -> bool:
        return final_answer(response_text) == answer


def build_addition_task(train_size: int, validation_size: int, min_digits: int, max_digits: int,
                        data_seed: int, width: int | None = None) -> AdditionTask:
    """Distinct problems, validation disjoint from train; the same data_seed gives the same split.

    Validation problems are drawn first, so the validation set does not change with the pool size. Operands
    are zero-padded to `width` digits (None: max_digits; a mixture's part pads to the model's task width).
    """
    rng = random.Random(data_seed)
    seen: set[tuple[int, int]] = set()
    problems: list[Problem] = []
    while len(problems) < train_size + validation_size:
        a, b = sample_operands(rng, min_digits, max_digits)
        if (a, b) in seen:
            continue
        seen.add((a, b))
        trace, answer = solution(a, b)
        problems.append(Problem(addition_prompt(a, b, width or max_digits), answer, reference_thinking=trace))
    return AdditionTask("embedded", train=problems[validation_size:], validation=problems[:validation_size])


# ---------------------------------------------------------------------------------------------------
# Real math data: prompt/answer rows of a task file (recipe.task_files), checked by math-verify


@dataclass
class MathTask(Task):
    def check(self, response_text: str, answer: str) -> bool:
        from math_verify import parse, verify

        text = final_answer(response_text)
        text = response_text if text is None else text
        gold = parse(answer if "$" in answer or "\\boxed" in answer else f"${answer}$")
        try:
            return bool(verify(gold, parse(text)))
        except Exception:  # math-verify raises on unparsable model output: that answer is wrong
            return False


def build_math_task(cfg, tokenizer, source: str = "", key: str = "task") -> MathTask:
    """cfg: run_config.TaskConfig of a file task. Train pool from task.train_path; validation from
    task.validation_path or a held-out slice of the train rows (recipe.task_files reads any of its formats).
    source: keep only the rows whose task.part_key field equals it (a mixture's part; `key` names it)."""
    from recipe.task_files import read_task_file

    train, validation = file_problems(cfg, tokenizer, read_task_file, source, key)
    return MathTask(cfg.name, train=train, validation=validation)


def file_problems(cfg, tokenizer, read_rows, source: str = "", key: str = "task") -> tuple[list, list]:
    """(train, validation) Problems of a file task, its rows read by read_rows(path, keys) (recipe.task_files)."""
    from recipe.task_files import TaskKeys, render_prompt

    keys = TaskKeys(prompt=cfg.prompt_key, answer=cfg.answer_key, part=cfg.part_key)

    def rows_of(path: str) -> list:
        rows = read_rows(path, keys)
        rows = [row for row in rows if row.part == source] if source else rows
        if source and not rows:
            raise ValueError(f"{key}.source: no row of {path} has {cfg.part_key} {source!r}; give a value the "
                             f"file's {cfg.part_key} field holds")
        return rows

    train_rows = rows_of(cfg.train_path)
    if cfg.validation_path:
        validation_rows = rows_of(cfg.validation_path)
    else:
        random.Random(cfg.data_seed).shuffle(train_rows)
        validation_rows, train_rows = train_rows[:cfg.validation_size], train_rows[cfg.validation_size:]

    def convert(rows) -> list[Problem]:
        return [Problem(render_prompt(r.prompt, tokenizer, cfg.system_prompt), r.answer) for r in rows]

    return convert(train_rows), convert(validation_rows)


# ---------------------------------------------------------------------------------------------------
# The real model's task (task.name: word_problems): arithmetic and short word problems in natural language.
#
#     system    Solve the problem and give the final answer as a number.
#     user      Maya has 3 stickers and gets 4 more. How many stickers does Maya have now?
#     assistant (the prompt ends here)
#     response  Maya has 3 + 4 = 7 stickers now.<|im_end|>
#
# The prompt is the model's own chat template. The whole response is its thinking until a `</think>`: the
# recipe's interruption cuts a response at its thinking budget, forcing the paper's phrase and `</think>` as
# plain text tokens, and the answer section follows. The checker reads the answer section (after the last
# `</think>`) when there is one, else the whole response, and compares its last number with the answer.
# Why not a `<think>` opened in the prompt, as on the embedded task: SmolLM2-135M-Instruct does not follow
# that convention, so RL had almost no correct sample to learn from. In its own chat format it starts at a
# pass rate of ~0.1, and a rambling answer's later numbers make it wrong, so the reward and the length
# controls act on what the model can improve (BENCHMARKS.md, "SmolLM2-135M-Instruct").
#
# Difficulty is the operands' size: each operand of a problem has task.min_digits..max_digits digits
# (multiplication: the second factor 2..12). Problems are drawn from a seeded generator: half bare
# arithmetic ("What is 38 + 47?"), half one-step word problems, addition, subtraction (never negative) and
# multiplication in equal shares; distinct, validation drawn first and disjoint from train, so the same
# data_seed gives the same split whatever train_size.

SYSTEM_PROMPT = "Solve the problem and give the final answer as a number."
NAMES = ("Maya", "Tom", "Lena", "Omar", "Ivy", "Ravi", "Sofia", "Ben", "Aiko", "Noah")
ITEMS = ("apples", "stickers", "marbles", "books", "coins", "pencils", "cards", "shells")


def operand(rng: random.Random, min_digits: int, max_digits: int) -> int:
    digits = rng.randint(min_digits, max_digits)
    return rng.randint(10 ** (digits - 1) if digits > 1 else 1, 10**digits - 1)


def word_problem(rng: random.Random, min_digits: int, max_digits: int) -> tuple[str, int]:
    """(question, answer) of one problem."""
    operation = rng.choice("+-*")
    a, b = operand(rng, min_digits, max_digits), operand(rng, min_digits, max_digits)
    if operation == "-" and b > a:
        a, b = b, a
    if operation == "*":
        b = rng.randint(2, 12)
    answer = {"+": a + b, "-": a - b, "*": a * b}[operation]
    if rng.random() < 0.5:
        symbol = {"+": "+", "-": "-", "*": "times"}[operation]
        return f"What is {a} {symbol} {b}?", answer
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    question = {
        "+": f"{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?",
        "-": f"{name} had {a} {item} and gave away {b}. How many {item} does {name} have left?",
        "*": f"{name} buys {a} boxes with {b} {item} in each box. How many {item} is that in total?",
    }[operation]
    return question, answer


def chat_prompt(question: str, tokenizer) -> str:
    """The chat template's system and user turns, then the opened assistant turn."""
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


class WordProblemTask(MathTask):
    def check(self, response_text: str, answer: str) -> bool:
        """The last number of the answer section (after the last `</think>`), else of the whole response."""
        section = final_answer(response_text)
        numbers = re.findall(r"-?\d+", (response_text if section is None else section).replace(",", ""))
        return bool(numbers) and int(numbers[-1]) == int(answer)


def build_word_problem_task(train_size: int, validation_size: int, min_digits: int, max_digits: int,
                            data_seed: int, tokenizer) -> WordProblemTask:
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("task.name: word_problems asks through the model's chat template, and this model's "
                         "tokenizer has none; use a chat model (e.g. model.path smollm2-135m-instruct)")
    rng = random.Random(data_seed)
    seen: set[str] = set()
    problems: list[Problem] = []
    attempts = 0
    while len(problems) < train_size + validation_size:
        attempts += 1
        if attempts > 20 * (train_size + validation_size) + 1000:
            raise ValueError(f"task.train_size: {train_size} + validation {validation_size} distinct problems of "
                             f"{min_digits}..{max_digits} digits could not be drawn; lower the sizes or widen the "
                             "digits")
        question, answer = word_problem(rng, min_digits, max_digits)
        if question in seen:
            continue
        seen.add(question)
        problems.append(Problem(chat_prompt(question, tokenizer), str(answer)))
    return WordProblemTask("word_problems", train=problems[validation_size:], validation=problems[:validation_size])


def build_task(cfg, tokenizer) -> Task:
    """cfg: run_config.TaskConfig; the code tasks, whose rewards need a sandbox, are recipe.mixture.build_any_task's."""
    if cfg.name == "embedded":
        return build_addition_task(cfg.train_size, cfg.validation_size, cfg.min_digits, cfg.max_digits,
                                   cfg.data_seed)
    if cfg.name in CODE_TASKS:
        raise ValueError(f"task.name {cfg.name!r}: a code task runs programs in a sandbox; build it with "
                         "recipe.mixture.build_any_task")
    if cfg.name in FILE_TASKS:
        if not cfg.train_path:
            raise ValueError(f"task.train_path: required when task.name is {cfg.name!r} (a task file of prompt/answer "
                             "rows)")
        return build_math_task(cfg, tokenizer)
    if cfg.name == "word_problems":
        return build_word_problem_task(cfg.train_size, cfg.validation_size, cfg.min_digits, cfg.max_digits,
                                       cfg.data_seed, tokenizer)
    raise ValueError(f"task.name: got {cfg.name!r}, expected one of {', '.join(TASK_NAMES)}")
