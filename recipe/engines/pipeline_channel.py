"""PipelineRL's channels between its processes: the double-buffered weights in shared memory, the queues and
flags the supervisor hands both roles, and the waits that give up when the run stops or the supervisor dies."""

from __future__ import annotations

import os
import queue
import shutil
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from recipe.model import lm_parts

POLL_SECONDS = 0.2  # how often a waiting role checks that the others are still there
MODELED_POLL_SECONDS = 0.001  # how often a role waiting on the other's real progress (modeled timing) looks
SHM_DIR = "/dev/shm"  # where torch's CPU shared memory lives (shm_open) on Linux


def publish_dtypes(model) -> dict[str, torch.dtype]:
    """The dtype each weight is published in: the body's Linear weights and biases in the compute dtype
    (bf16 for a bf16 recipe), everything else (embeddings, norms, the output head) as it is.

    Under the generator's autocast a Linear layer multiplies in the compute dtype, rounding its fp32
    weights to it at every call, so publishing them already rounded changes no generated token and
    halves the bytes of most of the model; embeddings, norms and the head (the FP32 head) compute in
    fp32 and keep their fp32 values. A float32 recipe publishes everything in fp32, as before.
    """
    parts = lm_parts(model)
    head = {id(p) for p in parts.head.parameters()}
    rounded = {id(p) for module in parts.body.modules() if isinstance(module, torch.nn.Linear)
               for p in module.parameters(recurse=False) if id(p) not in head}
    named = dict(model.named_parameters(remove_duplicate=False))
    return {name: parts.compute_dtype if name in named and id(named[name]) in rounded and tensor.is_floating_point()
            else tensor.dtype for name, tensor in model.state_dict().items()}


def hold_in_publish_dtypes(model) -> None:
    """Keep each of the generator's weights in the dtype it is published in (publish_dtypes): a bf16 recipe's
    body Linear weights in bf16, half their fp32 bytes, and no decode step casts them again. The generator
    decodes under the same autocast, which multiplies in bf16 either way, so its tokens and logprobs are
    unchanged bit for bit; the head keeps its fp32 weight for the FP32 head."""
    dtypes = publish_dtypes(model)
    for name, parameter in model.named_parameters():
        if dtypes.get(name, parameter.dtype) != parameter.dtype:
            parameter.data = parameter.data.to(dtypes[name])


def distinct_state(model) -> dict[str, torch.Tensor]:
    """The model's state dict with each tensor once: tied weights (a head tied to the embeddings) share their
    storage and are published and received under their first name."""
    seen, distinct = set(), {}
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            distinct[name] = tensor
    return distinct


def check_shm_space(needed: int, directory: str = SHM_DIR) -> None:
    """Fail before allocating when the weight channel would not fit in shared memory (a container's default
    /dev/shm is 64 MB: torch would die later with a bus error or 'No space left on device')."""
    if not os.path.isdir(directory):
        return
    free = shutil.disk_usage(directory).free
    if needed > free:
        raise RuntimeError(f"PipelineRL needs {needed / 2**20:,.0f} MiB of shared memory for its weight channel (two "
                           f"copies of the published weights) but {directory} has {free / 2**20:,.0f} MiB free; "
                           "enlarge it (docker run --shm-size=<size>, or mount -o remount,size=<size> /dev/shm) or "
                           "use off_policy ppo_off_policy")


class SharedMemoryWeights:
    """The weight channel on one machine: two shared-memory copies of the weights, double-buffered.

    publish(model, version) writes the trainer's weights (in publish_dtypes: bf16 for a bf16 recipe, the
    head fp32; tied weights once) into the slot the generator is not reading, then makes it the latest; receive(model)
    copies the latest slot into the generator's model in place (its KV cache stays as it is). Each slot
    has its own lock, held while it is written or read, so the generator reads the newest complete
    weights while the trainer writes the next ones, and a reader never sees half-written weights; the
    trainer waits only if the generator is still reading the older slot it is about to overwrite.
    On GPUs the same two calls would be CUDA IPC handles or an NCCL broadcast.
    """

    SLOTS = 2

    def __init__(self, ctx) -> None:
        self.locks = [ctx.Lock() for _ in range(self.SLOTS)]
        self.latest = ctx.Value("i", 0, lock=False)  # the slot holding the newest complete weights
        self.versions = [ctx.Value("q", -1, lock=False) for _ in range(self.SLOTS)]
        self.published_at = [ctx.Value("d", 0.0, lock=False) for _ in range(self.SLOTS)]
        self.tensors: list[dict[str, torch.Tensor]] | None = None  # attached in each process

    @property
    def version(self):
        """The newest published version (a shared value: .value)."""
        return self.versions[self.latest.value]

    def create(self, model) -> list[dict[str, torch.Tensor]]:
        """Trainer side: allocate both slots in shared memory (to hand to the generator once)."""
        dtypes = publish_dtypes(model)
        state = distinct_state(model)
        check_shm_space(self.SLOTS * sum(t.numel() * dtypes[name].itemsize for name, t in state.items()))
        self.tensors = [{name: torch.empty(t.shape, dtype=dtypes[name]).share_memory_() for name, t in state.items()}
                        for _ in range(self.SLOTS)]
        return self.tensors

    @torch.no_grad()
    def publish(self, model, version: int) -> None:
        slot = 1 - self.latest.value  # the slot no reader was sent to last
        with self.locks[slot]:
            for name, tensor in distinct_state(model).items():
                self.tensors[slot][name].copy_(tensor)
            self.versions[slot].value = version
            self.published_at[slot].value = time.time()
        self.latest.value = slot

    @torch.no_grad()
    def receive_version(self, model, version: int) -> bool:
        """Load exactly `version` if a slot holds it (False if none does yet: not published, or overwritten)."""
        for slot in range(self.SLOTS):
            if self.versions[slot].value == version:
                with self.locks[slot]:
                    if self.versions[slot].value != version:  # overwritten while this waited for the lock
                        return False
                    for name, tensor in distinct_state(model).items():
                        tensor.copy_(self.tensors[slot][name])
                    return True
        return False

    @torch.no_grad()
    def receive(self, model) -> tuple[int, float]:
        """Load the newest published weights; returns (their version, seconds since they were published)."""
        slot = self.latest.value
        with self.locks[slot]:
            for name, tensor in distinct_state(model).items():
                tensor.copy_(self.tensors[slot][name])
            return self.versions[slot].value, time.time() - self.published_at[slot].value


@dataclass
class Channels:
    """What the supervisor creates and hands to both roles."""

    weights: SharedMemoryWeights
    orders: Any  # trainer -> generator: (order index, prompt ids)
    groups: Any  # generator -> trainer: finished groups
    handoff: Any  # trainer -> generator, once: the shared weight tensors
    events: Any  # roles -> supervisor: ("eval", record) / ("step", step, meter) / ("done",) /
    #              ("error", role, text, the message of a ConfigError or None)
    acks: Any  # supervisor -> trainer, after each eval: "continue" or "stop"
    pause: Any  # set while the trainer evaluates: the generator holds still
    stop: Any  # set by the supervisor when the run ends
    supervisor_pid: int
    # Modeled timing only: trainer -> generator, (step v, the modeled time its weights v + 1 are published),
    # posted before step v trains; the version the generator has loaded and the last order it has sampled
    # (the trainer reads them before it overwrites a slot).
    schedule: Any = None
    generator_version: Any = None
    generator_done: Any = None


def supervisor_gone(channels: Channels) -> bool:
    """A role whose supervisor died (kill -9 of the job) must not live on."""
    return os.getppid() != channels.supervisor_pid


class RunStopping(Exception):
    """Raised inside a role's wait when the run stops or the supervisor is gone: the role winds down."""


def wait_until(ready: Callable[[], bool], channels: Channels) -> float:
    """Poll `ready` until it holds; the seconds waited. RunStopping when the run stops meanwhile."""
    started = time.perf_counter()
    while not ready():
        if channels.stop.is_set() or supervisor_gone(channels):
            raise RunStopping
        time.sleep(MODELED_POLL_SECONDS)
    return time.perf_counter() - started


def wait_get(q, channels: Channels, on_wait: Callable[[float], None] | None = None):
    """q.get() that gives up when the run stops or the supervisor is gone (returns None)."""
    while not channels.stop.is_set() and not supervisor_gone(channels):
        started = time.perf_counter()
        try:
            return q.get(timeout=POLL_SECONDS)
        except queue.Empty:
            if on_wait is not None:
                on_wait(time.perf_counter() - started)
    return None
