"""Compute accounting: device-seconds, estimated FLOPs and sample/token counts, logged with every eval point.

device-seconds are the paper's GPU-hours generalised to any machine, measured by one of two clocks,
chosen once when a run starts (clock_for) and kept in its checkpoints:

- "wall" (GPUs and other accelerators, which a job holds whole): device-seconds = wall-clock seconds
  of generation + training x devices the run holds.
- "cpu" (CPU runs): device-seconds = CPU-seconds = the process CPU time (time.process_time(): user +
  system time of every thread of the process, torch's intra-op threads included) spent in generation
  and training. On a shared machine another process stretches the wall-clock of the same work (by
  the load), while its CPU time stays put as long as no thread burns CPU waiting: threads asleep
  cost nothing, but OpenMP threads spin-waiting at a barrier are charged. That is this clock's limit:
  with 2+ torch threads a competing process deschedules one thread while its peer spins (libgomp
  spins ~300k times before sleeping), and CPU-seconds inflate too (6x under a 2-thread competitor;
  BENCHMARKS.md, "The compute axis on a shared CPU"). With one torch thread per job, or
  GOMP_SPINCOUNT=1000 (set before torch loads; ~20% slower alone), they stay within ~10%.

Both clocks are measured around the same phases: in the synchronous loop generation and training take
turns (their sum); under PipelineRL the wall-clock is the trainer loop's, waits included, x the devices
of both roles, while the CPU time is what each role's process spent on its own work (the generator
around each generate call, the trainer around its loop step) summed. Waiting costs no CPU time, so on
CPU PipelineRL's advantage of overlapping the roles no longer shows as fewer device-seconds; it shows
as less wall-clock (compute/wall_seconds, compute/wall_device_seconds). Both are always logged:
compute/device_seconds (the run's clock, what sweeps fit against), compute/cpu_seconds and
compute/wall_device_seconds (= wall x devices). Evaluation time is kept apart and not counted.

FLOPs are estimated per token (Kaplan et al. 2020, C_forward ~ 2 N + 2 n_layer n_ctx d_model with N
the non-embedding parameters); a training token costs 3 forwards (forward + backward). A sweep fits
its curves against one of COMPUTE_AXES, chosen by name.
What the count means: model FLOPs of every sequence processed in full, its prompt included, as an engine
without prefix sharing computes them (TRL's trainer, a plain generate); it depends on the recipe and the
data, never on the engine or the machine. The native engine shares a group's prompt (one prefix for its
G samples) and so computes less than it counts (~0.57x on the testbed: 12-token prompts, G = 8, ~13-token
responses), and a scan of G on the flops axis charges every sample its prompt. Recomputation is not
counted (gradient checkpointing's fourth forward: model FLOPs, not hardware FLOPs), nor is evaluation.
"""

from __future__ import annotations

import dataclasses
import time
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
CLOCKS = ("cpu", "wall")


def clock_for(device: str) -> str:
    """The clock a run on `device` charges: "cpu" on CPU (cores are shared), "wall" on an accelerator (held whole)."""
    return "cpu" if str(device) == "cpu" else "wall"


def clocks() -> tuple[float, float]:
    """(wall, CPU) readings now: time.perf_counter() and time.process_time() (every thread of this process)."""
    return time.perf_counter(), time.process_time()


def since(started: tuple[float, float]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) elapsed since a clocks() reading."""
    wall, cpu = clocks()
    return wall - started[0], cpu - started[1]


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


def training_flops(shape: ModelShape, prompt_lengths, response_lengths) -> float:
    """FLOPs of a training step on these sequences: 3 forward passes' worth (forward + backward)."""
    return 3.0 * shape.forward_flops(*sequence_cost(prompt_lengths, response_lengths))


@dataclass
class ComputeMeter:
    devices: int = 1
    clock: str = "wall"  # what device_seconds charges (CLOCKS); fixed for the life of a run
    wall_seconds: float = 0.0  # generation + training wall-clock (overlapping roles counted once)
    cpu_seconds: float = 0.0  # generation + training process CPU time, summed over the roles' processes
    generation_seconds: float = 0.0  # generator busy time
    training_seconds: float = 0.0
    evaluation_seconds: float = 0.0
    generation_flops: float = 0.0
    training_flops: float = 0.0  # reference_flops included
    reference_flops: float = 0.0  # a KL penalty's reference forwards
    samples: int = 0  # sampled sequences used for training (filtered ones included: they cost generation)
    generated_tokens: int = 0
    trained_tokens: int = 0  # response tokens trained on (forced interruption tokens included: they go through the
    # model, with loss weight 0)

    def __post_init__(self) -> None:
        if self.clock not in CLOCKS:
            raise ValueError(f"compute clock {self.clock!r}: expected one of {', '.join(CLOCKS)}")

    @property
    def wall_device_seconds(self) -> float:
        return self.wall_seconds * self.devices

    @property
    def device_seconds(self) -> float:
        """CPU-seconds under the "cpu" clock, wall-clock x devices under "wall"."""
        return self.cpu_seconds if self.clock == "cpu" else self.wall_device_seconds

    def add_generation(self, seconds: float, shape: ModelShape, prompt_lengths, response_lengths) -> None:
        tokens, context = sequence_cost(prompt_lengths, response_lengths)
        self.generation_seconds += seconds
        self.generation_flops += shape.forward_flops(tokens, context)
        self.samples += len(response_lengths)
        self.generated_tokens += int(sum(response_lengths))

    def add_training(self, seconds: float, shape: ModelShape, prompt_lengths, response_lengths) -> None:
        self.training_seconds += seconds
        self.training_flops += training_flops(shape, prompt_lengths, response_lengths)
        self.trained_tokens += int(sum(response_lengths))

    def add_reference(self, shape: ModelShape, prompt_lengths, response_lengths) -> None:
        """A KL penalty's reference forward over the trained rows: one forward pass, counted in training."""
        flops = shape.forward_flops(*sequence_cost(prompt_lengths, response_lengths))
        self.reference_flops += flops
        self.training_flops += flops

    def metrics(self) -> dict[str, float]:
        return {
            "compute/device_seconds": self.device_seconds,
            "compute/device_hours": self.device_seconds / 3600.0,
            "compute/wall_seconds": self.wall_seconds,
            "compute/wall_device_seconds": self.wall_device_seconds,
            "compute/cpu_seconds": self.cpu_seconds,
            "compute/devices": float(self.devices),
            "compute/generation_seconds": self.generation_seconds,
            "compute/training_seconds": self.training_seconds,
            "compute/evaluation_seconds": self.evaluation_seconds,
            "compute/flops": self.generation_flops + self.training_flops,
            "compute/generation_flops": self.generation_flops,
            "compute/training_flops": self.training_flops,
            "compute/reference_flops": self.reference_flops,
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
        # A checkpoint from before the CPU clock charged wall-clock: its run goes on with it, so one
        # curve never mixes clocks (its cpu_seconds then count only the steps after the resume).
        self.clock = state.get("clock", "wall")
