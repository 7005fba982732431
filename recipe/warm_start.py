"""The embedded model's warm start: a short supervised "noisy teacher" phase, cached as an HF model directory.

RL needs a start point with a low but non-zero pass rate whose failures are a *systematic* wrong
method, so that RL moves probability mass from the wrong method onto the right one (an S-curve)
rather than having to discover arithmetic from scratch. Each supervised target is the
correct column sum with probability `teacher_correct_prob`, otherwise the same column method with
every carry forgotten. A few targets are cut mid-thinking by the interruption phrase and then
answered, so the model has seen the phrase before RL forces it.

The result is saved as a normal Hugging Face directory under the cache, keyed by a hash of
everything that determines it, built once under a file lock and shared by every job of a sweep.
The base recipe's warm start is also shipped with the package (recipe/warm_starts/<key>/, written by
scripts/ship_warm_start.py): a fresh machine skips its ~4-minute build, and every machine starts RL
from the same weights instead of its own build, which differs from another CPU's by round-off.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import math
import os
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Callable

import torch

from components.length_control import INTERRUPTION_PHRASE
from recipe.config import ID_UNCHANGED_AT
from recipe.run_config import ModelConfig, TaskConfig, WarmStartConfig
from recipe.embedded_code import teacher_code_example
from recipe.tasks import THINK_CLOSE, sample_operands, addition_prompt, solution
from recipe.tracking import sync_tree, write_json_atomic

# Bump when the warm-start procedure changes, so stale caches are not reused.
WARM_START_VERSION = 1
# How often a job waiting for another job's warm-start build reads its progress.
WAIT_POLL_SECONDS = 1.0
# Warm starts shipped with the package, one directory per key (read only).
SHIPPED_DIR = Path(__file__).resolve().parent / "warm_starts"
# WarmStartConfig fields that do not determine the weights.
NOT_IN_KEY = ("cache_dir", "use_shipped")
# Fields added after warm starts were built and shipped, and the value at which a build is the one before:
# the warm_start section's share of the run id's rule for keys added later (recipe.config.ID_UNCHANGED_AT).
KEY_UNCHANGED_AT = {key.removeprefix("warm_start."): value for key, value in ID_UNCHANGED_AT.items()
                    if key.startswith("warm_start.")}


def cache_root(cfg: WarmStartConfig) -> Path:
    root = cfg.cache_dir or os.environ.get("SCALERL_CACHE") or Path.home() / ".cache" / "scalerl-sweep"
    return Path(root)


def warm_start_key(model_cfg: ModelConfig, warm_cfg: WarmStartConfig, task_cfg: TaskConfig) -> str:
    """16 hex digits over what determines the directory: the weights and the tokenizer (not where it is cached).

    The interruption phrase is the tokenizer's added token (recipe.model.PHRASE_TOKEN): a directory
    built with another phrase would encode this one character by character, so it has another key.
    """
    data = {
        "version": WARM_START_VERSION,
        "model": {k: v for k, v in dataclasses.asdict(model_cfg).items() if k not in ("path", "dtype")},
        "warm_start": {k: v for k, v in dataclasses.asdict(warm_cfg).items()
                       if k not in NOT_IN_KEY and not (k in KEY_UNCHANGED_AT and v == KEY_UNCHANGED_AT[k])},
        "digits": [task_cfg.min_digits, task_cfg.max_digits],
        "interruption_phrase": INTERRUPTION_PHRASE,
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def teacher_example(rng: random.Random, cfg: WarmStartConfig, task_cfg: TaskConfig) -> tuple[str, str]:
    """(prompt, response) of one supervised target: right or carry-forgetting method (a code target: right or
    borrow-forgetting), maybe interrupted."""
    # Drawn only when code targets are asked for: at code_frac 0 the stream (and the build) is the one before.
    if cfg.code_frac > 0 and rng.random() < cfg.code_frac:
        prompt, trace, answer = teacher_code_example(rng, cfg.teacher_correct_prob)
    else:
        a, b = sample_operands(rng, task_cfg.min_digits, task_cfg.max_digits)
        carry = rng.random() < cfg.teacher_correct_prob
        # Drawn only when terse traces are asked for: at terse_frac 0 the stream is the one before, as above.
        terse = cfg.terse_frac > 0 and rng.random() < cfg.terse_frac
        trace, answer = solution(a, b, carry=carry, terse=terse)
        prompt = addition_prompt(a, b, task_cfg.max_digits)
    if rng.random() < cfg.interrupted_frac:
        trace = trace[: rng.randrange(len(trace))] + INTERRUPTION_PHRASE[: -len(THINK_CLOSE)]
    return prompt, f"{trace}{THINK_CLOSE}{answer}"


def encode_batch(tokenizer, examples: list[tuple[str, str]]):
    """Right-padded (input_ids, attention_mask, labels); labels are -100 outside response tokens + <eos>."""
    rows, targets = [], []
    for prompt, response in examples:
        prompt_ids = tokenizer(prompt).input_ids
        response_ids = tokenizer(response, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        rows.append(prompt_ids + response_ids)
        targets.append([-100] * len(prompt_ids) + response_ids)
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
    attention_mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    labels = torch.tensor([t + [-100] * (width - len(t)) for t in targets])
    return input_ids, attention_mask, labels


def train_warm_start(model, tokenizer, cfg: WarmStartConfig, task_cfg: TaskConfig, log_every: int = 0,
                     on_log=None, on_progress: Callable[[int, int], None] | None = None) -> list[float]:
    """Supervised next-token training on teacher targets; lr: 5% linear warmup, cosine to 10%.

    on_progress(steps done, steps in all) is called about every 1% of the steps.
    """
    rng = random.Random(cfg.seed)
    torch.manual_seed(cfg.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    warmup = max(1, cfg.steps // 20)

    def lr_factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, cfg.steps - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    model.train()
    losses = []
    progress_every = max(1, cfg.steps // 100)
    for step in range(cfg.steps):
        input_ids, attention_mask, labels = encode_batch(
            tokenizer, [teacher_example(rng, cfg, task_cfg) for _ in range(cfg.batch_size)])
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(float(loss.detach()))
        if on_progress is not None and ((step + 1) % progress_every == 0 or step + 1 == cfg.steps):
            on_progress(step + 1, cfg.steps)
        if log_every and (step + 1) % log_every == 0:
            print(f"warm start step {step + 1}/{cfg.steps} loss {sum(losses[-log_every:]) / log_every:.4f}",
                  file=sys.stderr, flush=True)
            if on_log is not None:
                model.eval()
                on_log(step + 1)
                model.train()
    model.eval()
    return losses


def build_warm_start(model_cfg: ModelConfig, warm_cfg: WarmStartConfig, task_cfg: TaskConfig, path: Path,
                     log_every: int = 0, on_progress: Callable[[int, int], None] | None = None) -> None:
    from recipe.model import build_embedded_model, build_tokenizer, save_model_dir

    path = Path(path)
    started = time.perf_counter()
    tokenizer = build_tokenizer()
    model = build_embedded_model(model_cfg, tokenizer, seed=warm_cfg.seed)
    losses = train_warm_start(model, tokenizer, warm_cfg, task_cfg, log_every=log_every, on_progress=on_progress)
    save_model_dir(model, tokenizer, path)
    info = {"seconds": time.perf_counter() - started, "final_loss": sum(losses[-50:]) / max(1, len(losses[-50:])),
            "steps": warm_cfg.steps, "threads": torch.get_num_threads()}
    (path / "warm_start.json").write_text(json.dumps(info, indent=2) + "\n")


def warm_start_dir(model_cfg: ModelConfig, warm_cfg: WarmStartConfig, task_cfg: TaskConfig,
                   log_every: int = 0, on_progress: Callable[[int, int], None] | None = None) -> Path:
    """The warm-start model directory: the shipped one for this key (unless warm_cfg.use_shipped is
    False), else the cached one, built first if missing (once across concurrent jobs).

    on_progress(steps done, steps in all) reports the build, also to jobs that wait for another
    job's build: the builder writes its progress beside the lock, the waiters poll it.
    """
    key = warm_start_key(model_cfg, warm_cfg, task_cfg)
    shipped = SHIPPED_DIR / key
    if warm_cfg.use_shipped and (shipped / "warm_start.json").is_file():
        return shipped
    root = cache_root(warm_cfg) / "warm_start"
    root.mkdir(parents=True, exist_ok=True)
    path = root / key
    if (path / "warm_start.json").is_file():
        return path
    progress_file = root / f"{path.name}.progress.json"

    def report(done: int, total: int) -> None:
        write_json_atomic(progress_file, {"done": done, "total": total})
        if on_progress is not None:
            on_progress(done, total)

    with open(root / f"{path.name}.lock", "w") as lock:
        # Other jobs of the sweep wait here (reporting the builder's progress), then find it built.
        while not try_lock(lock):
            if on_progress is not None and progress_file.is_file():
                with contextlib.suppress(ValueError, OSError, KeyError):
                    state = json.loads(progress_file.read_text())
                    on_progress(int(state["done"]), int(state["total"]))
            time.sleep(WAIT_POLL_SECONDS)
        if not (path / "warm_start.json").is_file():
            staging = root / f"{path.name}.building-{os.getpid()}"
            shutil.rmtree(staging, ignore_errors=True)
            report(0, warm_cfg.steps)
            build_warm_start(model_cfg, warm_cfg, task_cfg, staging, log_every=log_every, on_progress=report)
            shutil.rmtree(path, ignore_errors=True)
            sync_tree(staging)
            os.replace(staging, path)
            progress_file.unlink(missing_ok=True)
    return path


def try_lock(handle) -> bool:
    """Take an exclusive lock on an open file without blocking; False if another process holds it."""
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
