"""PipelineRL's modeled timing (off_policy.timing: modeled): each role's clock of its own work, in the
generator's FLOPs, so when new weights reach the generator depends on the config and seed, not the machine."""

from __future__ import annotations

from recipe.compute import ModelShape, training_flops
from recipe.engines.pipeline_channel import Channels, RunStopping, wait_get

class ModeledTrainerClock:
    """The trainer's side of modeled timing, in the generator's FLOPs (the generator computes 1 a unit of time).

    Step v starts at max(end of step v - 1, when order v's last group was done) and lasts its training
    FLOPs / trainer_speed; its end is when version v + 1 is published. A run (or a resume) starts at 0.
    """

    def __init__(self, trainer_speed: float, shape: ModelShape) -> None:
        self.speed, self.shape = trainer_speed, shape
        self.end = 0.0  # the end of the last step scheduled (the publication of the weights the run starts from)

    def schedule(self, minibatch, order_done: float) -> tuple[float, float, float]:
        """(the step's modeled end, the modeled time it waited for its groups, its modeled duration)."""
        flops = training_flops(self.shape, *minibatch.trained_lengths())  # 0 when every group was filtered
        waited = max(0.0, order_done - self.end)
        self.end = max(self.end, order_done) + flops / self.speed
        return self.end, waited, flops / self.speed


class ModeledGeneratorClock:
    """The generator's side of modeled timing: its time (the FLOPs it has run) and the trainer's posted ends.

    Versions up to `start_version` are published at time 0 (the run's or the resume's start); version
    v + 1 is published at ends[v], read from the schedule queue in step order as the trainer posts them.
    """

    def __init__(self, shape: ModelShape, channels: Channels, k: int, start_version: int) -> None:
        self.shape, self.channels, self.k, self.start = shape, channels, k, start_version
        self.now = 0.0
        self.ends: dict[int, float] = {}

    def end_of(self, step: int) -> float:
        """The modeled publication of version step + 1; waits for the trainer to post it."""
        while step not in self.ends:
            posted = wait_get(self.channels.schedule, self.channels)
            if posted is None:
                raise RunStopping
            self.ends[posted[0]] = posted[1]
        return self.ends[step]

    def start_order(self, order: int) -> float:
        """Order b is handed out when step b - k - 1 ends (the first k + 1 at the start); the modeled idle time."""
        handed_out = self.end_of(order - self.k - 1) if order - self.k - 1 >= self.start else 0.0
        idle = max(0.0, handed_out - self.now)
        self.now += idle
        return idle

    def due_version(self, loaded: int, order: int) -> int:
        """The newest version published by now: v + 1 once step v ended, for the steps of orders already
        sampled (step `order` trains on the order being sampled: it cannot have ended)."""
        version = loaded
        while version < order and self.end_of(version) <= self.now:
            version += 1
        return version

    def charge(self, tokens: int, context: int) -> None:
        self.now += self.shape.forward_flops(tokens, context)
