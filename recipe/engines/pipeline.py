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

The channels between the processes (shared-memory weights, queues, waits) are recipe/engines/pipeline_channel.py;
modeled timing's two clocks are recipe/engines/pipeline_timing.py.

Failure: if a role dies (an exception, kill -9, out of memory) the supervisor stops the other and
raises RoleDiedError naming the role and the cause within seconds. Rerunning resumes from the
trainer's last checkpoint: orders handed out but not trained on are handed out again and their
groups regenerated.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from components import REGISTRIES
from components.registry import ConfigError
from recipe.compute import ModelShape, clocks, since
from recipe.config import RecipeConfig
from recipe.generator import Rollout
from recipe.run import (Run, Samples, assemble_minibatch, build_components, build_generator, configure_cuda,
                        devices_held, model_directory, prepare_run_dir, random_streams, role_device, sample_groups,
                        train_on)
from recipe.engines.pipeline_channel import (POLL_SECONDS, Channels, RunStopping, SharedMemoryWeights,
                                             hold_in_publish_dtypes, supervisor_gone, wait_get, wait_until)
from recipe.engines.pipeline_timing import ModeledGeneratorClock, ModeledTrainerClock
from recipe.model import load_model_dir
from recipe.process_exit import skip_final_collections
from recipe.mixture import build_run_task
from recipe.tracking import read_metrics

ROLES_FILE = "pipeline.json"  # pids of the run's processes (the kill tests read it)


class RoleDiedError(RuntimeError):
    """A PipelineRL role process died; the message names the role and why."""


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


def receive_groups(channels: Channels, index: int, P: int) -> list[dict] | None:
    """The P groups of order `index`, as the generator streams them in order (None: the run stopped)."""
    items = []
    while len(items) < P:
        item = wait_get(channels.groups, channels)
        if item is None:
            return None
        if item["order"] != index:
            raise RuntimeError(f"trainer expected groups of order {index}, got order {item['order']}")
        items.append(item)
    return items


def pipeline_metrics(metrics: dict, seconds: dict, queue_depth: int, stats: dict, last_stats: dict | None,
                     modeled: tuple[float, float] | None) -> dict[str, float]:
    """The pipeline/* metrics of one trainer step: seconds {waited, step, published, trained} of the trainer,
    the generator's stats shipped with the order's groups (and those of the order before), and under modeled
    timing the step's (modeled wait, modeled duration)."""
    out = {
        "pipeline/trainer_idle_frac": seconds["waited"] / max(seconds["step"], 1e-9),
        "pipeline/queue_depth": float(queue_depth),
        "pipeline/publish_seconds": seconds["published"],
        "pipeline/trainer_tokens_per_s": metrics.get("train/tokens", 0.0) / max(seconds["trained"], 1e-9),
        "pipeline/generator_tokens_per_s": stats["tokens"] / max(stats["busy"], 1e-9),
        "pipeline/weight_updates_per_order": float(stats["updates"]),
    }
    if stats["latencies"]:
        out["pipeline/publish_latency_s"] = float(np.mean(stats["latencies"]))
    if modeled is not None:  # the modeled timeline's waits, as fractions of each role's modeled time
        out["pipeline/modeled_trainer_idle_frac"] = modeled[0] / max(modeled[0] + modeled[1], 1e-9)
        out["pipeline/modeled_generator_idle_frac"] = stats["modeled_idle_frac"]
    if last_stats is not None:
        busy = stats["busy_total"] - last_stats["busy_total"]
        idle = stats["idle_total"] - last_stats["idle_total"]
        out["pipeline/generator_idle_frac"] = idle / max(busy + idle, 1e-9)
    return out


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
        items = receive_groups(channels, index, P)
        if items is None:
            return
        waited = time.perf_counter() - waited
        queue_depth = channels.groups.qsize()
        # 2. One optimizer step at version `index`, then publish version index + 1.
        minibatch = assemble_minibatch(merge_groups(items, device), run.c, run.task)
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
        timings = {"waited": waited, "step": step_seconds, "published": published, "trained": trained}
        metrics.update(pipeline_metrics(metrics, timings, queue_depth, stats, last_generator_stats,
                                        (modeled_wait, modeled_busy) if modeled is not None else None))
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
    task = build_run_task(cfg.task, tokenizer)
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
