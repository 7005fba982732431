"""What every native engine shares: the run's state and the building blocks of one RL step.

`Run` loads (or resumes from its checkpoint) everything a run carries between steps: model,
optimizer, components, curriculum, compute meter, random streams, metrics sink. `sample_groups`
samples and scores G responses to P prompts, `assemble_minibatch` filters groups and normalizes
advantages, `train_on` takes one optimizer step and charges its compute. The synchronous loop
(recipe/engines/native.py) and PipelineRL's trainer and generator processes
(recipe/engines/pipeline.py) compose them; neither engine imports the other.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from components import REGISTRIES
from components.advantages import AdvantageNormalization
from components.aggregation import LossAggregation
from components.curricula import Curriculum
from components.filters import BatchFilter
from components.kl import KlPenalty
from components.length_control import LengthControl
from components.losses import PolicyLoss
from components.off_policy import OffPolicyMode
from components.precision import HeadPrecision
from recipe.advantages import filter_and_normalize
from recipe.checkpoint import load_checkpoint, save_checkpoint
from recipe.compute import ComputeMeter, ModelShape, clock_for, clocks, since
from recipe.config import ConfigError, RecipeConfig, load_recipe, resolved_yaml, run_id
from recipe.evaluation import evaluate, score
from recipe.generator import Rollout, TorchGenerator
from recipe.ledger import RunLedger
from recipe.model import load_model_dir
from recipe.mixture import build_run_task, part_pass_rates, reset_curriculum
from recipe.tracking import write_phase, write_text_atomic
from recipe.trainer import TrainBatch, build_optimizer, train_step
from recipe.pretrained import is_pretrained_name, pretrained_dir
from recipe.warm_start import cache_root, warm_start_dir


@dataclass
class Components:
    """One built component per ablation axis, typed by the axis's base class (its registry's `base`)."""

    loss: PolicyLoss
    aggregation: LossAggregation
    advantage_norm: AdvantageNormalization
    batch_filter: BatchFilter
    curriculum: Curriculum
    length_control: LengthControl
    off_policy: OffPolicyMode
    precision: HeadPrecision
    kl_penalty: KlPenalty


def build_components(cfg: RecipeConfig) -> Components:
    return Components(**{axis: REGISTRIES[axis].build(getattr(cfg, axis)) for axis in REGISTRIES})


def reference_model(model):
    """A KL penalty's reference: a frozen copy of the model as it starts the run (its weights, not a graph)."""
    import copy

    reference = copy.deepcopy(model).eval()
    reference.requires_grad_(False)
    return reference


def model_directory(cfg: RecipeConfig, log_every: int = 0, run_dir: Path | None = None) -> Path:
    """The HF directory the run starts from: the cached warm start for "embedded", the cached conversion of a
    named pretrained model (recipe/pretrained.py), else model.path.

    With run_dir, a warm start being built (by this job or another) shows as the run's phase.
    """
    if is_pretrained_name(cfg.model.path):
        return pretrained_dir(cfg.model.path, cache_root(cfg.warm_start))
    if cfg.model.path == "embedded":
        on_progress = None if run_dir is None else lambda done, total: write_phase(run_dir, "warm start", done, total)
        path = warm_start_dir(cfg.model, cfg.warm_start, cfg.task, log_every=log_every, on_progress=on_progress)
        if run_dir is not None:
            write_phase(run_dir, None)
        return path
    return Path(cfg.model.path)


@dataclass
class Samples:
    """P prompts x G sampled responses, scored: what a generator hands to the trainer."""

    prompt_ids: list[int]  # (P,)
    rollout: Rollout  # B = P G rows, prompt i's samples at rows i G .. i G + G - 1
    correct: torch.Tensor  # (B,) bool, on CPU
    rewards: torch.Tensor  # (B,) float, after length control's shaping, on CPU
    seconds: float  # generation wall-clock
    cpu_seconds: float = 0.0  # generation CPU time of the generating process (recipe/compute.py)
    # Dynamic sampling (recipe/dynamic_sampling.py): (prompt, response) lengths of the rows sampled for this
    # minibatch and left out, charged with it; and its rounds' metrics.
    discarded: tuple[list[int], list[int]] = ((), ())
    metrics: dict = dataclasses.field(default_factory=dict)


@dataclass
class Minibatch:
    batch: TrainBatch | None  # None when the filter dropped every group
    metrics: dict[str, float]
    seconds: float  # generation wall-clock, charged when the minibatch is trained on
    prompt_lengths: list[int]
    response_lengths: list[int]
    cpu_seconds: float  # generation CPU time, charged with `seconds`

    def trained_lengths(self) -> tuple[list[int], list[int]]:
        """(prompt lengths, response lengths) of the rows trained on; none when every group was filtered."""
        if self.batch is None:
            return [], []
        kept = self.batch.rollout
        return kept.attention_mask[:, : kept.prompt_width].sum(dim=1).tolist(), kept.lengths.tolist()


def select_rows(rollout: Rollout, rows: torch.Tensor) -> Rollout:
    """The rollout's `rows`, cut to their own width: prompt columns that are padding in every selected row
    and response columns past the longest selected response go, so the trainer never computes them.

    Positions come from the attention mask (recipe.generator.positions_from_mask), so dropping
    all-padding columns leaves every token's position and context as they were.
    """
    picked = {k: (v[rows] if torch.is_tensor(v) else v) for k, v in rollout.__dict__.items()}
    P = rollout.prompt_width
    first = int(picked["attention_mask"][:, :P].any(dim=0).int().argmax())  # first prompt column in use
    T = max(1, int(picked["lengths"].max())) if picked["lengths"].numel() else 1
    for key in ("input_ids", "attention_mask"):
        picked[key] = picked[key][:, first: P + T]
    for key in ("loss_mask", "old_logprobs", "versions"):
        picked[key] = picked[key][:, :T]
    picked["prompt_width"] = P - first
    return Rollout(**picked)


def sample_groups(generator, task, c: Components, cfg: RecipeConfig, prompt_ids: list[int], rngs: dict,
                  policy_version: int, on_decode_step: Callable[[], int] | None = None) -> Samples:
    """Sample G responses to each prompt with the generator's weights of `policy_version` and score them
    (+1 / -1, then shaped)."""
    started = clocks()
    G = cfg.rollout.samples_per_prompt
    problems = [task.train[i] for i in prompt_ids]
    rollout = generator.generate([p.prompt for p in problems for _ in range(G)], precision=c.precision,
                                 length_control=c.length_control, max_new_tokens=cfg.rollout.max_new_tokens,
                                 temperature=cfg.rollout.temperature, torch_rng=rngs["torch"],
                                 numpy_rng=rngs["numpy"], policy_version=policy_version,
                                 on_decode_step=on_decode_step, decode_token_budget=cfg.rollout.decode_token_budget)
    correct = score(task, generator.tokenizer, rollout, [p.answer for p in problems for _ in range(G)],
                    [p.part for p in problems for _ in range(G)]).cpu()
    rewards = c.length_control.shape_rewards(torch.where(correct, 1.0, -1.0), rollout.lengths.cpu(), correct)
    return Samples(list(prompt_ids), rollout, correct, rewards, *since(started))


def sample_round(generator, task, c: Components, cfg: RecipeConfig, orders: list[list[int]], rngs: dict,
                 policy_version: int) -> list[Samples]:
    """The minibatches of one PPO-off-policy round (`orders`: each minibatch's prompt ids), sampled together.

    All of a round's minibatches come from the same frozen weights, so they are sampled in as few
    generate calls as `rollout.rows_per_call` allows (whole minibatches a call): one decode step of
    2,048 rows costs far less than eight of 256 on a CPU, where small ops pay per call. Each
    minibatch is then cut to its own rows and width (select_rows) and charged its share of the
    call's generation time (equal rows, equal share).
    """
    G = cfg.rollout.samples_per_prompt
    per_call = max(1, cfg.rollout.rows_per_call // (cfg.rollout.prompts_per_batch * G))
    round_: list[Samples] = []
    for start in range(0, len(orders), per_call):
        chunk = orders[start: start + per_call]
        together = sample_groups(generator, task, c, cfg, [p for order in chunk for p in order], rngs,
                                 policy_version=policy_version)
        device = together.rollout.input_ids.device
        offset = 0
        for order in chunk:
            rows = torch.arange(offset, offset + len(order) * G)
            offset += len(order) * G
            round_.append(Samples(list(order), select_rows(together.rollout, rows.to(device)), together.correct[rows],
                                  together.rewards[rows], together.seconds / len(chunk),
                                  together.cpu_seconds / len(chunk)))
    return round_


def assemble_minibatch(samples: Samples, c: Components, task=None) -> Minibatch:
    """Filter groups, normalize advantages, feed the pass rates to the curriculum; the rollout metrics (with a
    mixture's `task`, each part's pass rate too)."""
    rollout, correct, rewards = samples.rollout, samples.correct, samples.rewards
    P = len(samples.prompt_ids)
    discarded_prompt, discarded_response = map(list, samples.discarded)
    if not P:  # dynamic sampling found no varied group: nothing to train on, what was sampled still charged
        return Minibatch(None, dict(samples.metrics), samples.seconds, discarded_prompt, discarded_response,
                         cpu_seconds=samples.cpu_seconds)
    G = len(correct) // P
    lengths = rollout.lengths.cpu()
    group_ids = torch.arange(P).repeat_interleave(G)  # (B,) sample i belongs to prompt i // G
    keep, advantages = filter_and_normalize(rewards, group_ids, c.batch_filter, c.advantage_norm)
    c.curriculum.update(samples.prompt_ids, correct.view(P, G).float().mean(dim=1).tolist())

    rows = keep.nonzero().squeeze(-1)
    device = rollout.input_ids.device
    batch = None
    if rows.numel():
        batch = TrainBatch(select_rows(rollout, rows.to(device)), advantages[rows].to(device),
                           group_ids[rows].to(device), version=-1)  # the trainer sets the version when it trains on it
    real_prompt = rollout.attention_mask[:, : rollout.prompt_width].sum(dim=1).cpu()
    metrics = rollout_metrics(correct, rewards, lengths, rollout.truncated.cpu(), rollout.interrupted.cpu(), keep, G)
    if task is not None:
        metrics.update(part_pass_rates(correct, [task.train[i].part for i in samples.prompt_ids], G))
    metrics.update(samples.metrics)
    return Minibatch(batch, metrics, samples.seconds, real_prompt.tolist() + discarded_prompt,
                     lengths.tolist() + discarded_response, cpu_seconds=samples.cpu_seconds)


def rollout_metrics(correct, rewards, lengths, truncated, interrupted, keep, G: int) -> dict[str, float]:
    """The rollout/* metrics of one minibatch of B = P G samples (every engine logs the same keys)."""
    # The paper's truncation rate: samples forcibly stopped, by the interruption or by the length limit.
    forced_stop_frac = float((truncated | interrupted).float().mean())
    # Samples whose reward the length control lowered below the checker's +1 / -1 (the length penalty's bite).
    penalized = rewards < torch.where(correct, 1.0, -1.0)
    return {
        "rollout/pass_rate": float(correct.float().mean()),
        "rollout/reward_mean": float(rewards.mean()),
        "rollout/len_mean": float(lengths.float().mean()),
        "rollout/len_max": float(lengths.max()),
        "rollout/truncated_frac": float(truncated.float().mean()),
        "rollout/interrupted_frac": float(interrupted.float().mean()),
        "rollout/forced_stop_frac": forced_stop_frac,
        "rollout/length_penalized_frac": float(penalized.float().mean()),
        # 1 or 0 per step, so its mean between evaluations is the share of steps with truncation < 5%.
        "rollout/forced_stop_below_5pct": float(forced_stop_frac < 0.05),
        "rollout/kept_group_frac": float(keep.view(-1, G)[:, 0].float().mean()),
        "rollout/kept_sample_frac": float(keep.float().mean()),
    }


def train_on(minibatch: Minibatch, version: int, run: "Run") -> dict[str, float]:
    """One optimizer step at policy `version` on a minibatch (none if every group was filtered); charges its compute."""
    started = time.perf_counter()
    cfg, c, meter = run.cfg, run.c, run.meter
    metrics = dict(minibatch.metrics)
    metrics["train/skipped"] = float(minibatch.batch is None)
    meter.add_generation(minibatch.seconds, run.shape, minibatch.prompt_lengths, minibatch.response_lengths)
    if minibatch.batch is None:
        return metrics
    minibatch.batch.version = version
    metrics.update(train_step(run.model, run.optimizer, run.schedule, minibatch.batch, loss_fn=c.loss,
                              aggregation=c.aggregation, precision=c.precision, temperature=cfg.rollout.temperature,
                              grad_clip=cfg.optimizer.grad_clip, micro_batch_size=cfg.optimizer.micro_batch_size,
                              micro_batch_tokens=cfg.optimizer.micro_batch_tokens,
                              gradient_checkpointing=cfg.optimizer.gradient_checkpointing,
                              staleness_bound=c.off_policy.max_staleness, kl_penalty=c.kl_penalty,
                              reference=run.reference))
    meter.add_training(time.perf_counter() - started, run.shape, *minibatch.trained_lengths())
    if run.reference is not None:
        meter.add_reference(run.shape, *minibatch.trained_lengths())
        if c.kl_penalty.reset_due(version + 1):
            run.reference.load_state_dict(run.model.state_dict())
    return metrics


def prepare_run_dir(cfg: RecipeConfig, run_dir: Path) -> None:
    """Create run_dir with config.yaml; refuse a directory that belongs to a different config.

    Written once, atomically: the ranks of a trl job all call this on one directory, and a reader must never
    see a file another process is writing (or one a killed job left half written)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    config_path = run_dir / "config.yaml"
    text = resolved_yaml(cfg)
    if not config_path.is_file():
        write_text_atomic(config_path, text)
    elif config_path.read_text() != text and not same_run(config_path, cfg):
        raise ValueError(f"{run_dir}: holds a run of a different config (config.yaml differs); "
                         "use another run directory or delete this one")


def same_run(config_path: Path, cfg: RecipeConfig) -> bool:
    """Whether the config.yaml a run was started with describes the run `cfg` is: the same run id.

    The text can differ where the run cannot: a key added to the code since (config.ID_UNCHANGED_AT: at that
    value it computes what the run computed), or a setting outside the id (tracking, the checkpoint's
    clock interval). Read with today's code, the old file gets the new keys' defaults."""
    try:
        return run_id(load_recipe(config_path)) == run_id(cfg)
    except (ConfigError, ValueError, OSError):
        return False


def random_streams(entropy: list[int], device) -> dict:
    """{"torch", "numpy"} generators seeded from one list of integers (numpy's SeedSequence entropy)."""
    torch_seed = int(np.random.SeedSequence(entropy).generate_state(1)[0])
    return {"torch": torch.Generator(device=device).manual_seed(torch_seed), "numpy": np.random.default_rng(entropy)}


def rollout_rngs(cfg: RecipeConfig, device) -> dict:
    """The rollouts' random streams {"torch", "numpy"}: seeded by `seed` for replicate 0 (as every run before
    replicates existed), by (seed, replicate) for the others. The warm start, the prompt order
    (curriculum.reset) and the evaluation's draws do not read these, so a seed's replicates share them."""
    if cfg.replicate == 0:
        return {"torch": torch.Generator(device=device).manual_seed(cfg.seed), "numpy": np.random.default_rng(cfg.seed)}
    return random_streams([cfg.seed, cfg.replicate, 3], device)


def resolve_device(device: str = "auto") -> str:
    """"auto" -> "cuda" where torch sees a GPU, else "cpu"; anything else is checked and returned."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device {device!r}: CUDA is not available on this machine (use cpu or auto)")
    return str(device)


def configure_cuda() -> None:
    """Deterministic options where torch allows them, before the first CUDA call of the process.

    cuBLAS needs a fixed workspace for reproducible matmuls; cuDNN autotuning picks kernels by
    timing, so it is off; ops without a deterministic kernel warn instead of failing (recipe/static_decode.py
    switches them off around its single-index writes, which are deterministic either way). TF32 is left
    to torch's default for the body and disabled explicitly for the fp32 LM head (components/precision.py).
    """
    import os

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    # Deterministic mode also fills every new tensor's memory (a debugging aid against reads of uninitialised
    # memory, which this code never makes): one kernel per allocation, ~830 of a decode step's ~3,900 on an H200.
    torch.utils.deterministic.fill_uninitialized_memory = False


def token_limit(length_control, tokenizer, max_new_tokens: int) -> int:
    """The most tokens a response can hold: max_new_tokens, or an interrupted one's largest thinking budget,
    the phrase and the answer budget when that is more (recipe.generator.RowState.interrupted_width)."""
    if length_control.interruption_phrase is None:
        return max_new_tokens
    phrase = tokenizer.encode(length_control.interruption_phrase, add_special_tokens=False)
    return max(max_new_tokens, length_control.max_thinking + len(phrase) + length_control.answer_budget)


def engine_length(cfg: RecipeConfig, model, tokenizer, task, length_control) -> int:
    """A vLLM engine's max_model_len: the task's longest prompt and the longest response the recipe allows, within
    the model's positions (a sequence that reaches them stops there, truncated)."""
    longest_prompt = max(len(tokenizer(problem.prompt).input_ids) for problem in [*task.train, *task.validation])
    wanted = longest_prompt + token_limit(length_control, tokenizer, cfg.rollout.max_new_tokens)
    return min(wanted, getattr(model.config, "max_position_embeddings", None) or wanted)


def build_generator(cfg: RecipeConfig, model, tokenizer, task, model_dir: Path):
    """rollout.generator's backend serving `model`'s weights: the torch decode loop on the model itself, or an
    in-process vLLM engine (recipe/vllm_generator.py) sized for the task's longest prompt and response."""
    if cfg.rollout.generator == "torch":
        return TorchGenerator(model, tokenizer)
    from recipe.vllm_generator import VllmGenerator, start_engine

    length_control = REGISTRIES["length_control"].build(cfg.length_control)
    engine = start_engine(str(model_dir), device=next(model.parameters()).device, dtype=cfg.model.dtype,
                          fp32_head=bool(cfg.precision["fp32_head"]),
                          max_model_len=engine_length(cfg, model, tokenizer, task, length_control),
                          seed=cfg.seed, cpu_kv_cache_gib=cfg.rollout.vllm_cpu_kv_cache_gib,
                          gpu_memory_utilization=cfg.rollout.vllm_gpu_memory_utilization)
    return VllmGenerator(engine, model, tokenizer)


def evaluation_kwargs(cfg: RecipeConfig, c: Components) -> dict:
    """recipe.evaluation.evaluate's settings for a run: the same in every engine, so curves compare."""
    return dict(precision=c.precision, length_control=c.length_control, eval_cfg=cfg.eval,
                max_new_tokens=cfg.rollout.max_new_tokens, temperature=cfg.rollout.temperature,
                seed=cfg.seed if cfg.eval.seed is None else cfg.eval.seed)


def role_device(device: str, role: str, mode, gpus: int | None = None) -> str:
    """Where a role runs: CPU roles share the machine (their thread counts split the cores); on
    CUDA the trainer takes GPU 0 and the generator the next one when the node has it (GPU 0 too
    on a one-GPU machine: `gpus`, default torch.cuda.device_count()). One GPU per role for now:
    larger roles need data-parallel generation and training."""
    if not str(device).startswith("cuda"):
        return "cpu"
    if mode.generator_devices > 1 or mode.trainer_devices > 1:
        raise ValueError("off_policy.generator_devices / trainer_devices > 1 are CPU cores only for now; "
                         "on CUDA set both to 1 (one GPU per role)")
    if role == "trainer":
        return "cuda:0"
    gpus = torch.cuda.device_count() if gpus is None else gpus
    return "cuda:1" if gpus > 1 else "cuda:0"


def devices_held(cfg: RecipeConfig, device: str, gpus: int | None = None) -> int:
    """The devices a job holds, one rule for every engine and off-policy mode: its wall-clock compute is
    wall-clock x these (README, "Engines"; docs/recipe.md, "Compute and truncation").

    - native, synchronous: one GPU, or its torch threads (cores) on CPU;
    - native, PipelineRL: the distinct GPUs its two roles run on (1 when they share a one-GPU machine), or
      generator_devices + trainer_devices cores on CPU;
    - trl: a GPU per process (engine.num_processes), or each process's torch threads on CPU, plus the
      vLLM server's GPUs with engine.vllm_mode server (engine.vllm_server_devices: they generate for the job;
      colocated vLLM shares the ranks' GPUs). PipelineRL on trl (TRL's async trainer) is the same sum.
    gpus: the machine's GPU count (default torch.cuda.device_count()).
    """
    per_process = torch.get_num_threads() if str(device) == "cpu" else 1
    if cfg.engine.name == "trl":
        server = cfg.engine.vllm_server_devices if cfg.engine.vllm_mode == "server" else 0
        return cfg.engine.num_processes * per_process + server
    mode = REGISTRIES["off_policy"].build(cfg.off_policy)
    if not mode.asynchronous:
        return per_process
    if not str(device).startswith("cuda"):
        return mode.generator_devices + mode.trainer_devices
    return len({role_device(device, role, mode, gpus) for role in ("trainer", "generator")})


class Run:
    """Everything a run carries between steps, loaded from the run directory (resumed from its checkpoint).

    Both native schedules use it: the synchronous loop (recipe/engines/native.py) and the PipelineRL
    trainer process (recipe/engines/pipeline.py). Its bookkeeping (compute, pending metrics, evaluation and
    checkpoint schedules, records) is the run ledger every engine keeps (recipe/ledger.py); the model, the
    optimizer and the random streams are the native engine's own. `extra` holds the checkpoint's
    schedule-specific fields.
    """

    def __init__(self, cfg: RecipeConfig, run_dir: Path, device: str, devices: int) -> None:
        self.cfg, self.run_dir = cfg, Path(run_dir)
        prepare_run_dir(cfg, self.run_dir)
        self.model_dir = model_directory(cfg, log_every=100, run_dir=self.run_dir)
        self.model, self.tokenizer = load_model_dir(self.model_dir, cfg.model.dtype, device)
        self.model.eval()
        self._generator = None
        self.task = build_run_task(cfg.task, self.tokenizer, self.run_dir)
        self.c = build_components(cfg)
        self.optimizer, self.schedule = build_optimizer(self.model, cfg.optimizer)
        reset_curriculum(self.c, self.task, cfg.seed)
        self.shape = ModelShape.of(self.model)
        torch.manual_seed(cfg.seed)
        self.rngs = rollout_rngs(cfg, device)
        self.eval_kwargs = evaluation_kwargs(cfg, self.c)
        self.reference = reference_model(self.model) if self.c.kl_penalty.reference else None
        checkpoint = load_checkpoint(self.run_dir)
        self.resumed = checkpoint is not None
        self.extra: dict = {}
        if checkpoint is not None:
            self.model.load_state_dict(checkpoint["model"])
            self.optimizer.load_state_dict(checkpoint["optimizer"])
            self.schedule.load_state_dict(checkpoint["schedule"])
            self.rngs["torch"].set_state(checkpoint["rng"]["torch"])
            self.rngs["numpy"].bit_generator.state = checkpoint["rng"]["numpy"]
            torch.set_rng_state(checkpoint["rng"]["global"])
            self.extra = checkpoint.get("extra", {})
            if self.reference is not None and "reference" in checkpoint:
                self.reference.load_state_dict(checkpoint["reference"])
        meter = ComputeMeter(devices=devices, clock=clock_for(device))  # a checkpoint's clock replaces it
        self.ledger = RunLedger(cfg, self.run_dir, meter, self.c.curriculum, checkpoint)

    # The ledger's parts, as the engines' loops read them.
    meter = property(lambda self: self.ledger.meter)
    pending = property(lambda self: self.ledger.pending)
    tracker = property(lambda self: self.ledger.tracker)

    @property
    def step(self) -> int:
        return self.ledger.step

    @step.setter
    def step(self, value: int) -> None:
        self.ledger.step = value

    @property
    def generator(self):
        """The rollout's generator over this run's model, built on first use (a vLLM engine takes seconds)."""
        if self._generator is None:
            self._generator = build_generator(self.cfg, self.model, self.tokenizer, self.task, self.model_dir)
        return self._generator

    def evaluate(self) -> dict:
        """Evaluate now, log the record (train metrics since the last one, curriculum, compute) and return it."""
        started = time.perf_counter()
        results = evaluate(self.generator, self.task, step=self.step, policy_version=self.step,
                           compute=self.compute(), **self.eval_kwargs)
        self.meter.evaluation_seconds += time.perf_counter() - started
        return self.ledger.record(self.step, results)

    def compute(self) -> float:
        """The compute spent so far in eval.compute_unit (what places and sizes evaluations by compute)."""
        return self.ledger.compute()

    def eval_due(self) -> bool:
        return self.ledger.eval_due()

    def checkpoint_due(self) -> bool:
        return self.ledger.checkpoint_due()

    def save(self, extra: dict | None = None) -> None:
        ledger = self.ledger.state_dict()
        save_checkpoint(self.run_dir, {
            **ledger, "pending": tuple(ledger["pending"]), "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(), "schedule": self.schedule.state_dict(),
            "rng": {"torch": self.rngs["torch"].get_state(), "numpy": self.rngs["numpy"].bit_generator.state,
                    "global": torch.get_rng_state()},
            "extra": extra or {},
            # A reset reference is a past policy: saved, so a resumed run penalizes toward the same one.
            **({"reference": self.reference.state_dict()} if self.reference is not None
               and self.c.kl_penalty.reset_every else {}),
        })
        self.ledger.checkpointed()
