"""Task files as researchers have them: JSONL, verl's Parquet, TRL's conversational `datasets` directories."""

from __future__ import annotations

import json

import pytest

from recipe.task_files import TaskFileError, TaskKeys, TaskRow, read_task_file, render_prompt

CHAT = [{"role": "system", "content": "Think, then answer."}, {"role": "user", "content": "What is 2 + 3?"}]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_jsonl_rows_with_mapped_keys_and_parts(tmp_path):
    path = write_jsonl(tmp_path / "polaris.jsonl", [{"problem": "1+1?", "answer": 2, "source": "polaris"},
                                                    {"problem": "2+2?", "answer": "4", "source": "aime"}])
    rows = read_task_file(path, TaskKeys(prompt="problem", part="source"))
    assert rows == [TaskRow("1+1?", "2", "polaris"), TaskRow("2+2?", "4", "aime")]
    with pytest.raises(TaskFileError, match=r"polaris.jsonl line 1: no 'prompt' field; set task.prompt_key .*problem"):
        read_task_file(path)


def test_verl_parquet_reads_as_it_is(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist([
        {"data_source": "openai/gsm8k", "prompt": CHAT, "ability": "math",
         "reward_model": {"style": "rule", "ground_truth": "5"}, "extra_info": {"index": 0}},
        {"data_source": "deepcoder", "prompt": [{"role": "user", "content": "Print 1."}], "ability": "code",
         "reward_model": {"style": "rule", "ground_truth": "1"}, "extra_info": {"index": 1}},
    ])
    path = tmp_path / "train.parquet"
    pq.write_table(table, path)
    rows = read_task_file(path, TaskKeys(part="data_source"))
    assert rows[0] == TaskRow(tuple(CHAT), "5", "openai/gsm8k")
    assert rows[1].answer == "1" and rows[1].part == "deepcoder" and rows[1].prompt[0]["role"] == "user"
    explicit = read_task_file(path, TaskKeys(answer="reward_model.ground_truth"))
    assert [r.answer for r in explicit] == ["5", "1"]


def test_trl_conversational_datasets_directory_reads_as_it_is(tmp_path):
    import datasets

    rows = [{"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}], "solution": str(2 * i)} for i in range(4)]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "plain"))
    read = read_task_file(tmp_path / "plain")
    assert [r.answer for r in read] == ["0", "2", "4", "6"] and read[3].prompt[0]["content"] == "What is 3 + 3?"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows[:3]),
                          "test": datasets.Dataset.from_list(rows[3:])}).save_to_disk(str(tmp_path / "splits"))
    assert len(read_task_file(tmp_path / "splits")) == 3
    assert len(read_task_file(tmp_path / "splits", split="test")) == 1
    with pytest.raises(TaskFileError, match="a DatasetDict without a 'validation' split; it has train, test"):
        read_task_file(tmp_path / "splits", split="validation")


@pytest.mark.parametrize("row, message", [
    ({"prompt": "", "answer": "1"}, r"line 2: 'prompt' is empty text; expected the problem"),
    ({"prompt": ["x"], "answer": "1"}, r"line 2: 'prompt' message 0 is not a \{role, content\} pair"),
    ({"prompt": [{"role": "hacker", "content": "x"}], "answer": "1"}, "message 0 is not a"),
    ({"prompt": "q", "answer": None}, r"line 2: 'answer' is null; expected the reference answer"),
    ({"prompt": "q", "answer": True}, r"line 2: 'answer' is a boolean"),
    ({"prompt": "q"}, r"line 2: no 'answer' or 'reward_model.ground_truth' or 'solution' field; set task.answer_key"),
])
def test_a_bad_row_is_named_by_file_and_row_never_quoted(tmp_path, row, message):
    secret = "SECRET-TOKEN-123"
    path = write_jsonl(tmp_path / "t.jsonl", [{"prompt": "fine", "answer": "1"}, {**row, "note": secret}])
    with pytest.raises(TaskFileError, match=message) as caught:
        read_task_file(path)
    assert secret not in str(caught.value) and "t.jsonl" in str(caught.value)


def test_unreadable_files_get_one_line(tmp_path):
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(TaskFileError, match=r"unknown task file type '.csv'; give a .jsonl or .parquet file"):
        read_task_file(tmp_path / "x.csv")
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(TaskFileError, match=r"bad.parquet: not a readable Parquet file"):
        read_task_file(tmp_path / "bad.parquet")
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(TaskFileError, match="a directory without dataset_info.json"):
        read_task_file(tmp_path / "empty_dir")
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(TaskFileError, match="not a UTF-8 text file"):
        read_task_file(tmp_path / "bin.jsonl")
    (tmp_path / "list.jsonl").write_text("[1, 2]\n")
    with pytest.raises(TaskFileError, match="list.jsonl line 1: an array, expected a JSON object"):
        read_task_file(tmp_path / "list.jsonl")


def test_without_a_chat_template_prompts_are_their_text():
    assert render_prompt("What is 2 + 3?", object()) == "What is 2 + 3?"
    assert render_prompt(tuple(CHAT), object()) == "Think, then answer.\n\nWhat is 2 + 3?"
    assert render_prompt("Q", object(), system_prompt="Be brief.") == "Be brief.\n\nQ"
    assert render_prompt(tuple(CHAT), object(), system_prompt="ignored: the messages have one").startswith("Think")


def test_plan_time_checks_name_the_key(tmp_path):
    from components.registry import ConfigError
    from recipe.config import load_recipe
    from recipe.preflight import check_files

    good = write_jsonl(tmp_path / "good.jsonl", [{"problem": f"{i}+1?", "answer": i + 1} for i in range(20)])
    cfg = load_recipe(None, ["task.name=file", f"task.train_path={good}", "task.prompt_key=problem",
                             "task.validation_size=5", "eval.num_prompts=5"])
    check_files(cfg)
    cfg = load_recipe(None, ["task.name=file", f"task.train_path={good}", "task.validation_size=5",
                             "eval.num_prompts=5"])
    with pytest.raises(ConfigError, match=r"^task.train_path: .*good.jsonl line 1: no 'prompt' field"):
        check_files(cfg)
    cfg = load_recipe(None, ["task.name=file", f"task.train_path={tmp_path / 'missing.parquet'}"])
    with pytest.raises(ConfigError, match="task.train_path: got .*no such file or directory; give a JSONL or Parquet"):
        check_files(cfg)
