"""The trl engine: the recipe -> GRPOConfig mapping, refusals before any job starts, learning, resume after kill -9."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from components.registry import ConfigError
from recipe.config import load_recipe
from recipe.engines import train
from recipe.engines.support import GENERATOR_ROWS, TRL_ENGINE_ROWS, TRL_SUPPORT, TRL_VERIFIED, support_table
from recipe.engines.trl import STATE_NAME, loss_arguments, trl_arguments
from recipe.tracking import read_metrics

# The ScaleRL base with every axis TRL cannot run set to the nearest choice it can (support.py).
TRL_BASE = ["engine.name=trl", "aggregation=token_mean", "curriculum=uniform", "length_control=none",
            "off_policy=ppo_off_policy", "off_policy.k=1"]
# A fast-learning setting of the tiny model, so a rise in pass rate shows within a few dozen steps.
# lr 5e-4 sat at the edge of stability (Intel Xeon: the native engine 0.164 -> 0.305, trl 0.164 -> 0.422
# in 24 steps; AMD EPYC, whose warm start differs by round-off: trl 0.133 -> 0.258 at step 16, then a
# collapse to 0.023 at 32), so round-off decided the test; lr 1e-3 collapses both. At 3e-4 (AMD EPYC):
# trl 0.133 -> 0.422 (step 8) -> 0.602 (24) -> 0.523 (32). Runs take 32 steps for off_policy k 2.
LEARNS = ["optimizer.lr=3e-4", "optimizer.warmup_steps=0", "rollout.prompts_per_batch=8", "eval.num_prompts=32",
          "eval.samples_per_prompt=4"]


def trl_recipe(*overrides):
    return load_recipe(None, [*TRL_BASE, *overrides])


def test_every_recipe_choice_has_a_row_in_the_support_table():
    from components import REGISTRIES

    choices = {(axis, name) for axis, registry in REGISTRIES.items() for name in registry.names()}
    assert choices == set(TRL_SUPPORT)
    table = support_table()
    # header, rule, a row a choice, a row a generator, the engine's settings
    assert table.count("\n") == len(choices) + 1 + len(GENERATOR_ROWS) + len(TRL_ENGINE_ROWS)
    refused = {key for key, support in TRL_SUPPORT.items() if support.kind == "refused"}
    assert set(TRL_VERIFIED) == set(TRL_SUPPORT) - refused  # every runnable row says how far it is proven


@pytest.mark.parametrize("overrides, expected", [
    # CISPO's cap is TRL's epsilon_high; its aggregation is TRL's token mean.
    ([], {"loss_type": "cispo", "epsilon_high": 4.0, "importance_sampling_level": "token"}),
    (["loss=dapo"], {"loss_type": "dapo", "epsilon": 0.2, "epsilon_high": 0.26}),
    (["loss=dapo", "aggregation=sample_mean"], {"loss_type": "grpo", "epsilon": 0.2, "epsilon_high": 0.26}),
    (["loss=grpo", "aggregation=sample_mean"], {"loss_type": "grpo", "epsilon": 0.2, "epsilon_high": 0.2}),
    (["loss=gspo"], {"loss_type": "dapo", "importance_sampling_level": "sequence", "epsilon": 0.004,
                     "epsilon_high": 0.005}),
])
def test_loss_and_aggregation_map_to_trl_settings(overrides, expected):
    arguments = loss_arguments(trl_recipe(*overrides))
    assert {key: arguments[key] for key in expected} == expected


def test_batch_shape_and_off_policy_k_map_to_generation_and_accumulation(tmp_path):
    cfg = trl_recipe("off_policy.k=4", "optimizer.micro_batch_size=64")
    arguments = trl_arguments(cfg, tmp_path, "cpu")
    # 32 prompts x 8 = 256 sequences a step, in 4 micro-batches of 64; 4 optimizer steps per generation.
    assert arguments["num_generations"] == 8 and arguments["per_device_train_batch_size"] == 64
    assert arguments["gradient_accumulation_steps"] == 4 and arguments["steps_per_generation"] == 16
    assert arguments["save_steps"] == 52  # checkpoint.every_steps 50 rounded up to a generation boundary
    assert arguments["scale_rewards"] == "none" and arguments["beta"] == 0.0
    server = trl_arguments(trl_recipe("engine.vllm_mode=server", "engine.vllm_server_url=http://gen:8001",
                                      "engine.vllm_server_devices=1"), tmp_path, "cpu")
    assert server["use_vllm"] and server["vllm_server_base_url"] == "http://gen:8001"


def test_engine_settings_are_checked():
    with pytest.raises(ConfigError, match="engine.name: got 'verl', expected one of native, trl"):
        load_recipe(None, ["engine.name=verl"])
    with pytest.raises(ConfigError, match="engine.num_processes: the native engine runs one process per role"):
        load_recipe(None, ["engine.num_processes=2"])
    with pytest.raises(ConfigError, match="engine.vllm_mode: got 'remote'"):
        trl_recipe("engine.vllm_mode=remote")
    with pytest.raises(ConfigError, match="engine.sharding: got 'zero9', expected one of none, fsdp"):
        trl_recipe("engine.sharding=zero9")
    with pytest.raises(ConfigError, match="engine.sharding: only engine trl shards a model"):
        load_recipe(None, ["engine.sharding=fsdp"])


def test_sharding_on_cpu_is_refused_before_anything_runs(tiny_overrides, tmp_path):
    """accelerate applies FSDP to GPU process groups only: on CPU the job would silently train unsharded."""
    cfg = load_recipe(None, [*tiny_overrides(), *TRL_BASE, "engine.sharding=fsdp"])
    with pytest.raises(ConfigError, match="engine.sharding: fsdp needs CUDA devices .* set engine.sharding none"):
        train(cfg, tmp_path / "run", device="cpu")
    assert not (tmp_path / "run").exists()


def test_the_launch_command_runs_accelerate_by_this_interpreter_on_a_free_port():
    from recipe.engines.launch import SHARDING_FLAGS, free_port, launch_command
    from recipe.run_config import SHARDINGS

    assert tuple(SHARDING_FLAGS) == SHARDINGS
    port = free_port()
    command = launch_command("/runs/a", 2, "fsdp", "bfloat16", port=port)
    assert command[:3] == [sys.executable, "-m", "accelerate.commands.launch"]
    assert command[command.index("--main_process_port") + 1] == str(port) and 1024 <= port < 65536
    assert command[command.index("--mixed_precision") + 1] == "bf16"
    assert "--use_fsdp" in command and command[command.index("--fsdp_version") + 1] == "2"
    assert command[-3:] == ["-m", "recipe.engines.trl", "/runs/a"]
    assert "--multi_gpu" not in command  # accelerate refuses both; FSDP's launcher is torchrun already
    assert "--use_fsdp" not in launch_command("/runs/a", 2) and "--multi_gpu" in launch_command("/runs/a", 2)
    assert "--multi_gpu" not in launch_command("/runs/a", 1)


@pytest.mark.parametrize("overrides", [
    [],  # cispo, token mean, batch normalization, zero-variance filter, fp32 head
    ["loss=dapo"],
    ["loss=gspo", "loss.eps_low=0.2", "loss.eps_high=0.28"],
    ["loss=grpo", "aggregation=sample_mean", "advantage_norm=prompt"],
    ["advantage_norm=none", "batch_filter=none"],
    ["precision.fp32_head=false", "length_control={name: length_penalty, max_length: 12, cache_length: 4}"],
    ["off_policy.k=2"],
    ["aggregation=prompt_mean"],  # ScaleRL's aggregation, through our loss path inside TRL
    # The ScaleRL base but PipelineRL: No-Positive-Resampling and the forced interruption (budgets the tiny
    # model's thinking reaches, so samples are interrupted) through TRL.
    ["aggregation=prompt_mean", "curriculum=no_positive_resampling", "length_control=interruption",
     "length_control.min_thinking=4", "length_control.max_thinking=7"],
    # The same through TRL's colocated vLLM (the CPU build): the interruption samples each row to its own budget.
    ["aggregation=prompt_mean", "curriculum=no_positive_resampling", "length_control=interruption",
     "length_control.min_thinking=4", "length_control.max_thinking=7", "engine.vllm_mode=colocate"],
    # DeepSeek's KL to a reference model TRL keeps, reset to the policy every 8 steps (TRL's sync_ref_model).
    ["loss=grpo", "aggregation=sample_mean", "kl_penalty=reference", "kl_penalty.reset_every=8"],
], ids=["cispo", "dapo", "gspo", "grpo-sample-prompt", "adv-none-filter-none", "bf16-head-length-penalty", "k2",
        "prompt-mean", "scalerl-base", "scalerl-base-vllm-colocate", "grpo-kl-reset"])
def test_each_choice_trl_supports_trains_with_finite_losses_and_a_rising_pass_rate(tiny_learner_dir, tmp_path,
                                                                                    overrides):
    from tests.conftest import tiny_override_list

    from recipe.engines.trl_vllm import RENDEZVOUS_KEYS

    cfg = load_recipe(None, [*tiny_override_list(tiny_learner_dir, 32), *TRL_BASE, *LEARNS, "eval.every_steps=16",
                             *overrides])
    rendezvous = {key: os.environ.get(key) for key in RENDEZVOUS_KEYS}
    records = train(cfg, tmp_path / "run", device="cpu")
    # TRL's colocated engine writes a rendezvous (port 29500) into os.environ; a process this one starts later
    # (a test's subprocess, a job) must not inherit it.
    assert {key: os.environ.get(key) for key in RENDEZVOUS_KEYS} == rendezvous
    assert [r["step"] for r in records] == [0, 16, 32]
    for record in records[1:]:
        assert math.isfinite(record["train/loss"]) and math.isfinite(record["train/grad_norm"])
        assert record["compute/device_seconds"] > 0 and record["compute/tokens"] > 0
    assert records[-1]["compute/device_seconds"] > records[1]["compute/device_seconds"]
    if "kl_penalty=reference" in overrides:  # the penalty is computed and its reference forward charged
        assert records[-1]["train/kl"] > 0 and records[-1]["compute/reference_flops"] > 0
    if "length_control=interruption" in overrides:  # AMD EPYC: ~24% of the samples interrupted
        assert records[-1]["rollout/interrupted_frac"] > 0.05
    # 128 evaluation samples a point: a rise of 0.08 is ~2 binomial standard deviations.
    assert records[-1]["eval/pass_rate"] >= records[0]["eval/pass_rate"] + 0.08, [r["eval/pass_rate"] for r in records]


def test_kill_9_then_the_same_command_resumes_from_trls_checkpoint(tiny_overrides, tmp_path):
    """The meter, the metrics and No-Positive-Resampling's retired prompts come back from TRL's checkpoint."""
    overrides = [*tiny_overrides(run_steps=12), *TRL_BASE, *LEARNS, "eval.every_steps=2", "checkpoint.every_steps=4",
                 "engine.name=trl", "curriculum=no_positive_resampling", "curriculum.threshold=0.5"]
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "sweeps.cli", "train", *overrides, "--run-dir", str(run_dir), "--threads", "1"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    log = tmp_path / "first.log"
    with open(log, "w") as stderr:
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
    deadline = time.time() + 240
    while not list((run_dir / "trl").glob(f"checkpoint-*/{STATE_NAME}")) and process.poll() is None \
            and time.time() < deadline:
        time.sleep(0.05)
    ended = process.poll()
    assert ended is None, f"the job ended (exit {ended}) before the kill: {log.read_text()[-3000:]}"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    killed_at = read_metrics(run_dir)[-1]["step"]
    assert 4 <= killed_at < 12, "the kill should land after the first checkpoint and before the end"
    saved = {int(p.name.split("-")[-1]): set(json.loads((p / STATE_NAME).read_text())["curriculum"]["retired"])
             for p in (run_dir / "trl").glob("checkpoint-*") if (p / STATE_NAME).is_file()}
    resumed_from = max(saved)
    assert saved[resumed_from], "no prompt retired before the kill: the test would not see the set come back"
    finished = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr
    records = read_metrics(run_dir)
    assert [r["step"] for r in records] == list(range(0, 13, 2))  # no gap, no duplicate
    compute = [r["compute/device_seconds"] for r in records]
    assert compute == sorted(compute) and compute[-1] > 0  # the meter came back from the checkpoint
    # Retirement is for good: the resumed run starts from the saved set (a fresh curriculum would shrink it).
    retired = [r["curriculum/retired_frac"] for r in records]
    assert retired == sorted(retired), retired
    final = json.loads((run_dir / "trl" / "checkpoint-12" / STATE_NAME).read_text())["curriculum"]["retired"]
    assert saved[resumed_from] <= set(final)


def test_the_docs_support_table_is_the_one_the_code_enforces():
    page = (Path(__file__).resolve().parents[2] / "docs" / "engines.md").read_text()
    assert support_table() in page  # scripts/docs_support_table.py rewrites it


def test_launched_processes_share_this_processs_threads_unless_omp_num_threads_is_set(monkeypatch):
    """Their CPU threads are the job's compute on CPU, so accelerate's own guess must not decide them."""
    import torch

    from recipe.engines.trl import launch_environment

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    assert launch_environment(1)["OMP_NUM_THREADS"] == "4" and launch_environment(2)["OMP_NUM_THREADS"] == "2"
    assert launch_environment(8)["OMP_NUM_THREADS"] == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert launch_environment(2)["OMP_NUM_THREADS"] == "3"


def test_a_sharded_job_trains_evaluates_and_saves_sharded_checkpoints(tiny_overrides, tmp_path, monkeypatch):
    """engine.sharding fsdp through the job's real launch path (launch_processes: accelerate launch, FSDP2,
    TRL, our evaluation of the sharded model, TRL's sharded checkpoint). accelerate shards on GPUs only, so
    tests/recipe/cpu_fsdp/sitecustomize.py makes it shard this CPU (gloo) process group too."""
    from recipe.engines.trl import LAUNCH_LOG, launch_processes

    repo = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("FORCE_CPU_FSDP", "1")
    monkeypatch.setenv("PYTHONPATH", f"{repo / 'tests' / 'recipe' / 'cpu_fsdp'}{os.pathsep}{repo}")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # one process of one thread: the job holds one CPU core
    cfg = load_recipe(None, [*tiny_overrides(run_steps=4), *TRL_BASE, "model.dtype=bfloat16", "engine.sharding=fsdp",
                             "optimizer.gradient_checkpointing=true"])
    seen = []
    records = launch_processes(cfg, tmp_path / "run", seen.append)
    assert [r["step"] for r in records] == [r["step"] for r in seen] == [0, 4]
    assert 0.0 <= records[-1]["eval/pass_rate"] <= 1.0 and records[-1]["compute/devices"] == 1
    checkpoint = tmp_path / "run" / "trl" / "checkpoint-4"
    assert (checkpoint / "pytorch_model_fsdp_0").is_dir() and (checkpoint / STATE_NAME).is_file()  # sharded save
    assert (tmp_path / "run" / LAUNCH_LOG).is_file()


def test_a_sharded_bf16_body_gets_bf16_embeddings_even_with_trls_tied_fp32_head_hook(tiny_model_dir, tiny_overrides,
                                                                                      tmp_path):
    """TRL's cast_lm_head_to_fp32 on a tied model hooks the embeddings to return their fp32 dtype; under FSDP
    that broke gradient checkpointing's recompute on an H200 (BENCHMARKS.md, "On one GPU").
    embeddings_in_compute_dtype, which train_trl applies to sharded jobs, hands the layers the body's bf16 again."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from recipe.engines.trl import build_trainer, embeddings_in_compute_dtype
    from recipe.model import load_model_dir, save_model_dir
    from recipe.run import build_components
    from recipe.tasks import build_task

    untied, tokenizer = load_model_dir(tiny_model_dir)
    config = AutoConfig.from_pretrained(tiny_model_dir)
    config.tie_word_embeddings = True
    tied = AutoModelForCausalLM.from_config(config)
    tied.load_state_dict({k: v for k, v in untied.state_dict().items() if k != "lm_head.weight"}, strict=False)
    save_model_dir(tied, tokenizer, tmp_path / "tied")
    cfg = load_recipe(None, tiny_overrides(*TRL_BASE, f"model.path={tmp_path / 'tied'}", "model.dtype=bfloat16",
                                           "precision.fp32_head=true"))
    model, tokenizer = load_model_dir(tmp_path / "tied", "bfloat16")
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    build_trainer(cfg, model, tokenizer, build_task(cfg.task, tokenizer), build_components(cfg), tmp_path / "trl",
                  "cpu")
    embeddings = model.get_input_embeddings()
    tokens = torch.tensor([[5, 6, 7]])
    with torch.no_grad():
        assert embeddings.to(torch.bfloat16)(tokens).dtype == torch.float32  # TRL's hook: back to fp32
        embeddings_in_compute_dtype(model)
        assert embeddings(tokens).dtype == torch.bfloat16


def test_a_failed_launch_names_the_exception_a_process_died_of(tmp_path):
    from recipe.engines.trl import first_error

    log = tmp_path / "launch.log"
    log.write_text("[rank0]: Traceback (most recent call last):\n[rank0]:   File \"x.py\", line 1\n"
                   "[rank0]: AttributeError: 'DistributedDataParallel' object has no attribute 'x'\n"
                   "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n")
    assert first_error(log) == "[rank0]: AttributeError: 'DistributedDataParallel' object has no attribute 'x'"
    log.write_text("ValueError: first\nRuntimeError: last\n")
    assert first_error(log) == "RuntimeError: last"
    log.write_text("killed\n")
    assert first_error(log) == "no error line in the log"


def test_a_launched_process_that_dies_of_an_input_error_fails_the_job_as_an_input_error(tiny_overrides, tmp_path,
                                                                                        monkeypatch):
    """A ConfigError in a launched process (a curriculum out of prompts, a damaged file) comes back as a
    ConfigError, which a sweep reports once and does not retry (sweeps/job.py: INPUT_ERROR); any other death
    stays a RuntimeError, which it retries. The launched program is a real process raising the real classes
    inside main's input_errors_reported (a subclass, ParameterError, counts too)."""
    import recipe.engines.trl.processes as trl_processes
    from recipe.engines.trl import INPUT_ERROR_FILE, launch_processes

    repo = str(Path(__file__).resolve().parents[2])
    cfg = load_recipe(None, [*tiny_overrides(run_steps=4), *TRL_BASE])

    def dies_of(statement: str):
        def command(run_dir, *args, **kwargs):
            program = (f"import sys; from pathlib import Path; sys.path.insert(0, {repo!r}); "
                       "from components.registry import ParameterError; "
                       "from recipe.engines.trl import input_errors_reported\n"
                       f"with input_errors_reported(Path({str(run_dir)!r})):\n    {statement}")
            return [sys.executable, "-c", program]
        monkeypatch.setattr(trl_processes, "launch_command", command)

    dies_of("raise ParameterError('curriculum', 'every prompt retired; raise task.train_size')")
    with pytest.raises(ConfigError, match="curriculum: every prompt retired; raise task.train_size"):
        launch_processes(cfg, tmp_path / "run", None)
    dies_of("raise RuntimeError('NCCL timeout')")  # the same run directory: the first attempt's report is not read
    with pytest.raises(RuntimeError, match="NCCL timeout") as raised:
        launch_processes(cfg, tmp_path / "run", None)
    assert not isinstance(raised.value, ConfigError)
    assert not (tmp_path / "run" / INPUT_ERROR_FILE).exists()


def job_processes(run_dir: Path) -> dict[int, str]:
    """{pid: RANK} of the live processes whose command line names run_dir (RANK "" for the launcher)."""
    found = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if str(run_dir) in (proc / "cmdline").read_bytes().decode(errors="replace") \
                    and (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                environ = dict(line.split("=", 1) for line in (proc / "environ").read_bytes().decode(
                    errors="replace").split("\0") if "=" in line)
                found[int(proc.name)] = environ.get("RANK", "")
        except OSError:
            continue
    return found


def test_two_processes_on_cpu_train_as_one_job_a_killed_rank_fails_it_and_the_rerun_resumes(tiny_overrides, tmp_path):
    """engine.num_processes 2 on CPU: torchrun (accelerate --multi_gpu) starts two gloo ranks that train together
    (the started processes carry a flag so they run the job instead of launching it again). kill -9 of rank 1
    after the first checkpoint fails the job with an error and leaves no process; the same command resumes."""
    # 8 steps: the kill lands after the first checkpoint (step 2) with 6 steps to go, room for a slow machine.
    overrides = [*tiny_overrides(run_steps=8), *TRL_BASE, "engine.num_processes=2", "checkpoint.every_steps=2",
                 "eval.every_steps=2"]
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "sweeps.cli", "train", *overrides, "--run-dir", str(run_dir), "--threads", "1"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        deadline = time.time() + 240
        while not list((run_dir / "trl").glob(f"checkpoint-*/{STATE_NAME}")) and process.poll() is None \
                and time.time() < deadline:
            time.sleep(0.05)
        ranks = {rank: pid for pid, rank in job_processes(run_dir).items() if rank}
        assert set(ranks) == {"0", "1"}, ranks
        assert process.poll() is None, "the job ended before the kill"
        os.kill(ranks["1"], signal.SIGKILL)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode != 0 and "exited with" in stderr and "rerun the job to resume" in stderr
    time.sleep(1.0)
    assert not job_processes(run_dir), "a rank outlived the failed job"
    finished = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:]
    records = read_metrics(run_dir)
    assert [r["step"] for r in records] == [0, 2, 4, 6, 8] and {r["engine/processes"] for r in records} == {2}
    # The job is charged for both ranks' rows: 8 steps x 4 prompts x 4 samples, as one process would be.
    assert records[-1]["compute/samples"] == 128 and records[-1]["compute/trained_tokens"] > 0


@pytest.mark.parametrize("loss", ["cispo", "dapo", "grpo", "gspo"])
@pytest.mark.parametrize("aggregation", ["prompt_mean", "sample_mean", "token_mean"])
def test_the_trl_engines_loss_and_gradients_are_the_native_trainers(tiny_model_dir, tiny_overrides, tmp_path, loss,
                                                                    aggregation):
    assert_trl_loss_is_native(tiny_model_dir, tiny_overrides(*TRL_BASE, f"loss={loss}", f"aggregation={aggregation}"),
                              tmp_path)


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_the_trl_engines_kl_penalty_is_the_native_trainers(tiny_model_dir, tiny_overrides, tmp_path, estimator):
    """TRL's reference logprobs through our kl_penalty: the native trainer's loss and gradients, coef x kl_t added."""
    assert_trl_loss_is_native(tiny_model_dir, tiny_overrides(*TRL_BASE, "kl_penalty=reference", "kl_penalty.coef=0.5",
                                                             f"kl_penalty.estimator={estimator}"), tmp_path)


def assert_trl_loss_is_native(tiny_model_dir, overrides, tmp_path):
    """One fixed batch (same weights, tokens, behaviour logprobs, advantages), 2 prompts x 3 samples of unequal
    lengths, one row filtered out: ScaleRLGRPOTrainer._compute_loss (our loss and aggregation components, the
    row weights TRL carries through its shuffle) gives the native trainer's loss and gradients within 1e-6,
    for every loss x aggregation pair. The forward under both is the native one (sequence_logprobs) so the
    comparison is of the loss path we own; TRL's own forward agrees with it to fp32 round-off (checked last)."""
    import torch

    from recipe.engines.trl import build_trainer, row_weights
    from recipe.model import load_model_dir
    from recipe.run import build_components
    from recipe.tasks import build_task
    from recipe.trainer import sequence_logprobs

    cfg = load_recipe(None, overrides)
    model, tokenizer = load_model_dir(tiny_model_dir)
    components = build_components(cfg)
    trainer = build_trainer(cfg, model, tokenizer, build_task(cfg.task, tokenizer), components, tmp_path / "trl", "cpu")
    generator = torch.Generator().manual_seed(0)
    P, T, vocab = 5, 7, len(tokenizer)
    prompt_ids = torch.randint(4, vocab, (2, P), generator=generator).repeat_interleave(3, dim=0)
    completion_ids = torch.randint(4, vocab, (6, T), generator=generator)
    lengths = torch.tensor([7, 3, 5, 0, 6, 2])  # row 3: a filtered sample (its mask zeroed)
    completion_mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    input_ids = torch.cat([prompt_ids, completion_ids], 1)
    attention_mask = torch.cat([torch.ones_like(prompt_ids), completion_mask], 1)
    group_ids = torch.arange(2).repeat_interleave(3)
    advantages = torch.tensor([1.0, -0.5, -0.5, 0.0, 0.7, -0.7])
    with torch.no_grad():  # behaviour logprobs a little off the current policy, so ratios and clips are exercised
        old, _ = sequence_logprobs(model, components.precision, input_ids, attention_mask, P)
    old = old + 0.3 * torch.randn(old.shape, generator=generator)
    reference = old + 0.2 * torch.randn(old.shape, generator=generator)  # a reference's logprobs (kl_penalty only)

    def gradients():
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        return grads

    def native_forward(model, input_ids, attention_mask, logits_to_keep, compute_entropy=False, **_):
        logprobs, entropy = sequence_logprobs(model, components.precision, input_ids, attention_mask,
                                              input_ids.shape[1] - logits_to_keep, with_entropy=True)
        return logprobs, entropy, None

    model.train()
    trl_forward = trainer._get_per_token_logps_and_entropies
    trainer._get_per_token_logps_and_entropies = native_forward
    trainer.recipe_loss_scale = 1  # one process, k 1
    inputs = {"prompt_ids": prompt_ids, "prompt_mask": torch.ones_like(prompt_ids), "completion_ids": completion_ids,
              "completion_mask": completion_mask, "advantages": advantages, "old_per_token_logps": old,
              "recipe_row_weights": row_weights(components.aggregation, lengths, group_ids)}
    if components.kl_penalty.reference:
        assert trainer.beta == cfg.kl_penalty["coef"]  # TRL keeps a reference model and computes its logprobs
        inputs["ref_per_token_logps"] = reference
    trl_loss = trainer._compute_loss(model, inputs)
    trl_loss.backward()
    trl_grads = gradients()

    mask = completion_mask.bool()
    logprobs, _ = sequence_logprobs(model, components.precision, input_ids, attention_mask, P)
    output = components.loss(logprobs, old, advantages[:, None].expand_as(logprobs), mask)
    per_token_loss = output.per_token_loss
    if components.kl_penalty.reference:
        kl = components.kl_penalty.penalty(logprobs, reference)
        per_token_loss = per_token_loss + components.kl_penalty.coef * kl
    native_loss = (components.aggregation.token_weights(mask, group_ids) * per_token_loss).sum()
    native_loss.backward()
    native_grads = gradients()

    trl_loss, native_loss = float(trl_loss.detach()), float(native_loss.detach())
    assert abs(trl_loss - native_loss) <= 1e-6 * abs(native_loss) + 1e-9
    for trl_grad, native_grad in zip(trl_grads, native_grads):
        assert torch.linalg.vector_norm(trl_grad - native_grad) <= 1e-6 * torch.linalg.vector_norm(native_grad) + 1e-9
    with torch.no_grad():  # TRL's own forward (a full forward, not the shared prefix): fp32 round-off apart
        trl_logprobs, _, _ = trl_forward(model, input_ids, attention_mask, T)
    assert (trl_logprobs - logprobs.detach())[mask].abs().max() < 1e-4


def test_each_evaluation_record_holds_its_own_steps_training_metrics(tiny_overrides, tmp_path):
    """TRL logs a step after on_step_end; the record of step s must hold step s's loss, not step s - 1's."""
    cfg = load_recipe(None, [*tiny_overrides(run_steps=2), *TRL_BASE, "eval.every_steps=1"])
    records = train(cfg, tmp_path / "run", device="cpu")
    assert [r["step"] for r in records] == [0, 1, 2]
    assert "train/loss" not in records[0]
    for record in records[1:]:
        assert math.isfinite(record["train/loss"]) and math.isfinite(record["train/grad_norm"])
        assert any(key.startswith("loss/") for key in record)  # our loss component's own metrics


def test_the_trl_engine_places_and_sizes_evaluations_by_compute(tiny_overrides, tmp_path):
    # As the native engine (tests/recipe/test_loop.py): compute in steps here, flops in the sweeps.
    cfg = load_recipe(None, [*tiny_overrides(run_steps=6), *TRL_BASE, "eval.every_steps=2",
                             "eval.points_per_doubling=0", "eval.compute_unit=steps", "eval.schedule_until=3",
                             "eval.at_compute=[3,5]", "eval.late_from=4", "eval.late_samples_per_prompt=3",
                             "eval.samples_per_prompt=2"])
    records = train(cfg, tmp_path / "run", device="cpu")
    assert [r["step"] for r in records] == [0, 2, 3, 5, 6]  # 4 is past schedule_until; 6 the run's end
    assert [r["eval/samples_per_prompt"] for r in records] == [2, 2, 2, 3, 3]


def test_a_slow_trl_run_checkpoints_by_the_clock_between_step_checkpoints(tiny_overrides, tmp_path):
    # save_steps far away (1,000), every_minutes ~0: every step (k = 1) is past the wall-clock interval.
    cfg = load_recipe(None, [*tiny_overrides(run_steps=3), *TRL_BASE, "checkpoint.every_steps=1000",
                             "checkpoint.every_minutes=1e-9"])
    train(cfg, tmp_path / "run", device="cpu")
    saved = sorted(int(p.name.split("-")[-1]) for p in (tmp_path / "run" / "trl").glob("checkpoint-*"))
    assert saved == [2, 3]  # one a step, the oldest removed by save_total_limit 2


def test_the_interruption_point_is_the_native_generators_rule():
    from recipe.engines.trl import interruption_point

    close, eos = [7, 8], {2}
    assert interruption_point([5, 5, 5, 5], 3, close, eos) == 3  # thought for its budget: cut there
    assert interruption_point([5, 7, 8, 5], 3, close, eos) is None  # closed </think> within the budget
    assert interruption_point([5, 5, 7, 8], 3, close, eos) == 3  # closed one token too late
    assert interruption_point([5, 2], 3, close, eos) is None  # ended within the budget
    assert interruption_point([5, 5, 5, 2], 3, close, eos) == 3  # ended after it: the native one never got there


def test_interruption_on_trl_gives_the_native_generators_samples_token_for_token(tiny_model_dir, tiny_overrides,
                                                                                  tmp_path, monkeypatch):
    """Greedy decoding, the same thinking budgets: TRL's generation path with interrupting_rollout gives the
    native generator's responses token for token, the forced phrase masked (env_mask 0) where the native
    loss mask is 0, and the same interrupted flags; so the rollout metrics are the native ones."""
    import numpy as np
    import torch

    from components.length_control import InterruptionLengthControl
    from recipe.engines.trl import build_trainer, interrupting_rollout
    from recipe.generator import generate
    from recipe.model import load_model_dir
    from recipe.run import build_components
    from recipe.tasks import build_task

    cfg = load_recipe(None, tiny_overrides(*TRL_BASE, "length_control=interruption", "length_control.min_thinking=2",
                                           "length_control.max_thinking=12", "length_control.answer_budget=4"))
    model, tokenizer = load_model_dir(tiny_model_dir)
    model.eval()
    components = build_components(cfg)
    task = build_task(cfg.task, tokenizer)
    trainer = build_trainer(cfg, model, tokenizer, task, components, tmp_path / "trl", "cpu")
    trainer.generation_config.do_sample = False
    prompts = [task.train[i].prompt for i in range(8) for _ in range(2)]
    budgets = np.array([2, 12, 3, 12, 4, 12, 5, 12, 6, 12, 2, 12, 3, 12, 4, 12])
    monkeypatch.setattr(InterruptionLengthControl, "thinking_budgets", lambda self, n, rng: budgets[:n])

    output = interrupting_rollout(prompts, trainer)
    with torch.no_grad():
        native = generate(model, tokenizer, prompts, precision=components.precision,
                          length_control=components.length_control, max_new_tokens=cfg.rollout.max_new_tokens,
                          greedy=True, numpy_rng=np.random.default_rng(0))
    assert output["interrupted"] == native.interrupted.tolist() and any(output["interrupted"])
    assert not all(output["interrupted"])
    for row, (ids, mask) in enumerate(zip(output["completion_ids"], output["env_mask"])):
        length = int(native.lengths[row])
        assert ids == native.response_ids[row, :length].tolist(), row
        assert mask == native.loss_mask[row, :length].long().tolist(), row


def test_one_step_of_two_processes_on_half_the_batch_each_is_one_step_of_one_process_on_all_of_it(tiny_model_dir,
                                                                                                  tmp_path):
    """The trl engine's loss scale (x processes) and the row weights over every rank's rows make DDP's average
    of 2 gloo ranks' gradients (each on half of a fixed batch) the gradients of 1 process on the whole batch."""
    import torch

    from recipe.engines.launch import free_port

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    script = ["-m", "tests.recipe.trl_one_step", str(tiny_model_dir)]
    one = subprocess.run([sys.executable, *script, str(tmp_path / "one.pt")], env=env, capture_output=True,
                         text=True, timeout=300)
    assert one.returncode == 0, one.stderr[-3000:]
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
              "--num_machines", "1", "--main_process_port", str(free_port()), "--mixed_precision", "no",
              "--dynamo_backend", "no"]
    two = subprocess.run([*launch, *script, str(tmp_path / "two.pt")], env=env, capture_output=True, text=True,
                         timeout=300)
    assert two.returncode == 0, two.stderr[-3000:]
    whole, halves = torch.load(tmp_path / "one.pt"), torch.load(tmp_path / "two.pt")
    assert whole.keys() == halves.keys()
    total = torch.sqrt(sum(torch.sum(g * g) for g in whole.values()))
    assert total > 0
    for name, grad in whole.items():
        assert torch.linalg.vector_norm(halves[name] - grad) <= 1e-5 * total, name


# PipelineRL-k on trl: TRL's AsyncGRPOTrainer, with the choices it computes itself (support.ASYNC_GRPO_CHOICES).
ASYNC_BASE = ["engine.name=trl", "off_policy=pipeline_rl", "off_policy.k=4", "engine.vllm_mode=server",
              "engine.vllm_server_url=http://gen-node:8000", "engine.vllm_server_devices=1", "loss=dapo",
              "aggregation=token_mean",
              "advantage_norm=prompt", "batch_filter=none", "curriculum=uniform", "length_control=none"]


def test_pipeline_rl_on_trl_maps_to_trls_async_grpo_trainer_with_staleness_k(tmp_path):
    from trl.experimental.async_grpo import AsyncGRPOConfig

    from recipe.engines.trl import async_grpo_arguments

    cfg = load_recipe(None, ASYNC_BASE)
    config = AsyncGRPOConfig(**async_grpo_arguments(cfg, tmp_path))
    assert config.max_staleness == 4 and config.weight_sync_steps == 1  # PipelineRL-4: in-flight updates each step
    assert config.vllm_server_base_url == "http://gen-node:8000"
    assert (config.epsilon, config.epsilon_high) == (cfg.loss["eps_low"], cfg.loss["eps_high"])
    assert config.num_generations == cfg.rollout.samples_per_prompt
    assert config.per_device_train_batch_size * config.gradient_accumulation_steps == \
        cfg.rollout.prompts_per_batch * cfg.rollout.samples_per_prompt


@pytest.mark.parametrize("overrides, message", [
    (["engine.vllm_mode=null"], "off_policy: pipeline_rl on engine trl runs TRL's AsyncGRPOTrainer, which generates "
                                "on a vLLM server: set engine.vllm_mode server and engine.vllm_server_url"),
    (["loss=cispo"], "loss: cispo with off_policy pipeline_rl cannot run on engine trl .* set loss dapo or grpo"),
    (["aggregation=prompt_mean"], "aggregation: prompt_mean with off_policy pipeline_rl .* set aggregation token_mean"),
    (["curriculum=no_positive_resampling"], "curriculum: no_positive_resampling with off_policy pipeline_rl"),
    (["length_control=interruption"], "length_control: interruption with off_policy pipeline_rl"),
    (["model.dtype=bfloat16", "precision.fp32_head=true"], "precision: fp32_head true with off_policy pipeline_rl"),
    (["engine.vllm_server_url=gen-node:8000"], "engine.vllm_server_url: got 'gen-node:8000', expected the vLLM "
                                               "server's base URL, e.g. http://localhost:8000"),
    (["engine.vllm_server_devices=0"], "engine.vllm_server_devices: got 0 with engine.vllm_mode server; set it to the "
                                       "GPUs your vLLM server runs on"),
    (["engine.vllm_server_devices=-1"], "engine.vllm_server_devices"),
])
def test_pipeline_rl_on_trl_refuses_what_trls_async_trainer_cannot_do_in_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message) as error:
        load_recipe(None, [*ASYNC_BASE, *overrides])
    assert "\n" not in str(error.value)


def test_pipeline_rl_on_trl_on_cpu_is_refused_before_anything_runs(tiny_overrides, tmp_path):
    cfg = load_recipe(None, tiny_overrides(*ASYNC_BASE))
    with pytest.raises(ConfigError, match="needs CUDA GPUs .* and a vLLM server, and this job runs on cpu"):
        train(cfg, tmp_path / "run", device="cpu")
    assert not (tmp_path / "run").exists()


def test_the_generation_layout_gives_each_process_its_share_of_minibatch_j_for_step_j():
    from recipe.engines.trl import generation_layout

    # k 2 minibatches of P 2 prompts x G 2 samples over 2 processes: process 0 holds the first half of each.
    assert generation_layout(2, 2, 2, 2).tolist() == [0, 1, 4, 5, 2, 3, 6, 7]
    assert generation_layout(3, 2, 2, 1).tolist() == list(range(12))


def test_step_j_of_a_generation_trains_minibatch_j_its_own_advantages_and_weights(tiny_model_dir, tiny_overrides,
                                                                                  tmp_path):
    """PPO-off-policy-k through TRL: the k buffered minibatches are the curriculum's k draws in order (no shuffle),
    each normalized and weighed on its own as the native engine's assemble_minibatch does."""
    import torch

    from components.curricula import CURRICULA
    from recipe.advantages import filter_and_normalize
    from recipe.engines.trl import build_trainer, row_weights
    from recipe.model import load_model_dir
    from recipe.run import build_components
    from recipe.tasks import build_task

    cfg = load_recipe(None, tiny_overrides(*TRL_BASE, "off_policy.k=3", "aggregation=prompt_mean",
                                           "advantage_norm=batch"))
    model, tokenizer = load_model_dir(tiny_model_dir)
    components = build_components(cfg)
    task = build_task(cfg.task, tokenizer)
    trainer = build_trainer(cfg, model, tokenizer, task, components, tmp_path / "trl", "cpu")
    P, G, k = cfg.rollout.prompts_per_batch, cfg.rollout.samples_per_prompt, 3
    expected = CURRICULA.build(cfg.curriculum)
    expected.reset(len(task.train), cfg.seed)
    orders = [expected.sample(P) for _ in range(k)]
    model.train()
    trainer._prepare_inputs([{"prompt": "", "answer": ""}] * (k * P * G))
    record = trainer.recipe_rewards.last
    for j, minibatch in enumerate(trainer._buffered_inputs):
        prompts = tokenizer.batch_decode(minibatch["prompt_ids"], skip_special_tokens=True)
        assert prompts == [task.train[i].prompt for i in orders[j] for _ in range(G)], j
        rows = slice(j * P * G, (j + 1) * P * G)
        keep, advantages = filter_and_normalize(record["rewards"][rows], torch.arange(P * G) // G,
                                                components.batch_filter, components.advantage_norm)
        assert torch.allclose(minibatch["advantages"], advantages)
        trained = (minibatch["completion_mask"] * minibatch.get("tool_mask", 1)).sum(dim=1)
        weights = row_weights(components.aggregation, trained, torch.arange(P * G) // G)
        assert torch.allclose(minibatch["recipe_row_weights"], weights)
        assert abs(float((weights * trained).sum()) - 1) < 1e-5  # the step's tokens weigh 1 in all, as native


@pytest.mark.parametrize("overrides, message", [
    (["engine.name=trl", "off_policy=ppo_off_policy", "rollout.decode_token_budget=4096"],
     "rollout.decode_token_budget: 4096 cannot run on engine trl \\(TRL generates the rollouts itself\\); set it to 0"),
    (["rollout.decode_token_budget=-1"], "rollout.decode_token_budget: got -1"),
    (["eval.decode_token_budget=1.5"], "eval.decode_token_budget"),
])
def test_a_bad_decode_token_budget_is_refused_in_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message) as error:
        load_recipe(None, overrides)
    assert "\n" not in str(error.value)


def test_launched_processes_end_their_session_once_the_job_process_that_started_them_is_gone():
    # A launched rank watches the job process (SCALERL_TRL_SUPERVISOR); here a sleeping process stands in for
    # the job and a second one, in a session of its own as accelerate's launch is, runs the real watcher.
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    rank = subprocess.Popen([sys.executable, "-c", "import time\n"
                             "from recipe.engines.trl import watch_supervisor\n"
                             f"watch_supervisor({job.pid}, poll_seconds=0.1)\n"
                             "print('watching', flush=True)\n"
                             "time.sleep(120)"],
                            start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        assert rank.stdout.readline().strip() == "watching"
        time.sleep(0.5)
        assert rank.poll() is None  # the job is alive: the rank trains on
        job.kill()
        job.wait()
        assert rank.wait(timeout=10) == -signal.SIGTERM
    finally:
        for process in (job, rank):
            if process.poll() is None:
                process.kill()


def test_resume_skips_a_checkpoint_whose_state_file_a_kill_left_empty_or_torn(tmp_path):
    from recipe.engines.trl import STATE_NAME, newest_checkpoint

    for step, text in ((10, '{"step": 10}'), (20, '{"step": 20}'), (30, ""), (40, '{"step": 4')):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / STATE_NAME).write_text(text)
    (tmp_path / "checkpoint-50").mkdir()  # the trainer's own save, killed before our state file
    assert newest_checkpoint(tmp_path) == tmp_path / "checkpoint-20"


def test_a_mixture_trains_on_trl_with_each_parts_reward_and_the_native_evaluation(tiny_overrides, tmp_path):
    """The same keys as the native engine (tests/recipe/test_mixture.py): one evaluation, one partwise curriculum."""
    from tests.recipe.test_mixture import DOWNSTREAM, PARTS

    cfg = load_recipe(None, [*tiny_overrides(run_steps=2), *TRL_BASE, PARTS, DOWNSTREAM, "eval.every_steps=1"])
    records = train(cfg, tmp_path / "run", device="cpu")
    assert [r["step"] for r in records] == [0, 1, 2]
    for record in records:
        assert {"eval/pass_rate/all", "eval/pass_rate/wide", "eval/pass_rate/held"} <= set(record)
        assert record["eval/pass_rate"] == pytest.approx(0.25 * record["eval/pass_rate/all"]
                                                         + 0.75 * record["eval/pass_rate/wide"])
    assert all("rollout/pass_rate/all" in r and "rollout/pass_rate/wide" in r for r in records[1:])
