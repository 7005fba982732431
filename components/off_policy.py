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

    Args:
        k: the largest staleness in trainer steps, in [1, 1024] (default 8, ScaleRL's).
        generator_devices: devices of the generator, in [1, 1024] (default 1).
        trainer_devices: devices of the trainer, in [1, 1024] (default 1).
    """

    asynchronous = True

    def __init__(self, k: int = 8, generator_devices: int = 1, trainer_devices: int = 1) -> None:
        require(1 <= k <= MAX_K, "k", k, f"in [1, {MAX_K}] trainer steps of allowed lag")
        for name, devices in (("generator_devices", generator_devices), ("trainer_devices", trainer_devices)):
            require(1 <= devices <= MAX_K, name, devices, f"in [1, {MAX_K}] devices (cores or GPUs)")
        self.k = k
        self.generator_devices = generator_devices
        self.trainer_devices = trainer_devices

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
