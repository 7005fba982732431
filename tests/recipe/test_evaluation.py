"""Evaluation: sampled mean@k and greedy pass@1 generated together, eval.batch_size rows a call."""

from __future__ import annotations

import math

import pytest
import torch


@pytest.mark.parametrize("batch_size, calls", [(1024, [24]), (10, [10, 10, 4])])
def test_sampled_and_greedy_answers_share_the_generate_calls(tiny_recipe, tmp_path, monkeypatch, batch_size, calls):
    import recipe.generator as generator_module
    from recipe.run import Run

    real_generate, seen = generator_module.generate, []

    def counting_generate(model, tokenizer, prompts, **kwargs):  # the real generator, its calls recorded
        seen.append((list(prompts), kwargs["greedy"].clone()))
        return real_generate(model, tokenizer, prompts, **kwargs)

    monkeypatch.setattr(generator_module, "generate", counting_generate)
    torch.set_num_threads(1)
    # 8 prompts x (2 sampled + 1 greedy) = 24 rows
    run = Run(tiny_recipe(f"eval.batch_size={batch_size}"), tmp_path / "run", "cpu", devices=1)
    metrics = run.evaluate()
    assert [len(prompts) for prompts, _ in seen] == calls
    prompts = [p for batch, _ in seen for p in batch]
    greedy = torch.cat([flags for _, flags in seen])
    validation = [problem.prompt for problem in run.task.validation[:8]]
    assert prompts == [p for p in validation for _ in range(2)] + validation
    assert greedy.tolist() == [False] * 16 + [True] * 8
    for key in ("eval/pass_rate", "eval/greedy_pass_rate", "eval/len_mean", "eval/truncated_frac"):
        assert 0.0 <= metrics[key] <= (1.0 if "len" not in key else 12.0)
    # the pass rate counts the 16 sampled answers only: a multiple of 1/16, the greedy one of 1/8
    assert (metrics["eval/pass_rate"] * 16) == pytest.approx(round(metrics["eval/pass_rate"] * 16))
    assert (metrics["eval/greedy_pass_rate"] * 8) == pytest.approx(round(metrics["eval/greedy_pass_rate"] * 8))


def test_without_greedy_only_the_sampled_answers_are_generated(tiny_recipe, tmp_path, monkeypatch):
    import recipe.generator as generator_module
    from recipe.run import Run

    real_generate, rows = generator_module.generate, []
    monkeypatch.setattr(generator_module, "generate",
                        lambda model, tokenizer, prompts, **kwargs: rows.append(len(prompts)) or
                        real_generate(model, tokenizer, prompts, **kwargs))
    run = Run(tiny_recipe("eval.greedy=false"), tmp_path / "run", "cpu", devices=1)
    metrics = run.evaluate()
    assert rows == [16] and "eval/greedy_pass_rate" not in metrics


def test_eval_batch_size_must_be_positive(tiny_recipe):
    from components.registry import ConfigError

    with pytest.raises(ConfigError, match="eval.batch_size"):
        tiny_recipe("eval.batch_size=0")


def test_every_evaluation_of_a_run_uses_the_same_draws(tiny_recipe, tmp_path):
    # Common random numbers: the same model evaluated at two different steps gives the same answers,
    # so a curve's points move with the policy, not with sampling noise.
    from recipe.run import Run

    torch.set_num_threads(1)
    run = Run(tiny_recipe("eval.samples_per_prompt=8"), tmp_path / "run", "cpu", devices=1)
    first = run.evaluate()
    run.step += 37  # a later evaluation point, the weights unchanged
    again = run.evaluate()
    for key in ("eval/pass_rate", "eval/len_mean", "eval/interrupted_frac"):
        assert again[key] == first[key]


def test_per_point_draws_are_fresh_at_every_step_and_the_same_for_every_run_at_a_step(tiny_recipe, tmp_path):
    # eval.draws=per_point: the same model at another step samples other answers (independent errors
    # along the curve); at the same step it samples the same ones, whatever the run's seed or process.
    from recipe.run import Run

    torch.set_num_threads(1)
    overrides = ("eval.samples_per_prompt=8", "eval.num_prompts=32", "eval.draws=per_point")
    run = Run(tiny_recipe(*overrides), tmp_path / "run", "cpu", devices=1)
    first = run.evaluate()
    run.step += 37
    later = run.evaluate()
    assert (later["eval/len_mean"], later["eval/pass_rate"]) != (first["eval/len_mean"], first["eval/pass_rate"])
    other_seed = Run(tiny_recipe(*overrides, "seed=3"), tmp_path / "other", "cpu", devices=1)
    other_seed.step = run.step
    again = other_seed.evaluate()
    for key in ("eval/pass_rate", "eval/len_mean", "eval/interrupted_frac"):
        assert again[key] == later[key]


def test_evaluation_streams_per_point_are_keyed_by_seed_and_step():
    from recipe.evaluation import evaluation_streams

    def draws(seed, draws, step):
        torch_rng, numpy_rng = evaluation_streams(seed, draws, step, "cpu")
        return torch.rand(4, generator=torch_rng).tolist() + numpy_rng.random(2).tolist()

    assert draws(0, "common", 0) == draws(0, "common", 50)  # common random numbers
    assert draws(0, "per_point", 50) == draws(0, "per_point", 50)
    assert len({tuple(draws(seed, "per_point", step)) for seed in (0, 1) for step in (0, 1, 50)}) == 6
    with pytest.raises(ValueError, match="eval.draws"):
        evaluation_streams(0, "fresh", 0, "cpu")


def test_eval_draws_must_be_a_known_choice(tiny_recipe):
    from components.registry import ConfigError

    with pytest.raises(ConfigError, match=r"eval.draws: got 'fresh', expected one of common, per_point"):
        tiny_recipe("eval.draws=fresh")


def test_runs_of_every_seed_are_scored_on_one_stream_unless_eval_seed_is_null(tiny_recipe):
    # eval.seed (default 0): one test for every run of a sweep; null: each run's own seed decides its draws.
    from recipe.evaluation import evaluate
    from recipe.generator import TorchGenerator
    from recipe.model import load_model_dir
    from recipe.run import build_components, evaluation_kwargs
    from recipe.tasks import build_task

    torch.set_num_threads(1)
    cfg = tiny_recipe("eval.samples_per_prompt=8")
    model, tokenizer = load_model_dir(cfg.model.path)
    task = build_task(cfg.task, tokenizer)

    def scored(*overrides):
        run_cfg = tiny_recipe("eval.samples_per_prompt=8", *overrides)
        kwargs = evaluation_kwargs(run_cfg, build_components(run_cfg))
        return kwargs["seed"], evaluate(TorchGenerator(model, tokenizer), task, **kwargs)["eval/len_mean"]

    assert scored("seed=1") == scored("seed=2") == scored("seed=5", "eval.seed=0")
    assert scored("seed=1", "eval.seed=null")[0] == 1
    assert scored("seed=1", "eval.seed=null") != scored("seed=2", "eval.seed=null")  # different draws, same model
    with pytest.raises(Exception, match="eval.seed"):
        tiny_recipe("eval.seed=-1")


def test_sampling_standard_error_is_the_formula():
    # se = sqrt(sum_i q_i (1 - q_i) / (k - 1)) / N
    from recipe.evaluation import sampling_standard_error

    q = torch.tensor([0.0, 0.25, 0.5, 1.0])
    expected = ((0.25 * 0.75 + 0.5 * 0.5) / 3) ** 0.5 / 4
    assert sampling_standard_error(q, 4) == pytest.approx(expected, rel=1e-12)
    assert sampling_standard_error(torch.tensor([0.0, 1.0]), 8) == 0.0  # nothing to resample
    assert math.isnan(sampling_standard_error(q, 1))  # one sample a prompt cannot estimate its variance


def test_sampling_standard_error_predicts_the_spread_of_repeated_evaluations():
    # 256 prompts of known success probability, k = 4 samples each, evaluated 4,000 times: the sd of the
    # pass rate over the repeats is what the mean logged se says (the estimator is unbiased for the variance).
    import numpy as np

    from recipe.evaluation import sampling_standard_error

    rng = np.random.default_rng(0)
    probabilities = rng.beta(2, 1, size=256)  # mostly solvable prompts, as late in a run
    k, repeats = 4, 4000
    shares = rng.binomial(k, probabilities, size=(repeats, probabilities.size)) / k
    logged = [sampling_standard_error(torch.from_numpy(row), k) for row in shares[:400]]
    spread = shares.mean(axis=1).std(ddof=1)
    assert float(np.mean(logged)) == pytest.approx(spread, rel=0.05)


def test_evaluation_logs_its_sampling_standard_error(tiny_recipe, tmp_path):
    # The same model under other evaluation seeds: the pass rate moves by about the logged se.
    import numpy as np

    from recipe.evaluation import evaluate
    from recipe.generator import TorchGenerator
    from recipe.model import load_model_dir
    from recipe.run import build_components, evaluation_kwargs
    from recipe.tasks import build_task

    torch.set_num_threads(1)
    cfg = tiny_recipe("eval.num_prompts=32", "eval.samples_per_prompt=8", "eval.greedy=false")
    model, tokenizer = load_model_dir(cfg.model.path)
    task = build_task(cfg.task, tokenizer)
    kwargs = evaluation_kwargs(cfg, build_components(cfg))
    runs = [evaluate(TorchGenerator(model, tokenizer), task, **{**kwargs, "seed": seed}) for seed in range(12)]
    logged = np.mean([r["eval/pass_rate_se"] for r in runs])
    spread = np.std([r["eval/pass_rate"] for r in runs], ddof=1)
    assert 0 < logged < 0.2
    assert 0.5 < spread / logged < 2.0  # 12 repeats estimate an sd to about +-20%


# ------------------------------------------------------------------------------------------------------------
# The reference control variate (eval.control_variate: reference)

def reference_setup(tiny_recipe, *overrides):
    """(cfg, generator, task, components) of the tiny model with thinking budgets short enough to cut its traces."""
    from recipe.generator import TorchGenerator
    from recipe.model import load_model_dir
    from recipe.run import build_components
    from recipe.tasks import build_task

    torch.set_num_threads(1)
    cfg = tiny_recipe("length_control.min_thinking=1", "length_control.max_thinking=6", "eval.greedy=false",
                      "eval.control_variate=reference", *overrides)
    model, tokenizer = load_model_dir(cfg.model.path)
    return cfg, TorchGenerator(model, tokenizer), build_task(cfg.task, tokenizer), build_components(cfg)


def test_reference_paths_are_the_generators_responses_to_the_reference_under_every_budget(tiny_recipe):
    from components.length_control import InterruptionLengthControl, NoLengthControl
    from recipe.evaluation import reference_paths
    from recipe.tasks import Problem

    _, generator, _, _ = reference_setup(tiny_recipe)
    tokenizer = generator.tokenizer
    problem = Problem("0012+0039=<think>", "51", reference_thinking="1105")  # 2 + 9 = 11, 1 + 3 + 1 = 05
    control = InterruptionLengthControl(min_thinking=2, max_thinking=7, answer_budget=4)
    paths = reference_paths(tokenizer, [problem], control, max_new_tokens=16)
    phrase = control.interruption_phrase
    text = {tokenizer.decode(list(p["tokens"])): p for p in paths}
    # budgets 2, 3, 4 reach the thinking (4 tokens): each forces the phrase in after that many tokens; 5, 6, 7 let
    # the trace close itself, one response (1/6 each, summed)
    expected = {f"11{phrase}51</s>": 1 / 6, f"110{phrase}51</s>": 1 / 6, f"1105{phrase}51</s>": 1 / 6,
                "1105</think>51</s>": 3 / 6}
    eos = tokenizer.eos_token
    assert {t.replace(eos, "</s>"): p["weight"] for t, p in text.items()} == pytest.approx(expected)
    cut = text[f"11{phrase}51{eos}"]
    phrase_tokens = len(tokenizer.encode(phrase, add_special_tokens=False))
    assert cut["sampled"] == (True,) * 2 + (False,) * phrase_tokens + (True,) * 3  # the phrase is forced
    # no interruption: the reference itself, certain to be drawn whatever the budget
    (plain,) = reference_paths(tokenizer, [problem], NoLengthControl(), max_new_tokens=16)
    assert tokenizer.decode(list(plain["tokens"])) == f"1105</think>51{eos}" and plain["weight"] == 1.0
    assert reference_paths(tokenizer, [problem], NoLengthControl(), max_new_tokens=6) == []  # cut by the limit


def test_a_reference_path_has_the_probability_the_generator_sampled_it_with(tiny_recipe):
    # Every sampled answer that is a reference path: its behaviour logprobs sum to the path's teacher-forced log p.
    from recipe.evaluation import path_probabilities, reference_paths, response_keys

    cfg, generator, task, c = reference_setup(tiny_recipe)
    problems = task.validation[:8]
    paths = reference_paths(generator.tokenizer, problems, c.length_control, cfg.rollout.max_new_tokens)
    probabilities = path_probabilities(generator.model, generator.tokenizer, [p.prompt for p in problems], paths,
                                       precision=c.precision, temperature=cfg.rollout.temperature, batch_size=7)
    by_key = {(p["problem"], p["tokens"], p["sampled"]): float(q) for p, q in zip(paths, probabilities)}
    k = 128
    rollout = generator.generate([p.prompt for p in problems for _ in range(k)], precision=c.precision,
                                 length_control=c.length_control, max_new_tokens=cfg.rollout.max_new_tokens,
                                 temperature=cfg.rollout.temperature, torch_rng=torch.Generator().manual_seed(0),
                                 numpy_rng=__import__("numpy").random.default_rng(0))
    matched, cut = 0, 0
    for row, (tokens, sampled) in enumerate(response_keys(rollout)):
        key = (row // k, tokens, sampled)
        if key in by_key:
            matched, cut = matched + 1, cut + (not all(sampled))
            behaviour = float(rollout.old_logprobs[row].double().sum().exp())
            assert by_key[key] == pytest.approx(behaviour, rel=1e-4)
    assert matched >= 20 and 0 < cut < matched  # the check saw reference answers, cut and whole


def test_the_reference_control_variate_is_unbiased_and_removes_most_of_the_sampling_noise(tiny_recipe):
    # 24 evaluations of one model on other draws: the control variate's pass rate averages to the sampled one's
    # (both estimate the same expectation), its spread is its logged se, and it is far below the sampled spread.
    import numpy as np

    from recipe.evaluation import evaluate
    from recipe.run import evaluation_kwargs

    cfg, generator, task, c = reference_setup(tiny_recipe, "eval.num_prompts=32", "eval.samples_per_prompt=4")
    kwargs = evaluation_kwargs(cfg, c)
    runs = [evaluate(generator, task, **{**kwargs, "seed": seed}) for seed in range(24)]
    controlled = np.array([r["eval/pass_rate"] for r in runs])
    sampled = np.array([r["eval/sampled_pass_rate"] for r in runs])
    logged = np.mean([r["eval/pass_rate_se"] for r in runs])
    assert 0.05 < sampled.mean() < 0.95 and runs[0]["eval/reference_probability"] > 0.02
    assert all(r["eval/sampled_pass_rate_se"] > r["eval/pass_rate_se"] for r in runs)
    # the means differ by the sampled estimates' noise at most (se of the mean of 24 sampled rates, x4)
    assert abs(controlled.mean() - sampled.mean()) < 4 * sampled.std(ddof=1) / np.sqrt(24)
    assert controlled.std(ddof=1) < 0.5 * sampled.std(ddof=1)
    assert 0.5 < controlled.std(ddof=1) / logged < 2.0


def test_the_reference_control_variate_needs_a_reference_and_the_torch_generator(tiny_recipe):
    from components.registry import ConfigError

    with pytest.raises(ConfigError, match="eval.control_variate: 'reference' needs problems with a reference"):
        tiny_recipe("eval.control_variate=reference", "task.name=jsonl", "task.train_path=x.jsonl")
    with pytest.raises(ConfigError, match="rollout.generator=torch or eval.control_variate=none"):
        tiny_recipe("eval.control_variate=reference", "rollout.generator=vllm")
    with pytest.raises(ConfigError, match="eval.control_variate: got 'exact', expected one of none, reference"):
        tiny_recipe("eval.control_variate=exact")


def test_the_reference_control_variate_refuses_a_generator_that_is_not_the_torch_model(tiny_recipe):
    # TRL's colocated vLLM engine evaluates a trl job: its numerics are not the torch model's, so no exact p_i.
    import types

    from recipe.evaluation import reference_control_variate

    cfg, generator, task, c = reference_setup(tiny_recipe)
    vllm_like = types.SimpleNamespace(name="vllm", tokenizer=generator.tokenizer, model=generator.model)
    with pytest.raises(ValueError, match="samples with the vllm generator; use eval.control_variate=none"):
        reference_control_variate(vllm_like, task.validation[:2], [], torch.zeros(0), 1, precision=c.precision,
                                  length_control=c.length_control, max_new_tokens=12, temperature=1.0, batch_size=8)
