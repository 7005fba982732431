"""Task rows from the files researchers have: JSONL, Parquet, or a `datasets` directory (save_to_disk).

    rows = read_task_file("polaris.parquet", TaskKeys(prompt="problem"))
    rows[0].prompt       # text, or chat messages [{"role": ..., "content": ...}, ...]
    rows[0].answer       # the reference answer as text
    rows[0].part         # the row's part / source (keys.part), else None

Field names are mapped by keys; a key may be a dotted path into nested fields (verl's
`reward_model.ground_truth`). With the default answer key the first of ANSWER_KEYS a row holds is
its answer, so verl's Parquet (chat `prompt`, `reward_model.ground_truth`, `data_source`) and TRL's
conversational `datasets` (chat `prompt`, `solution`) read as they are. Nothing here runs code from
the data: JSON is parsed, Parquet and Arrow files are read as tables, and a `datasets` directory is
opened with load_from_disk, which reads Arrow files and no loading script. A bad row is named by file,
row number and key, and described by its kind, never quoted (a data file may hold anything).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from recipe.code_tests import CodeTestsError, encode_tests, read_row_tests

ANSWER_KEYS = ("answer", "reward_model.ground_truth", "solution")  # the default answer key's search order
DATASET_MARKERS = ("dataset_info.json", "state.json", "dataset_dict.json")  # what save_to_disk writes
CHAT_ROLES = ("system", "user", "assistant")


class TaskFileError(ValueError):
    """A task file that cannot be read as prompt/answer rows; names the file, row and key, never their content."""


@dataclass(frozen=True)
class TaskKeys:
    """Which fields hold a row's prompt, answer and part. answer "" searches ANSWER_KEYS; part "": no parts."""

    prompt: str = "prompt"
    answer: str = ""
    part: str = ""


@dataclass(frozen=True)
class TaskRow:
    prompt: str | tuple[dict, ...]  # text, or chat messages (role, content)
    answer: str
    part: str | None


def file_format(path: Path) -> str:
    """"jsonl", "parquet" or "datasets" from the path; TaskFileError names what would be read."""
    if path.is_dir():
        if any((path / marker).is_file() for marker in DATASET_MARKERS):
            return "datasets"
        raise TaskFileError(f"{path}: a directory without {' or '.join(DATASET_MARKERS)}; give a directory written "
                            "by datasets' save_to_disk, a .parquet file or a .jsonl file")
    if path.suffix.lower() == ".parquet":
        return "parquet"
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    raise TaskFileError(f"{path}: unknown task file type {path.suffix or '(no suffix)'!r}; give a .jsonl or "
                        ".parquet file, or a datasets directory (save_to_disk)")


def raw_records(path: Path, split: str = "train") -> list[tuple[str, dict]]:
    """(where, record) for the file's records in file order; where is "line N" in JSONL, else "row N"."""
    kind = file_format(path)
    if kind == "jsonl":
        return jsonl_records(path)
    if kind == "parquet":
        import pyarrow.parquet as pq

        try:
            records = pq.read_table(path).to_pylist()
        except Exception as error:  # pyarrow raises many kinds on a corrupt or foreign file
            raise TaskFileError(f"{path}: not a readable Parquet file ({type(error).__name__})") from None
    else:
        records = dataset_records(path, split)
    return [(f"row {number}", record) for number, record in enumerate(records, start=1)]


def jsonl_records(path: Path) -> list[tuple[str, dict]]:
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise TaskFileError(f"{path}: not a UTF-8 text file; expected JSONL, one JSON object a line") from None
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            raise TaskFileError(f"{path} line {number}: not JSON; expected one JSON object per line, "
                                'e.g. {"prompt": "1+1=?", "answer": "2"}') from None
        if not isinstance(record, dict):
            raise TaskFileError(f"{path} line {number}: {json_kind(record)}, expected a JSON object")
        records.append((f"line {number}", record))
    return records


def dataset_records(path: Path, split: str) -> list[dict]:
    """A save_to_disk directory: a Dataset, or a DatasetDict whose `split` is read."""
    import datasets

    try:
        data = datasets.load_from_disk(str(path))
    except Exception as error:  # a damaged directory raises from deep inside datasets / pyarrow
        raise TaskFileError(f"{path}: not a readable datasets directory ({type(error).__name__})") from None
    if isinstance(data, datasets.DatasetDict):
        if split not in data:
            raise TaskFileError(f"{path}: a DatasetDict without a {split!r} split; it has {', '.join(data)}")
        data = data[split]
    return data.to_list()


def field(record: dict, key: str):
    """record[key], following dots into nested objects; KeyError when any step is missing."""
    value = record
    for name in key.split("."):
        if not isinstance(value, dict) or name not in value:
            raise KeyError(key)
        value = value[name]
    return value


def json_kind(value) -> str:
    """What a value is, never what it says: "an object", "an array", "null", "empty text", ..."""
    if isinstance(value, str):
        return "empty text" if not value.strip() else "text"
    kinds = {dict: "an object", list: "an array", tuple: "an array", type(None): "null", bool: "a boolean",
             int: "a number", float: "a number"}
    return kinds.get(type(value), "a value of another kind")


def prompt_of(value, where: str, key: str) -> str | tuple[dict, ...]:
    """Text, or chat messages: a non-empty list of {role, content} with known roles and text contents."""
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, (list, tuple)) and value:
        for index, message in enumerate(value):
            if not (isinstance(message, dict) and message.get("role") in CHAT_ROLES
                    and isinstance(message.get("content"), str)):
                raise TaskFileError(f"{where}: {key!r} message {index} is not a {{role, content}} pair with role "
                                    f"{', '.join(CHAT_ROLES)} and text content")
        return tuple({"role": m["role"], "content": m["content"]} for m in value)
    raise TaskFileError(f"{where}: {key!r} is {json_kind(value)}; expected the problem as non-empty text or as "
                        "chat messages [{role, content}, ...]")


def answer_of(record: dict, keys: TaskKeys, where: str) -> str:
    candidates = (keys.answer,) if keys.answer else ANSWER_KEYS
    for key in candidates:
        try:
            value = field(record, key)
        except KeyError:
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int, float)) or value == "":
            raise TaskFileError(f"{where}: {key!r} is {json_kind(value)}; expected the reference answer as text "
                                "or a number")
        return str(value)
    raise TaskFileError(f"{where}: no {' or '.join(repr(k) for k in candidates)} field; set task.answer_key to the "
                        "field holding the reference answer (a dotted path reads nested fields)")


def read_task_file(path: str | Path, keys: TaskKeys = TaskKeys(), split: str = "train") -> list[TaskRow]:
    """Every record of the file as a TaskRow; TaskFileError at the first bad one (file, row, key)."""
    return read_rows(path, keys, split, answer_of)


def read_code_file(path: str | Path, keys: TaskKeys = TaskKeys(), split: str = "train") -> list[TaskRow]:
    """Every record of a code task file as a TaskRow whose answer is its tests (recipe.code_tests.encode_tests of
    read_row_tests: DeepCoder's, TACO's, LiveCodeBench's and MBPP's forms); TaskFileError at the first bad one,
    naming the file, row and field, never the content. The tests are parsed here, never run."""
    return read_rows(path, keys, split, tests_of)


def tests_of(record: dict, keys: TaskKeys, where: str) -> str:
    """A code row's tests as Problem.answer text (recipe.code_tests.encode_tests)."""
    try:
        tests = read_row_tests(record)
    except CodeTestsError as error:
        raise TaskFileError(f"{where}: {error}") from None
    if not tests:
        raise TaskFileError(f"{where}: no tests; a program is scored by running its row's tests")
    return encode_tests(tests)


def read_rows(path: str | Path, keys: TaskKeys, split: str, answer) -> list[TaskRow]:
    """Every record as a TaskRow: its prompt and part under `keys`, its answer answer(record, keys, where)."""
    path = Path(path)
    rows = []
    for place, record in raw_records(path, split):
        where = f"{path} {place}"
        try:
            prompt = field(record, keys.prompt)
        except KeyError:
            raise TaskFileError(f"{where}: no {keys.prompt!r} field; set task.prompt_key to the field holding the "
                                "problem (Polaris, DeepScaleR and DeepCoder: problem)") from None
        part = None
        if keys.part:
            try:
                part = str(field(record, keys.part))
            except KeyError:
                raise TaskFileError(f"{where}: no {keys.part!r} field (task.part_key)") from None
        rows.append(TaskRow(prompt_of(prompt, where, keys.prompt), answer(record, keys, where), part))
    return rows


def read_rows_of(task_name: str):
    """The reader of a file task's rows: read_code_file for task.name code_file, else read_task_file."""
    return read_code_file if task_name == "code_file" else read_task_file


def render_prompt(prompt: str | tuple[dict, ...], tokenizer, system_prompt: str = "") -> str:
    """The prompt as the model reads it: its chat template's turns + generation prompt (a system turn first when
    system_prompt is given and the messages have none); without a template, the messages' contents in order."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
    if system_prompt and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": system_prompt})
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return "\n\n".join(m["content"] for m in messages)
