"""Compute accounting: device-seconds, estimated FLOPs and sample/token counts, logged with every eval point.

device-seconds = wall-clock seconds of the run x devices it holds: the paper's GPU-hours generalised
to any machine. A device is a core on CPU (the torch threads of a process) and an accelerator
otherwise. The wall-clock is that of generation + training: in the synchronous loop the two take
turns (their sum); under PipelineRL they overlap and the trainer's loop wall-clock counts, waits
included, with the devices of both roles. Evaluation time is kept apart and not counted. FLOPs are estimated
per token (Kaplan et al. 2020, C_forward ~ 2 N + 2 n_layer n_ctx d_model with N the non-embedding
parameters); a training token costs 3 forwards (forward + backward). A sweep fits its curves against
one of COMPUTE_AXES, chosen by name.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

# Name a sweep passes to the fitter -> metric key in metrics.jsonl / MLflow.
COMPUTE_AXES = {
    "device_hours": "compute/device_hours",
    "device_seconds": "compute/device_seconds",
    "flops": "compute/flops",
    "samples": "compute/samples",
    "tokens": "compute/tokens",
    "steps": "step",
}


@dataclass(frozen=True)
class ModelShape:
    params: int  # non-embedding parameters (the LM head counts: it is a matmul per token)
    layers: int
    width: int

    @classmethod
    def of(cls, model) -> "ModelShape":
        from recipe.model import count_parameters

        config = model.config
        return cls(count_parameters(model), config.num_hidden_layers, config.hidden_size)

    def forward_flops(self, tokens: float, context_tokens_sum: float) -> float:
        """Forward FLOPs of `tokens` tokens whose attention contexts sum to `context_tokens_sum`."""
        return 2.0 * self.params * tokens + 2.0 * self.layers * self.width * context_tokens_sum


def sequence_cost(prompt_lengths, response_lengths) -> tuple[float, float]:
    """(tokens, summed attention context) of sequences, each token attending to all before it."""
    tokens = context = 0.0
    for p, r in zip(prompt_lengths, response_lengths):
        n = p + r
        tokens += n
        context += n * (n + 1) / 2
    return tokens, context


@dataclass
class ComputeMeter:
    devices: int = 1
    wall_seconds: float = 0.0  # generation + training wall-clock (overlapping roles counted once)
    generation_seconds: float = 0.0  # generator busy time
    training_seconds: float = 0.0
    evaluation_seconds: float = 0.0
    generation_flops: float = 0.0
    training_flops: float = 0.0
    samples: int = 0  # sampled sequences used for training (filtered ones included: they cost generation)
    generated_tokens: int = 0
    trained_tokens: int = 0  # response tokens in the loss

    @property
    def device_seconds(self) -> float:
        return self.wall_seconds * self.devices

    def add_generation(self, seconds: float, shape: ModelShape, prompt_lengths, response_lengths) -> None:
        tokens, context = sequence_cost(prompt_lengths, response_lengths)
        self.generation_seconds += seconds
        self.generation_flops += shape.forward_flops(tokens, context)
        self.samples += len(response_lengths)
        self.generated_tokens += int(sum(response_lengths))

    def add_training(self, seconds: float, shape: ModelShape, prompt_lengths, response_lengths) -> None:
        tokens, context = sequence_cost(prompt_lengths, response_lengths)
        self.training_seconds += seconds
        self.training_flops += 3.0 * shape.forward_flops(tokens, context)
        self.trained_tokens += int(sum(response_lengths))

    def metrics(self) -> dict[str, float]:
        return {
            "compute/device_seconds": self.device_seconds,
            "compute/device_hours": self.device_seconds / 3600.0,
            "compute/wall_seconds": self.wall_seconds,
            "compute/devices": float(self.devices),
            "compute/generation_seconds": self.generation_seconds,
            "compute/training_seconds": self.training_seconds,
            "compute/evaluation_seconds": self.evaluation_seconds,
            "compute/flops": self.generation_flops + self.training_flops,
            "compute/generation_flops": self.generation_flops,
            "compute/training_flops": self.training_flops,
            "compute/samples": float(self.samples),
            "compute/tokens": float(self.generated_tokens),
            "compute/trained_tokens": float(self.trained_tokens),
        }

    def state_dict(self) -> dict:
        return dataclasses.asdict(self)

    def load_state_dict(self, state: dict) -> None:
        for key, value in state.items():
            setattr(self, key, value)
        if "wall_seconds" not in state:  # checkpoints from before the wall-clock field: roles took turns
            self.wall_seconds = self.generation_seconds + self.training_seconds
