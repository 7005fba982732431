"""Off-policy modes: how generation and training are interleaved, and how stale data may be.

A mode is a schedule description the training loop executes. Staleness of a token is counted in
trainer steps: the trainer's policy version minus the version of the weights that sampled it.
"""

from __future__ import annotations

from components.registry import Registry, require


class OffPolicyMode:
    """Base of the `off_policy` axis."""

    k: int
    # True: generators and trainer run concurrently (the loop must host both roles).
    asynchronous: bool = False

    @property
    def max_staleness(self) -> int:
        raise NotImplementedError


OFF_POLICY_MODES: Registry[OffPolicyMode] = Registry("off_policy", OffPolicyMode)


# The largest k either mode takes: a PPO round holds k minibatches of rollouts in memory at once, and
# the paper's k is 8 (staleness beyond a few hundred steps trains on another policy's data).
MAX_K = 1024


@OFF_POLICY_MODES.register("pipeline_rl")
class PipelineRlMode(OffPolicyMode):
    """Generators never stop; new weights reach them after every trainer step, mid-sequence (PipelineRL-k).

    No token is trained on more than k versions after the weights that sampled it: staleness <= k.
    The generator and the trainer each hold their own devices (cores on CPU, GPUs on a node):
    generator_devices + trainer_devices in all.

    Which decode step a new version reaches depends on the two roles' relative speed. With timing "real"
    it is whenever the weights arrive, so a run depends on the machine's timing and does not repeat. With
    timing "modeled" both roles keep a clock of their own work instead: the generator's time is the FLOPs
    of the forward passes it has run, the trainer's the FLOPs of its steps / trainer_speed (recipe.compute's
    count for both), and the generator takes version v + 1 at the first decode step of its time past the
    trainer's modeled end of step v (waiting for it if the real trainer is behind). That is PipelineRL on a
    machine whose trainer computes trainer_speed x the generator's FLOPs a second: a run is a function of
    its config and seed, the same on any machine and under any load (recipe/engines/pipeline.py).

    Args:
        k: the largest staleness in trainer steps, in [1, 1024] (default 8, ScaleRL's).
        generator_devices: devices of the generator, in [1, 1024] (default 1).
        trainer_devices: devices of the trainer, in [1, 1024] (default 1).
        timing: "real" (default) or "modeled": when new weights reach the generator (above).
        trainer_speed: with timing "modeled", the trainer's FLOPs a second over the generator's, in
            (0, 1000] (default 3.4, near one core each on the 2-core testbed, whose trainer is the slower
            role with real timing too: at 3.4 the modeled trainer is the bottleneck, so tokens arrive ~k
            versions old once the pipeline has filled; BENCHMARKS.md, "PipelineRL's modeled timing").
    """

    asynchronous = True
    TIMINGS = ("real", "modeled")

    def __init__(self, k: int = 8, generator_devices: int = 1, trainer_devices: int = 1, timing: str = "real",
                 trainer_speed: float = 3.4) -> None:
        require(1 <= k <= MAX_K, "k", k, f"in [1, {MAX_K}] trainer steps of allowed lag")
        for name, devices in (("generator_devices", generator_devices), ("trainer_devices", trainer_devices)):
            require(1 <= devices <= MAX_K, name, devices, f"in [1, {MAX_K}] devices (cores or GPUs)")
        require(timing in self.TIMINGS, "timing", timing, " or ".join(repr(t) for t in self.TIMINGS))
        require(0 < trainer_speed <= 1000, "trainer_speed", trainer_speed,
                "in (0, 1000]: the trainer's FLOPs a second over the generator's")
        self.k = k
        self.generator_devices = generator_devices
        self.trainer_devices = trainer_devices
        self.timing = timing
        self.trainer_speed = float(trainer_speed)

    @property
    def modeled(self) -> bool:
        return self.timing == "modeled"

    @property
    def max_staleness(self) -> int:
        return self.k


@OFF_POLICY_MODES.register("ppo_off_policy")
class PpoOffPolicyMode(OffPolicyMode):
    """Generate k minibatches with frozen weights, then take k optimizer steps on them; repeat.

    The j-th step (j = 0..k-1) trains on data j versions old: staleness <= k - 1; k = 1 is on-policy.

    Args:
        k: minibatches per generation round, in [1, 1024] (default 8); a round holds all k in memory.
    """

    def __init__(self, k: int = 8) -> None:
        require(1 <= k <= MAX_K, "k", k, f"in [1, {MAX_K}] minibatches per generation round (a round holds all k)")
        self.k = k

    @property
    def max_staleness(self) -> int:
        return self.k - 1
