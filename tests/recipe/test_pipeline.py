"""PipelineRL-k: in-flight weight updates, the staleness bound, and role failures (real processes)."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from components import REGISTRIES
from recipe.generator import generate
from recipe.engines import train
from recipe.model import lm_parts, load_model_dir
from recipe.engines.pipeline import ROLES_FILE
from recipe.engines.pipeline_channel import SharedMemoryWeights
from recipe.tracking import read_metrics
from recipe.trainer import sequence_logprobs

# The base recipe's choices the trl engine refuses, replaced (tests/recipe/test_trl_engine.py: TRL_BASE).
TRL_RUNNABLE = ["aggregation=token_mean", "curriculum=uniform", "length_control=none", "off_policy=ppo_off_policy"]

NO_LENGTH_CONTROL = REGISTRIES["length_control"].build({"name": "none"})
FP32_HEAD = REGISTRIES["precision"].build({"name": "lm_head", "fp32_head": True})
PROMPTS = ["07+05=<think>", "7+5=<think>", "19+01=<think>", "123+9=<think>"] * 4
SWAP_AT = 3  # decode steps sampled by version 0 before version 1 arrives


def head_variant(model, seed: int):
    """A second policy version that differs only in the LM head.

    The body is shared, so the KV cache the generator keeps across the swap is exactly the cache
    of either version, and a full forward pass of each version gives the logprobs it sampled with.
    """
    other = copy.deepcopy(model)
    head = lm_parts(other).head.weight
    with torch.no_grad():
        head.add_(0.5 * torch.randn(head.shape, generator=torch.Generator().manual_seed(seed)))
    return other


def test_tokens_span_two_versions_and_keep_the_logprobs_of_the_version_that_sampled_them(tiny_model_dir):
    model, tokenizer = load_model_dir(tiny_model_dir)
    versions = [copy.deepcopy(model), head_variant(model, seed=1)]
    ctx = torch.multiprocessing.get_context("spawn")
    channel = SharedMemoryWeights(ctx)
    channel.create(versions[0])
    channel.publish(versions[1], version=1)  # the trainer's new weights, waiting in shared memory
    calls = []

    def on_decode_step(tokens: int, context: int) -> int:
        calls.append(len(calls))
        if len(calls) <= SWAP_AT:
            return 0
        if len(calls) == SWAP_AT + 1:
            version, _ = channel.receive(model)  # in place, mid-sequence, KV cache kept
            assert version == 1
        return 1

    rollout = generate(model, tokenizer, PROMPTS, precision=FP32_HEAD, length_control=NO_LENGTH_CONTROL,
                       max_new_tokens=12, torch_rng=torch.Generator().manual_seed(0),
                       numpy_rng=np.random.default_rng(0), on_decode_step=on_decode_step)
    sampled = rollout.loss_mask
    spans = [set(row[mask].tolist()) for row, mask in zip(rollout.versions, sampled)]
    assert any(s == {0, 1} for s in spans), spans  # some sequence was sampled by both versions
    assert rollout.versions[:, :SWAP_AT].eq(0).all() and rollout.versions[:, SWAP_AT:].eq(1).all()

    recomputed = [sequence_logprobs(v, FP32_HEAD, rollout.input_ids, rollout.attention_mask, rollout.prompt_width)[0]
                  for v in versions]
    by_version = torch.where(rollout.versions == 0, recomputed[0], recomputed[1])
    # fp32 round-off of incremental (KV cache) vs full forward passes: ~1e-5 at these logit scales.
    assert (by_version - rollout.old_logprobs)[sampled].abs().max() < 1e-4
    # The check can fail: the other version gives clearly different logprobs for the same tokens.
    wrong = torch.where(rollout.versions == 0, recomputed[1], recomputed[0])
    assert (wrong - rollout.old_logprobs)[sampled].abs().max() > 1e-2


def pipeline_overrides(k: int = 2) -> list[str]:
    return ["off_policy=pipeline_rl", f"off_policy.k={k}"]


def test_pipeline_run_trains_concurrently_within_the_staleness_bound(tiny_recipe, tmp_path):
    k = 2
    cfg = tiny_recipe(*pipeline_overrides(k), "eval.every_steps=4", "checkpoint.every_steps=8", run_steps=16)
    records = train(cfg, tmp_path / "run")
    assert [r["step"] for r in records] == [0, 4, 8, 12, 16]
    for record in records[1:]:
        assert record["train/staleness_max"] <= k
        assert 0.0 <= record["pipeline/trainer_idle_frac"] <= 1.0
        assert record["pipeline/generator_tokens_per_s"] > 0 and record["pipeline/trainer_tokens_per_s"] > 0
        assert "pipeline/queue_depth" in record and "pipeline/publish_seconds" in record
        assert record["compute/devices"] == 2.0
    # The generator kept sampling while the trainer updated: data arrived up to k versions old,
    # and weights were picked up while it sampled.
    assert max(r["train/staleness_max"] for r in records[1:]) >= 1
    assert sum(r.get("pipeline/weight_updates_per_order", 0.0) for r in records[1:]) > 0
    assert any("pipeline/generator_idle_frac" in r for r in records[1:])


def modeled_run(tiny_recipe, run_dir: Path, *overrides: str) -> list[dict]:
    cfg = tiny_recipe(*pipeline_overrides(2), "off_policy.timing=modeled", "eval.every_steps=4",
                      "checkpoint.every_steps=8", *overrides, run_steps=16)
    return train(cfg, run_dir)


def run_outcome(run_dir: Path, records: list[dict]) -> dict:
    """What a run computed: its evaluation curve, its staleness and its final weights."""
    from recipe.checkpoint import load_checkpoint

    weights = load_checkpoint(run_dir)["model"]
    return {"pass_rates": [r["eval/pass_rate"] for r in records], "flops": [r["compute/flops"] for r in records],
            "staleness": [r.get("train/staleness") for r in records], "weights": weights}


def test_modeled_timing_makes_a_pipeline_run_the_same_whatever_the_machine_is_doing(tiny_recipe, tmp_path):
    # off_policy.timing=modeled: when weights reach the generator follows each role's FLOPs, not the clock,
    # so a run repeats exactly, even with a CPU-bound process beside it that slows the two roles unevenly.
    alone = modeled_run(tiny_recipe, tmp_path / "alone")
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        loaded = modeled_run(tiny_recipe, tmp_path / "loaded")
    finally:
        burner.kill()
        burner.wait()
    first, second = run_outcome(tmp_path / "alone", alone), run_outcome(tmp_path / "loaded", loaded)
    assert first["pass_rates"] == second["pass_rates"] and first["staleness"] == second["staleness"]
    assert first["flops"] == second["flops"]
    assert all(torch.equal(first["weights"][name], second["weights"][name]) for name in first["weights"])
    # In flight as PipelineRL is: tokens up to k versions old, weights picked up mid-order, the bound kept.
    assert 0 < max(r["train/staleness_max"] for r in alone[1:]) <= 2
    assert sum(r["pipeline/weight_updates_per_order"] for r in alone[1:]) > 0
    assert all(0.0 <= r["pipeline/modeled_trainer_idle_frac"] <= 1.0 for r in alone[1:])
    # The check can fail: a trainer modeled 8x faster than the generator waits for its data instead, and
    # takes in fresher tokens (its weights reach the generator sooner).
    fast = modeled_run(tiny_recipe, tmp_path / "fast", "off_policy.trainer_speed=16.0")
    assert [r.get("train/staleness") for r in fast] != first["staleness"]
    # A replicate of the same seed (recipe key replicate: an A/A scan's runs) starts from the same point,
    # evaluated on the same draws, and trains on other rollouts.
    replicate = run_outcome(tmp_path / "replicate", modeled_run(tiny_recipe, tmp_path / "replicate", "replicate=1"))
    assert replicate["pass_rates"][0] == first["pass_rates"][0]
    assert not all(torch.equal(first["weights"][name], replicate["weights"][name]) for name in first["weights"])


def test_modeled_clocks_hand_the_generator_each_version_once_its_step_has_ended():
    import queue
    from types import SimpleNamespace

    from recipe.compute import ModelShape
    from recipe.engines.pipeline_timing import ModeledGeneratorClock, ModeledTrainerClock

    shape = ModelShape(params=10, layers=1, width=1)  # a forward pass of n tokens, context c: 20 n + 2 c FLOPs
    channels = SimpleNamespace(schedule=queue.Queue(), stop=SimpleNamespace(is_set=lambda: False),
                               supervisor_pid=os.getppid())
    generator = ModeledGeneratorClock(shape, channels, k=1, start_version=0)
    assert generator.start_order(0) == 0.0 and generator.due_version(0, order=0) == 0  # its own order: not trained
    generator.charge(tokens=5, context=0)  # 100 FLOPs: order 0 is done at 100
    trainer = ModeledTrainerClock(trainer_speed=2.0, shape=shape)
    from recipe.run import Minibatch

    no_batch = Minibatch(batch=None, metrics={}, seconds=0.0, prompt_lengths=[], response_lengths=[],
                         cpu_seconds=0.0)  # every group filtered: a step of no FLOPs
    assert trainer.schedule(no_batch, order_done=100.0) == (100.0, 100.0, 0.0)
    channels.schedule.put((0, 100.0))
    assert generator.start_order(1) == 0.0  # order 1 is handed out at the start (k + 1 orders)
    assert generator.due_version(0, order=1) == 1  # step 0 ended at 100: version 1 from the next forward pass
    generator.charge(tokens=10, context=0)  # order 1: 100 -> 300
    channels.schedule.put((1, 400.0))  # step 1 ends at 400, its version 2 after order 2's first passes
    assert generator.start_order(2) == 0.0 and generator.due_version(1, order=2) == 1
    generator.charge(tokens=6, context=0)  # 300 -> 420
    assert generator.due_version(1, order=2) == 2
    channels.schedule.put((2, 1000.0))
    assert generator.start_order(3) == 0.0  # handed out when step 1 ended (400): the generator was past it
    generator.charge(tokens=1, context=0)
    channels.schedule.put((3, 2000.0))
    assert generator.start_order(5) == 2000.0 - 440.0 and generator.now == 2000.0  # handed out as step 3 ends
    channels.schedule.put((4, 3000.0))
    assert generator.due_version(2, order=5) == 4  # versions 3 and 4 at once: 3 is never loaded


def run_sweep_train(overrides: list[str], run_dir: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "sweeps.cli", "train", *overrides, "--run-dir", str(run_dir)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=Path(__file__).resolve().parents[2])


# With modeled timing a role may be waiting on the other's progress (its posted step end, its loaded version).
@pytest.mark.parametrize("role, timing", [("generator", "real"), ("trainer", "real"), ("generator", "modeled"),
                                          ("trainer", "modeled")])
def test_kill_9_of_a_role_stops_the_run_naming_it_and_a_rerun_resumes(tiny_overrides, tmp_path, role, timing):
    overrides = tiny_overrides(*pipeline_overrides(2), f"off_policy.timing={timing}", "eval.every_steps=2",
                               "checkpoint.every_steps=2", run_steps=16)
    run_dir = tmp_path / "run"
    process = run_sweep_train(overrides, run_dir)
    deadline = time.time() + 300
    while not (run_dir / "checkpoint.pt").is_file() or len(read_metrics(run_dir)) < 3:
        assert process.poll() is None, process.communicate()[0]
        assert time.time() < deadline
        time.sleep(0.2)
    pid = json.loads((run_dir / ROLES_FILE).read_text())[role]
    assert process.poll() is None, "the run ended before the kill"
    os.kill(pid, signal.SIGKILL)
    killed = time.time()
    output, _ = process.communicate(timeout=60)
    assert time.time() - killed < 30
    assert process.returncode != 0
    assert f"PipelineRL {role} process (pid {pid}) died: killed by signal 9 (SIGKILL)" in output, output

    rerun = run_sweep_train(overrides, run_dir)
    output, _ = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, output
    steps = [r["step"] for r in read_metrics(run_dir)]
    assert steps == list(range(0, 17, 2))  # every eval point once, none missing


@pytest.mark.parametrize("overrides, device, gpus, held", [
    (["off_policy=ppo_off_policy"], "cuda", 1, 1),
    (["off_policy=ppo_off_policy"], "cpu", 0, "threads"),
    (["off_policy=pipeline_rl"], "cuda", 1, 1),  # two roles sharing one GPU hold one device
    (["off_policy=pipeline_rl"], "cuda", 2, 2),
    (["off_policy=pipeline_rl", "off_policy.generator_devices=2"], "cpu", 0, 3),
    (["engine.name=trl", *TRL_RUNNABLE, "engine.num_processes=4"], "cuda", 8, 4),
    (["engine.name=trl", *TRL_RUNNABLE, "engine.num_processes=2"], "cpu", 0, "2 x threads"),
    # vLLM: colocated on the ranks' GPUs, or a server's own GPUs on top of them (PipelineRL on trl too)
    (["engine.name=trl", *TRL_RUNNABLE, "engine.num_processes=2", "engine.vllm_mode=colocate"], "cuda", 8, 2),
    (["engine.name=trl", *TRL_RUNNABLE, "engine.num_processes=2", "engine.vllm_mode=server",
      "engine.vllm_server_devices=2"], "cuda", 8, 4),
    (["engine.name=trl", "off_policy=pipeline_rl", "engine.vllm_mode=server", "engine.vllm_server_devices=1",
      "loss=dapo", "aggregation=token_mean", "advantage_norm=prompt", "batch_filter=none", "curriculum=uniform",
      "length_control=none"], "cuda", 8, 2),
])
def test_a_job_is_charged_for_the_devices_it_holds(overrides, device, gpus, held):
    """One rule for every engine and off-policy mode (recipe.run.devices_held): GPUs held, or cores on CPU."""
    from recipe.config import load_recipe
    from recipe.run import role_device
    from recipe.run import devices_held

    cfg = load_recipe(None, overrides)
    threads = torch.get_num_threads()
    expected = {"threads": threads, "2 x threads": 2 * threads}.get(held, held)
    assert devices_held(cfg, device, gpus) == expected
    mode = REGISTRIES["off_policy"].build(cfg.off_policy)
    if mode.asynchronous and device == "cuda":  # the roles' placement that rule counts
        assert len({role_device(device, role, mode, gpus) for role in ("trainer", "generator")}) == expected


def test_a_bf16_recipe_publishes_its_linear_weights_in_bf16_and_the_generator_samples_exactly_as_before(
        tiny_model_dir):
    """The body's Linear weights go out in the compute dtype (autocast rounds them so at every matmul anyway),
    embeddings, norms and the FP32 head in fp32, and the generator holds them so: its tokens and logprobs are
    unchanged, bit for bit."""
    from recipe.engines.pipeline_channel import hold_in_publish_dtypes, publish_dtypes

    trainer_model, tokenizer = load_model_dir(tiny_model_dir, "bfloat16")
    dtypes = publish_dtypes(trainer_model)
    linear = {f"{name}.weight" for name, m in trainer_model.named_modules() if isinstance(m, torch.nn.Linear)}
    head = "lm_head.weight"
    assert {name for name, dtype in dtypes.items() if dtype == torch.bfloat16} == linear - {head}
    assert dtypes[head] == torch.float32 and dtypes["model.embed_tokens.weight"] == torch.float32
    assert set(publish_dtypes(load_model_dir(tiny_model_dir, "float32")[0]).values()) == {torch.float32}
    total = sum(t.numel() * t.element_size() for t in trainer_model.state_dict().values())
    channel = SharedMemoryWeights(torch.multiprocessing.get_context("spawn"))
    published = sum(t.numel() * t.element_size() for t in channel.create(trainer_model)[0].values())
    assert published < total
    channel.publish(trainer_model, version=3)
    generator_model, _ = load_model_dir(tiny_model_dir, "bfloat16")
    hold_in_publish_dtypes(generator_model)
    held = {name: p.dtype for name, p in generator_model.named_parameters(remove_duplicate=False)}
    assert held == {name: dtypes[name] for name in held}  # bf16 Linear weights, the fp32 head and embeddings
    assert sum(p.numel() * p.element_size() for p in generator_model.parameters()) < sum(
        p.numel() * p.element_size() for p in trainer_model.parameters())
    with torch.no_grad():
        for p in generator_model.parameters():
            p.add_(1.0)  # stale weights, to be replaced
    assert channel.receive(generator_model)[0] == 3

    def sample(model):
        return generate(model, tokenizer, PROMPTS, precision=FP32_HEAD, length_control=NO_LENGTH_CONTROL,
                        max_new_tokens=12, torch_rng=torch.Generator().manual_seed(0),
                        numpy_rng=np.random.default_rng(0))

    expected, got = sample(trainer_model), sample(generator_model)
    assert torch.equal(got.input_ids, expected.input_ids) and torch.equal(got.old_logprobs, expected.old_logprobs)


def test_the_generator_reads_the_newest_complete_weights_while_the_trainer_writes_the_next(tiny_model_dir):
    """Double buffering: a publish in progress (its slot's lock held) does not hold up a receive, which gets
    the newest complete version; the next publish then becomes the newest."""
    import threading

    model, _ = load_model_dir(tiny_model_dir)
    channel = SharedMemoryWeights(torch.multiprocessing.get_context("spawn"))
    channel.create(model)
    channel.publish(model, version=1)
    writing = 1 - channel.latest.value  # the slot the next publish writes
    received = []
    with channel.locks[writing]:  # the trainer is writing version 2 there
        reader = threading.Thread(target=lambda: received.append(channel.receive(model)[0]))
        reader.start()
        reader.join(timeout=10)
        assert not reader.is_alive() and received == [1], "the generator waited on the trainer's write"
    channel.publish(model, version=2)
    assert channel.version.value == 2 and channel.receive(model)[0] == 2


def test_a_shared_memory_too_small_for_the_weight_channel_fails_at_once_naming_its_size(tiny_model_dir,
                                                                                        monkeypatch):
    import collections

    model, _ = load_model_dir(tiny_model_dir)
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr("recipe.engines.pipeline_channel.shutil.disk_usage",
                        lambda path: usage(64 << 20, 64 << 20, 1 << 10))
    channel = SharedMemoryWeights(torch.multiprocessing.get_context("spawn"))
    with pytest.raises(RuntimeError, match=r"PipelineRL needs [\d,]+ MiB of shared memory .* but /dev/shm has 0 MiB "
                                           r"free; enlarge it \(docker run --shm-size"):
        channel.create(model)
    assert channel.tensors is None


def test_an_input_error_in_a_role_stops_the_run_as_an_input_error(tiny_recipe, tmp_path):
    """A role's ConfigError reaches the caller as a ConfigError, not RoleDiedError: the inputs fail the same way
    on every attempt, so a sweep must not retry the job (sweeps.job.INPUT_ERROR). The trigger: a curriculum that
    retires every one of its 4 prompts (threshold 0.01: any correct sample retires one) runs out of prompts."""
    from components.registry import ConfigError

    cfg = tiny_recipe(*pipeline_overrides(2), "curriculum=no_positive_resampling", "curriculum.threshold=0.01",
                      "task.train_size=4", "eval.every_steps=100", run_steps=200)
    with pytest.raises(ConfigError, match=r"^PipelineRL trainer: NoPositiveResamplingCurriculum: no eligible prompt "
                                          r"left in a pool of 4 .* raise task.train_size"):
        train(cfg, tmp_path / "run")

