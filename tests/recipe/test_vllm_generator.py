"""rollout.generator vllm on the native engine, run on vLLM's CPU build (the lock installs it): the synchronous
loop and PipelineRL generate, train and evaluate with it; its rollout metrics, compute and resume behave as the
torch generator's; the choices it cannot take are refused in one line naming the fix.

The generator's own contract (logprobs, interruption, weight updates, seeds, distribution) is
tests/recipe/test_generator_contract.py; a whole sweep on it, killed and resumed, tests/sweeps/test_runner.py.
"""

from __future__ import annotations

import math

import pytest

from components.registry import ConfigError
from recipe.engines import train
from recipe.tracking import read_metrics

ROLLOUT_KEYS = ("rollout/pass_rate", "rollout/len_mean", "rollout/truncated_frac", "rollout/interrupted_frac")
COMPUTE_KEYS = ("compute/device_seconds", "compute/generation_seconds", "compute/training_seconds",
                "compute/evaluation_seconds", "compute/tokens", "compute/samples", "compute/flops")


def test_the_synchronous_loop_samples_trains_and_evaluates_with_vllm(tiny_recipe, tmp_path):
    """PPO-off-policy-2 with interruption through vLLM: the same records as the torch generator's (every rollout,
    train and compute metric), behaviour logprobs the trainer recomputes on the first step of each round, and
    the evaluation sampled by the same engine."""
    import recipe.run as run_module
    from recipe.vllm_generator import VllmGenerator

    short_thinking = ("length_control.min_thinking=2", "length_control.max_thinking=3")  # some rows interrupted
    # Every group kept: with zero-variance filtering a round's first step (the one whose mismatch is logged)
    # could train nothing, as the samples fall (it did on an Intel Xeon: no train/logprob_mismatch at all).
    options = ("eval.every_steps=2", "batch_filter=none", *short_thinking)
    vllm_cfg = tiny_recipe("rollout.generator=vllm", *options, run_steps=4)
    torch_cfg = tiny_recipe(*options, run_steps=4)
    built = []
    real_build = run_module.build_generator

    def recording_build(*args, **kwargs):
        generator = real_build(*args, **kwargs)
        built.append(generator)
        return generator

    run_module.build_generator = recording_build
    try:
        with_vllm = train(vllm_cfg, tmp_path / "vllm")
    finally:
        run_module.build_generator = real_build
    with_torch = train(torch_cfg, tmp_path / "torch")
    assert len(built) == 1 and isinstance(built[0], VllmGenerator)  # one engine served sampling and evaluation
    assert built[0].loaded_version == 4  # the last evaluation's weights: loaded at every version change
    assert [r["step"] for r in with_vllm] == [r["step"] for r in with_torch] == [0, 2, 4]
    assert set().union(*with_vllm) == set().union(*with_torch)  # the same metrics
    last = with_vllm[-1]
    for key in ROLLOUT_KEYS + COMPUTE_KEYS + ("eval/pass_rate", "eval/greedy_pass_rate"):
        assert math.isfinite(last[key]), key
    trained = [r for r in with_vllm if "train/loss" in r]
    assert len(trained) == 2 and all(math.isfinite(r["train/loss"]) for r in trained)
    assert last["compute/generation_seconds"] > 0 and last["compute/samples"] == with_torch[-1]["compute/samples"]
    assert max(r["rollout/interrupted_frac"] for r in with_vllm[1:]) > 0
    # minibatch 1 of each round is sampled by the weights it trains: the mismatch is vLLM's numerics, fp32
    mismatches = [r["train/logprob_mismatch"] for r in trained if "train/logprob_mismatch" in r]
    assert mismatches and max(mismatches) < 1e-4


def test_a_killed_run_resumes_from_its_checkpoint_with_vllm(tiny_recipe, tmp_path):
    """The run stops at step 2 (as a kill leaves it: checkpoint and metrics up to there), a new engine
    resumes it from the checkpoint's weights and streams, and the curve continues without a gap."""
    from recipe.engines.native import train_native

    cfg = tiny_recipe("rollout.generator=vllm", "eval.every_steps=2", "checkpoint.every_steps=2", run_steps=6)
    train_native(cfg, tmp_path / "run", device="cpu", stop_at_step=2)
    assert [r["step"] for r in read_metrics(tmp_path / "run")] == [0, 2]
    records = train(cfg, tmp_path / "run")
    assert [r["step"] for r in read_metrics(tmp_path / "run")] == [0, 2, 4, 6]
    assert records[-1]["step"] == 6 and math.isfinite(records[-1]["eval/pass_rate"])


def test_pipeline_rl_generates_with_vllm_within_the_staleness_bound(tiny_recipe, tmp_path):
    """PipelineRL-2: the generator role's vLLM engine loads each newly published version between orders; no
    token is more than k = 2 versions old, and the trainer evaluates with an engine of its own."""
    cfg = tiny_recipe("rollout.generator=vllm", "off_policy=pipeline_rl", "off_policy.k=2", "eval.every_steps=4",
                      run_steps=8)
    records = train(cfg, tmp_path / "run")
    assert [r["step"] for r in records] == [0, 4, 8]
    assert max(r["train/staleness_max"] for r in records[1:]) <= 2
    assert records[-1]["pipeline/weight_updates_per_order"] <= 1.0  # never mid-sequence: at most one a call
    assert math.isfinite(records[-1]["eval/pass_rate"])


@pytest.mark.parametrize("overrides, message", [
    (["rollout.decode_token_budget=4096"], r"rollout\.decode_token_budget: 4096 bounds the torch generator's .*"
                                           r"set rollout\.decode_token_budget 0, or rollout\.generator torch"),
    (["eval.decode_token_budget=4096"], r"eval\.decode_token_budget: 4096 .* set eval\.decode_token_budget 0"),
    (["engine.name=trl", "aggregation=token_mean", "curriculum=uniform"],
     r"rollout\.generator: vllm is the native engine's generator; .* set rollout\.generator torch and "
     r"engine\.vllm_mode colocate"),
])
def test_a_choice_the_vllm_generator_cannot_take_is_refused_naming_the_fix(tiny_recipe, overrides, message):
    with pytest.raises(ConfigError, match=message):
        tiny_recipe("rollout.generator=vllm", *overrides)


def test_vllm_missing_or_an_unsupported_head_is_refused_at_plan_time_naming_the_fix(tiny_recipe, monkeypatch):
    import recipe.preflight as preflight

    cfg = tiny_recipe("rollout.generator=vllm")
    preflight.check_can_run(cfg)  # the lock installs the CPU build; the tiny model's heads are 32 wide
    monkeypatch.setattr(preflight, "vllm_available", lambda: False)
    with pytest.raises(ConfigError, match=r"rollout\.generator: vllm generates with vLLM, which is not installed "
                                          r"where this job runs; install it: on a CPU machine `make install`.*pip "
                                          r"install -e '\.\[vllm\]'.*or set rollout\.generator torch"):
        preflight.check_can_run(cfg)
    monkeypatch.setattr(preflight, "vllm_available", lambda: True)
    monkeypatch.setattr(preflight, "cuda_devices_present", lambda: False)
    odd = tiny_recipe("rollout.generator=vllm", "model.path=embedded", "model.hidden_size=48", "model.num_heads=3")
    with pytest.raises(ConfigError, match=r"rollout\.generator: vllm on this CPU machine needs an attention head size "
                                          r"vLLM's CPU backend runs \(32, 64.*this model's is 16"):
        preflight.check_can_run(odd)
