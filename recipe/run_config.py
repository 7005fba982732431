"""Typed settings of a training run that are not ablation axes: model, task, rollout, optimizer,
evaluation, checkpointing, tracking. Frozen dataclasses, torch-free (the sweep planner imports them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class ModelConfig:
    # "embedded" builds the tiny testbed model; anything else is a Hugging Face model directory.
    path: str = "embedded"
    # Parameter/compute dtype of the model body; the LM head dtype is the `precision` axis.
    dtype: str = "float32"


@dataclass(frozen=True)
class TaskConfig:
    # "embedded" is the synthetic task with a thinking trace; "jsonl" reads `prompt`/`answer` rows.
    name: str = "embedded"
    train_path: Optional[str] = None
    validation_path: Optional[str] = None


@dataclass(frozen=True)
class RolloutConfig:
    prompts_per_batch: int = 32
    samples_per_prompt: int = 8
    temperature: float = 1.0
    max_new_tokens: int = 64


@dataclass(frozen=True)
class OptimizerConfig:
    # AdamW as in the paper (lr 5e-7 for an 8B model; the tiny testbed needs a far larger rate).
    lr: float = 1e-4
    warmup_steps: int = 10
    weight_decay: float = 0.01
    eps: float = 1e-15
    beta1: float = 0.9
    beta2: float = 0.999
    grad_clip: float = 1.0


@dataclass(frozen=True)
class EvalConfig:
    every_steps: int = 10
    num_prompts: int = 256
    samples_per_prompt: int = 4


@dataclass(frozen=True)
class CheckpointConfig:
    every_steps: int = 50


@dataclass(frozen=True)
class TrackingConfig:
    # None: MLFLOW_TRACKING_URI if set, else a SQLite store beside the run directory.
    mlflow_uri: Optional[str] = None
    experiment: str = "scalerl-sweep"
