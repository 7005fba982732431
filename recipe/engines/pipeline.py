"""PipelineRL-k: a generator process and a trainer process running at the same time.

Roles, one process each, spawned and watched by `train_pipeline` (the supervisor, the job's own
process, which does no model work):

  trainer    owns the run: model and optimizer, curriculum, evaluation, checkpoints, metrics.jsonl.
             It hands out *orders* (the P prompts of minibatch b), trains on minibatch b at policy
             version b (= optimizer steps taken), publishes the new weights after every step, and
             then hands out order b + k + 1.
  generator  samples G responses to each prompt of an order, scores them, and streams every finished
             group (G samples of one prompt: tokens, rewards, behaviour logprobs and the policy
             version of every token) into the groups queue. Before every decode step it loads newer
             weights if the trainer has published any, keeping its KV cache, so one sequence can
             span several versions; its tokens carry the version that produced their logits.

Why staleness <= k: order b' = b + k + 1 is handed out only after version b + 1 is published, so
every token of minibatch b' comes from weights of version >= b + 1 = b' - k and is trained at
version b'. So the trainer, k + 1 minibatches ahead of what the generator may sample, waits for the
groups of its next minibatch, and the generator, with no order left, waits for the trainer (the two
idle fractions measure which role is the bottleneck). train_step still checks every batch against
the mode's bound and raises StalenessError if a token is more than k versions old. Importance
ratios use the behaviour logprobs the generator recorded; nothing is recomputed with old weights.

Compute (recipe/compute.py): wall device-seconds = the trainer loop's wall-clock (waits included,
evaluations and checkpoint writes excluded; the generator is paused while the trainer evaluates) x
the devices held (recipe.run.devices_held: generator_devices + trainer_devices cores on CPU; on
CUDA the distinct GPUs of the two roles, 1 when they share a one-GPU machine). CPU-seconds, the
device-seconds of a CPU run, = the generator process's CPU time around each order it samples
(shipped with the groups, like its wall-clock) + the trainer process's CPU time over the same loop
steps as its wall-clock. A role waiting for the other
costs no CPU time, so on CPU the overlap of the two roles saves wall-clock, not device-seconds.
Timing (off_policy.timing): with "real" timing a weight update lands whenever it arrives, so a run
depends on the roles' relative speed on the machine and does not repeat. With "modeled" timing each
role keeps a clock of its own work (ModeledTrainerClock, ModeledGeneratorClock): the generator's time
is the FLOPs of the forward passes it has run (the unit: the generator's rate), the trainer's step v
ends at max(end of step v - 1, when the last group of order v was done) + its training FLOPs /
trainer_speed, and order b starts at max(the generator's time, end of step b - k - 1), when the real
trainer hands it out. Before each forward pass the generator takes the newest version whose modeled
publication is past, waiting in real time for the trainer to post the end of its step (it does so
before training it) or to publish the weights. Only two versions are held in shared memory, so the
trainer waits to overwrite version v - 2 until the generator has moved past it. The run is then a
function of its config and seed: the same tokens and curve on any machine and under any load; what
the machine's speed changes is how long each role waits for the other in real time.

Failure: if a role dies (an exception, kill -9, out of memory) the supervisor stops the other and
raises RoleDiedError naming the role and the cause within seconds. Rerunning resumes from the
trainer's last checkpoint: orders handed out but not trained on are handed out again and their
groups regenerated.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from components import REGISTRIES
from components.registry import ConfigError
from recipe.compute import ModelShape, clocks, since, training_flops
from recipe.config import RecipeConfig
from recipe.generator import Rollout
from recipe.run import (Run, Samples, assemble_minibatch, build_components, build_generator, configure_cuda,
                        devices_held, model_directory, prepare_run_dir, random_streams, role_device, sample_groups,
                        train_on)
from recipe.model import lm_parts, load_model_dir
from recipe.process_exit import skip_final_collections
from recipe.tasks import build_task
from recipe.tracking import read_metrics

POLL_SECONDS = 0.2  # how often a waiting role checks that the others are still there
MODELED_POLL_SECONDS = 0.001  # how often a role waiting on the other's real progress (modeled timing) looks
ROLES_FILE = "pipeline.json"  # pids of the run's processes (the kill tests read it)


class RoleDiedError(RuntimeError):
    """A PipelineRL role process died; the message names the role and why."""


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


# --------------------------------------------------------------------------------- modeled timing

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


# ----------------------------------------------------------------------------------------- groups

def group_items(order: int, samples: Samples, stats: dict) -> list[dict]:
    """Split an order's samples into its P groups (numpy arrays: they cross the process boundary by value)."""
    P = len(samples.prompt_ids)
    G = len(samples.correct) // P
    fields = {k: v.cpu().numpy() for k, v in samples.rollout.__dict__.items() if torch.is_tensor(v)}
    items = []
    for j, prompt_id in enumerate(samples.prompt_ids):
        rows = slice(j * G, (j + 1) * G)
        items.append({"order": order, "group": j, "prompt_id": prompt_id, "prompt_width": samples.rollout.prompt_width,
                      "rollout": {k: v[rows] for k, v in fields.items()},
                      "correct": samples.correct[rows].numpy(), "rewards": samples.rewards[rows].numpy(),
                      "seconds": samples.seconds, "cpu_seconds": samples.cpu_seconds, "stats": stats})
    return items


def merge_groups(items: list[dict], device: str) -> Samples:
    """The groups of one order, in group order, back into Samples."""
    items = sorted(items, key=lambda item: item["group"])
    rollout = Rollout(prompt_width=items[0]["prompt_width"], **{
        key: torch.from_numpy(np.concatenate([item["rollout"][key] for item in items])).to(device)
        for key in items[0]["rollout"]})
    return Samples([item["prompt_id"] for item in items], rollout,
                   torch.from_numpy(np.concatenate([item["correct"] for item in items])),
                   torch.from_numpy(np.concatenate([item["rewards"] for item in items])), items[0]["seconds"],
                   items[0]["cpu_seconds"])


# ------------------------------------------------------------------------------------------- roles

def role_main(role: str, body: Callable, channels: Channels, *args) -> None:
    """Run a role; report an exception to the supervisor before the process exits with it (a ConfigError
    itself too: an input error, which the supervisor raises as such, so a sweep does not retry it).
    The role's process exits without its final garbage collections: the supervisor waits for that exit."""
    skip_final_collections()
    try:
        body(channels, *args)
    except RunStopping:  # the run ended while this role waited on the other (modeled timing)
        return
    except BaseException as error:
        # The message, not the exception: a ConfigError subclass's constructor (ParameterError's) does not unpickle.
        input_error = str(error) if isinstance(error, ConfigError) else None
        channels.events.put(("error", role, traceback.format_exc(), input_error))
        channels.events.close()
        channels.events.join_thread()  # make sure the report leaves this process
        raise


def enter_role(device: str, role: str, mode) -> str:
    """Place this role's process: its device, deterministic CUDA options (per process: spawned roles
    do not inherit the supervisor's torch settings) or its share of the CPU cores. Returns the device.

    On CUDA the role's GPU becomes the process's current device, so kernels and allocations that name
    no index (a library's `cuda`, NCCL) land on it, not on cuda:0. Each process has its own caching
    allocator with torch's default settings (PYTORCH_CUDA_ALLOC_CONF from the environment, if set):
    two roles on one GPU each hold what they have cached (BENCHMARKS.md, "On one GPU").
    """
    device = role_device(device, role, mode)
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
        configure_cuda()
    else:
        torch.set_num_threads(mode.trainer_devices if role == "trainer" else mode.generator_devices)
    return device


def trainer_role(channels: Channels, cfg: RecipeConfig, run_dir: str, device: str, stop_at_step: int | None) -> None:
    mode = REGISTRIES["off_policy"].build(cfg.off_policy)
    held = devices_held(cfg, device)  # of the job's device ("cuda"), before this role takes its own
    device = enter_role(device, "trainer", mode)
    run = Run(cfg, Path(run_dir), device, devices=held)
    k, P = mode.k, cfg.rollout.prompts_per_batch
    modeled = ModeledTrainerClock(mode.trainer_speed, run.shape) if mode.modeled else None
    channels.handoff.put(channels.weights.create(run.model))
    channels.weights.publish(run.model, run.step)
    orders: dict[int, list[int]] = dict(run.extra.get("orders", {}))  # handed out, not yet trained on

    def hand_out(index: int) -> None:
        if index not in orders:
            orders[index] = run.c.curriculum.sample(P)
        channels.orders.put((index, orders[index]))

    def evaluate() -> bool:
        """Evaluate with the generator paused; False when the supervisor says stop (target reached).

        The paused generator's cores are idle meanwhile, so on CPU the evaluation borrows them.
        """
        channels.pause.set()
        if device == "cpu":
            torch.set_num_threads(mode.generator_devices + mode.trainer_devices)
        record = run.evaluate()
        if device == "cpu":
            torch.set_num_threads(mode.trainer_devices)
        channels.pause.clear()
        channels.events.put(("eval", record))
        return wait_get(channels.acks, channels) == "continue"

    if not run.resumed and not evaluate():
        return finish(run, channels)
    for index in range(run.step, min(run.step + k + 1, cfg.max_steps)):
        hand_out(index)
    clock = clocks()
    last_generator_stats = None
    while run.step < cfg.max_steps:
        index = run.step
        # 1. Wait for the P groups of minibatch `index` (the generator streams them in order).
        waited = time.perf_counter()
        items = []
        while len(items) < P:
            item = wait_get(channels.groups, channels)
            if item is None:
                return
            if item["order"] != index:
                raise RuntimeError(f"trainer expected groups of order {index}, got order {item['order']}")
            items.append(item)
        waited = time.perf_counter() - waited
        queue_depth = channels.groups.qsize()
        # 2. One optimizer step at version `index`, then publish version index + 1.
        minibatch = assemble_minibatch(merge_groups(items, device), run.c)
        if modeled is not None:  # the generator may be waiting for this step's end before it trains
            end, modeled_wait, modeled_busy = modeled.schedule(minibatch, items[-1]["stats"]["modeled_done"])
            channels.schedule.put((index, end))
        trained = time.perf_counter()
        metrics = train_on(minibatch, index, run)
        trained = time.perf_counter() - trained
        run.step += 1
        if modeled is not None:  # the slot to be overwritten holds version step - 2: the generator must be past it,
            # or have sampled every order handed out so far (the end of a run)
            pending = max(orders, default=-1)  # the last order handed out; later ones never take version step - 2
            waited += wait_until(lambda: channels.generator_version.value >= run.step - 2
                                 or channels.generator_done.value >= pending, channels)
        published = time.perf_counter()
        channels.weights.publish(run.model, run.step)
        published = time.perf_counter() - published
        del orders[index]
        if run.step + k < cfg.max_steps:
            hand_out(run.step + k)
        step_seconds, cpu = since(clock)
        run.meter.wall_seconds += step_seconds
        run.meter.cpu_seconds += minibatch.cpu_seconds + cpu  # the generator's order + this step
        # 3. Pipeline metrics of this step.
        stats = items[0]["stats"]
        metrics.update({
            "pipeline/trainer_idle_frac": waited / max(step_seconds, 1e-9),
            "pipeline/queue_depth": float(queue_depth),
            "pipeline/publish_seconds": published,
            "pipeline/trainer_tokens_per_s": metrics.get("train/tokens", 0.0) / max(trained, 1e-9),
            "pipeline/generator_tokens_per_s": stats["tokens"] / max(stats["busy"], 1e-9),
            "pipeline/weight_updates_per_order": float(stats["updates"]),
        })
        if stats["latencies"]:
            metrics["pipeline/publish_latency_s"] = float(np.mean(stats["latencies"]))
        if modeled is not None:  # the modeled timeline's waits, as fractions of each role's modeled time
            metrics["pipeline/modeled_trainer_idle_frac"] = modeled_wait / max(modeled_wait + modeled_busy, 1e-9)
            metrics["pipeline/modeled_generator_idle_frac"] = stats["modeled_idle_frac"]
        if last_generator_stats is not None:
            busy = stats["busy_total"] - last_generator_stats["busy_total"]
            idle = stats["idle_total"] - last_generator_stats["idle_total"]
            metrics["pipeline/generator_idle_frac"] = idle / max(busy + idle, 1e-9)
        last_generator_stats = stats
        run.pending.add(metrics)
        channels.events.put(("step", run.step, run.meter.state_dict()))
        # 4. Evaluation and checkpoints, off the clock.
        if run.eval_due() and not evaluate():
            return finish(run, channels)
        if run.checkpoint_due():
            run.save(extra={"orders": dict(orders)})
        clock = clocks()
        if stop_at_step is not None and run.step >= stop_at_step:
            break
    finish(run, channels)


def finish(run: Run, channels: Channels) -> None:
    run.tracker.finish()
    channels.events.put(("done",))


def generator_role(channels: Channels, cfg: RecipeConfig, device: str) -> None:
    mode = REGISTRIES["off_policy"].build(cfg.off_policy)
    device = enter_role(device, "generator", mode)
    channels.groups.cancel_join_thread()  # groups left unread at the end must not block this process's exit
    model, tokenizer = load_model_dir(model_directory(cfg), cfg.model.dtype, device)
    model.eval()
    hold_in_publish_dtypes(model)
    task = build_task(cfg.task, tokenizer)
    c = build_components(cfg)
    # The torch generator decodes on `model` itself; a vLLM engine serves `model`'s weights, loading each newly
    # received version before the generate call that uses it (never mid-sequence).
    generator = build_generator(cfg, model, tokenizer, task, model_directory(cfg))
    channels.weights.tensors = wait_get(channels.handoff, channels)
    if channels.weights.tensors is None:
        return
    version, _ = channels.weights.receive(model)
    modeled = None
    if mode.modeled:
        channels.generator_version.value = version
        modeled = ModeledGeneratorClock(ModelShape.of(model), channels, mode.k, start_version=version)
    # Sampling streams of their own; seeded by the version this process starts from, so a resumed
    # run does not replay the samples of its first attempt; a replicate's streams are its own (recipe.run.rollout_rngs).
    rngs = random_streams([cfg.seed, version, 1] + ([cfg.replicate] if cfg.replicate else []), device)
    totals = {"busy": 0.0, "idle": 0.0, "paused": 0.0, "updates": 0}
    latencies: list[float] = []  # seconds from a publication to its load (real timing: modeled loads wait on purpose)

    def account_wait(seconds: float) -> None:
        totals["paused" if channels.pause.is_set() else "idle"] += seconds

    def on_decode_step(tokens: int, context: int) -> int:
        """Before a forward pass of `tokens` tokens: hold still during evaluations, pick up newer weights
        (with modeled timing, those published by the generator's modeled time, waiting for them if need be)."""
        nonlocal version
        if channels.pause.is_set():
            paused = time.perf_counter()
            while channels.pause.is_set() and not channels.stop.is_set() and not supervisor_gone(channels):
                time.sleep(0.005)
            totals["paused"] += time.perf_counter() - paused
        if modeled is not None:
            due = modeled.due_version(version, order=index)
            if due > version:
                totals["idle"] += wait_until(lambda: channels.weights.receive_version(model, due), channels)
                version = due
                totals["updates"] += 1
                channels.generator_version.value = version
            modeled.charge(tokens, context)
        elif channels.weights.version.value > version:
            version, latency = channels.weights.receive(model)
            latencies.append(latency)
            totals["updates"] += 1
        return version

    while True:
        order = wait_get(channels.orders, channels, on_wait=account_wait)
        if order is None:
            return
        index, prompt_ids = order
        paused_before, idle_before = totals["paused"], totals["idle"]
        updates_before, latencies_before = totals["updates"], len(latencies)
        modeled_idle = modeled.start_order(index) if modeled is not None else 0.0
        modeled_started = modeled.now if modeled is not None else 0.0
        samples = sample_groups(generator, task, c, cfg, prompt_ids, rngs, policy_version=version,
                                on_decode_step=on_decode_step)
        busy = samples.seconds - (totals["paused"] - paused_before) - (totals["idle"] - idle_before)
        totals["busy"] += busy
        samples.seconds = busy  # the compute this order cost (pauses and waits for the trainer excluded)
        stats = {"busy": busy, "busy_total": totals["busy"], "idle_total": totals["idle"],
                 "tokens": int(samples.rollout.lengths.sum()), "updates": totals["updates"] - updates_before,
                 "latencies": latencies[latencies_before:]}
        if modeled is not None:
            stats["modeled_done"] = modeled.now
            stats["modeled_idle_frac"] = modeled_idle / max(modeled_idle + modeled.now - modeled_started, 1e-9)
            channels.generator_done.value = index
        for item in group_items(index, samples, stats):
            channels.groups.put(item)


# -------------------------------------------------------------------------------------- supervisor

def describe_exit(process, error_text: str | None) -> str:
    code = process.exitcode
    if code is not None and code < 0:
        cause = f"killed by signal {-code} ({signal.Signals(-code).name})"
    else:
        cause = f"exited with code {code}"
    if error_text:
        cause += "; its error:\n" + error_text.rstrip()
    return cause


def stop_roles(processes: dict, channels: Channels) -> None:
    channels.stop.set()
    deadline = time.time() + 5.0
    for process in processes.values():
        process.join(timeout=max(0.0, deadline - time.time()))
    for process in processes.values():
        if process.is_alive():
            process.kill()
            process.join(timeout=5.0)


def train_pipeline(cfg: RecipeConfig, run_dir: str | Path, *, device: str = "cpu",
                   on_eval: Callable[[dict], None] | None = None, on_step: Callable[[int, Any], None] | None = None,
                   stop_at_step: int | None = None) -> list[dict]:
    """Run (or resume) a pipeline_rl recipe; the contract of recipe.engines.train.

    on_eval runs here, with the trainer waiting on it: an exception from it (e.g. the sweep's
    TargetReached) stops the run right after that evaluation and is re-raised here. on_step gets
    (step, ComputeMeter) shortly after each step.
    """
    from recipe.compute import ComputeMeter

    run_dir = Path(run_dir)
    prepare_run_dir(cfg, run_dir)
    role_device(device, "trainer", REGISTRIES["off_policy"].build(cfg.off_policy))  # a bad split fails here
    model_directory(cfg, log_every=100, run_dir=run_dir)  # build the warm start once, before two processes want it
    ctx = torch.multiprocessing.get_context("spawn")
    channels = Channels(weights=SharedMemoryWeights(ctx), orders=ctx.Queue(), groups=ctx.Queue(), handoff=ctx.Queue(),
                        events=ctx.Queue(), acks=ctx.Queue(), pause=ctx.Event(), stop=ctx.Event(),
                        supervisor_pid=os.getpid(), schedule=ctx.Queue(), generator_version=ctx.Value("q", -1),
                        generator_done=ctx.Value("q", -1))
    processes = {
        "trainer": ctx.Process(target=role_main, name="pipeline-trainer", daemon=True,
                               args=("trainer", trainer_role, channels, cfg, str(run_dir), device, stop_at_step)),
        "generator": ctx.Process(target=role_main, name="pipeline-generator", daemon=True,
                                 args=("generator", generator_role, channels, cfg, device)),
    }
    for process in processes.values():
        process.start()
    (run_dir / ROLES_FILE).write_text(json.dumps({"supervisor": os.getpid(),
                                                  **{role: p.pid for role, p in processes.items()}}))
    errors: dict[str, str] = {}
    input_errors: dict[str, str | None] = {}
    stopped_by: BaseException | None = None
    done = False
    try:
        while True:
            try:  # once the trainer is done, only what is already queued is left to read
                event = channels.events.get(timeout=0.0 if done else POLL_SECONDS)
            except queue.Empty:
                event = None
            if event is not None:
                kind = event[0]
                if kind == "eval":
                    try:
                        if on_eval is not None:
                            on_eval(event[1])
                        channels.acks.put("continue")
                    except BaseException as error:  # e.g. TargetReached: the trainer stops after this eval
                        stopped_by = error
                        channels.acks.put("stop")
                elif kind == "step" and on_step is not None:
                    meter = ComputeMeter()
                    meter.load_state_dict(event[2])
                    on_step(event[1], meter)
                elif kind == "done":
                    done = True
                elif kind == "error":
                    errors[event[1]] = event[2]
                    input_errors[event[1]] = event[3]
                continue  # drain every pending event before looking at the processes
            if done:
                channels.stop.set()  # the generator winds down while the trainer's process exits
                processes["trainer"].join(timeout=30.0)
                break
            for role, process in processes.items():
                if not process.is_alive():
                    process.join()
                    if input_errors.get(role) is not None:  # the inputs, not the process: rerunning fails alike
                        raise ConfigError(f"PipelineRL {role}: {input_errors[role]}")
                    raise RoleDiedError(
                        f"PipelineRL {role} process (pid {process.pid}) died: "
                        f"{describe_exit(process, errors.get(role))}\n"
                        f"the run stopped; rerun the same command to resume from the last checkpoint in {run_dir}")
    finally:
        stop_roles(processes, channels)
    if stopped_by is not None:
        raise stopped_by
    return read_metrics(run_dir)
