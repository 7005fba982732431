"""The project's CUDA path measured on one GPU: `benchmarks/gpu_proof.sh` runs each part under a time limit.

    python -m benchmarks.bench_gpu native     decode and train-step throughput at two lengths, MFU,
                                              behaviour-vs-trainer logprob gap (fp32 head on / off),
                                              the longest response one train step fits, with and
                                              without optimizer.gradient_checkpointing
    python -m benchmarks.bench_gpu decode     CUDA-graph decoding (recipe/static_decode.py) against the eager
                                              loop, 64 rows: tokens/s, same samples, a step's kernels, and
                                              the same steps through torch.compile (static_decode.COMPILE)
    python -m benchmarks.bench_gpu train_profile
                                              where a train step at 16 x (128 + 4,096) spends its time
    python -m benchmarks.bench_gpu base       the ScaleRL base, native engine against trl, one process
    python -m benchmarks.bench_gpu pipeline   a PipelineRL-2 job (trainer and generator on the one GPU)
    python -m benchmarks.bench_gpu trl        the trl engine in bf16: plain and through accelerate with
                                              engine.sharding fsdp, each with the fp32 head on and off,
                                              checkpointing on, a reward with a spread (gpu_spread_reward)
                                              so their losses compare non-zero

Models are random-initialised Qwen3 shapes (no weights to download); `native` uses the real 151,936-token
vocabulary (the head's cost is real), `pipeline` and `trl` the project's character tokenizer, which they
must decode. Each part writes $OUT/<part>.json as it goes, so a part cut off by its time limit keeps what
it measured. --tiny shrinks every shape and length to run on a CPU in a minute: a check of this file's
logic before a GPU is spent on it, never a measurement.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import runpy
import subprocess
import threading
import time
from pathlib import Path

import torch

from components import REGISTRIES
from recipe.compute import sequence_cost
from recipe.generator import Rollout, generate
from recipe.model import build_tokenizer, save_model_dir
from recipe.run_config import OptimizerConfig
from recipe.trainer import TrainBatch, build_optimizer, sequence_logprobs, train_step

OUT = Path(os.environ.get("OUT", "/tmp/gpu_proof"))
WORK = Path(os.environ.get("GPU_PROOF_WORK", "/tmp/gpu_proof_work"))
# Dense bf16 peak of the card (FLOP/s, NVIDIA's datasheets, no sparsity): MFU's denominator.
BF16_PEAK = {"H100 PCIe": 756e12, "H100": 989e12, "H200": 989e12, "A100": 312e12}
QWEN3_1P7B = dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                  num_key_value_heads=8, head_dim=128)
QWEN3_0P6B = dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                  num_key_value_heads=8, head_dim=128)
TINY_SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16)


def log(*args) -> None:
    print(f"[{time.strftime('%H:%M:%S')}]", *args, flush=True)


class Results(dict):
    """A dict saved to $OUT/<part>.json after every change (a part killed by its time limit keeps its figures)."""

    def __init__(self, part: str) -> None:
        super().__init__()
        self.path = OUT / f"{part}.json"

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        OUT.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self, indent=1, default=str))
        log(key, json.dumps(value, default=str)[:600])


class GpuMemorySampler:
    """Peak GPU memory of this process and its descendants (nvidia-smi every 0.5 s): what a launched job's
    processes hold, which torch in this process cannot see; other parts running beside it are not
    counted. Empty without nvidia-smi."""

    def __init__(self) -> None:
        self.peaks: dict[int, int] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.poll, daemon=True)

    def poll(self) -> None:
        while not self.stop.is_set():
            try:
                query = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
                text = subprocess.run(query, capture_output=True, text=True, timeout=10).stdout
            except (OSError, subprocess.SubprocessError):
                return
            ours = own_process_ids()
            for line in text.splitlines():
                pid, _, mib = line.partition(",")
                if pid.strip().isdigit() and mib.strip().isdigit() and int(pid) in ours:
                    self.peaks[int(pid)] = max(self.peaks.get(int(pid), 0), int(mib))
            self.stop.wait(0.5)

    def __enter__(self) -> "GpuMemorySampler":
        self.thread.start()
        return self

    def __exit__(self, *_) -> None:
        self.stop.set()
        self.thread.join()

    def gib_per_process(self) -> list[float]:
        return sorted((round(mib / 1024, 2) for mib in self.peaks.values()), reverse=True)


def own_process_ids() -> set[int]:
    """This process and its descendants (from /proc: each process's parent id)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    ours, grown = {os.getpid()}, True
    while grown:
        new = {pid for pid, parent in parents.items() if parent in ours} - ours
        ours |= new
        grown = bool(new)
    return ours


def device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def sync() -> None:
    if device() == "cuda":
        torch.cuda.synchronize()


def free() -> None:
    gc.collect()
    if device() == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_gib() -> float | None:
    return round(torch.cuda.max_memory_allocated() / 2**30, 2) if device() == "cuda" else None


def is_oom(error: BaseException) -> bool:
    return isinstance(error, torch.cuda.OutOfMemoryError) or "out of memory" in str(error).lower()


def card() -> dict:
    """The card's name, its spec bf16 peak and the measured rate of an 8192^3 bf16 matmul."""
    if device() != "cuda":
        return {"name": "cpu (--tiny logic check)", "bf16_peak_flops": 1e12, "bf16_matmul_measured_flops": None}
    name = torch.cuda.get_device_name(0)
    spec = next((flops for key, flops in BF16_PEAK.items() if key in name), None)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    for _ in range(3):
        a @ b
    sync()
    started = time.perf_counter()
    for _ in range(10):
        a @ b
    sync()
    measured = 10 * 2 * 8192**3 / (time.perf_counter() - started)
    return {"name": name, "bf16_peak_flops": spec, "bf16_matmul_measured_flops": round(measured / 1e12) * 1e12,
            "memory_gib": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)}


def qwen3(shape: dict, vocab_size: int, tokenizer, max_positions: int):
    """A random-initialised Qwen3-shaped causal LM on the device, fp32 master weights, bf16 body compute
    (what recipe.model.load_model_dir(dtype="bfloat16") returns)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(vocab_size=vocab_size, max_position_embeddings=max_positions, tie_word_embeddings=True,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, **shape)
    with torch.device(device()):
        model = Qwen3ForCausalLM(config)
    model.scalerl_compute_dtype = torch.bfloat16
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval()


def matmul_params(model) -> int:
    """Parameters that cost a multiply-add per token: all but the input lookup, a tied head counted once."""
    embedding = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    return sum(p.numel() for p in model.parameters()) - embedding.numel() + (head.numel() if head is embedding else 0)


def precision(fp32_head: bool):
    return REGISTRIES["precision"].build({"name": "lm_head", "fp32_head": fp32_head})


def prompts(n_prompts: int, per_prompt: int) -> list[str]:
    return [f"{i:02d}+{(7 * i) % 100:02d}=<think>" for i in range(n_prompts) for _ in range(per_prompt)]


# ---------------------------------------------------------------------------------------------- native
def decode_bench(model, tokenizer, new_tokens: int, fp32_head: bool, peak: float, static: bool | None = None,
                 keep: dict | None = None, warm_up: bool = True) -> dict:
    """64 rows sampled to `new_tokens` (a random model rarely samples <eos>): tokens/s and MFU of decoding.
    static: generate's static_decode (None: its default, CUDA graphs on a GPU); keep: gets the rollout;
    warm_up: a short call first (cuBLAS, allocator)."""
    control = REGISTRIES["length_control"].build({"name": "none"})
    batch = prompts(8, 8)
    if warm_up:
        generate(model, tokenizer, batch[:8], precision=precision(fp32_head), length_control=control,
                 max_new_tokens=4, static_decode=static)
    free()
    sync()
    started = time.perf_counter()
    rollout = generate(model, tokenizer, batch, precision=precision(fp32_head), length_control=control,
                       max_new_tokens=new_tokens, torch_rng=torch.Generator(device=device()).manual_seed(0),
                       static_decode=static)
    sync()
    seconds = time.perf_counter() - started
    if keep is not None:
        keep["rollout"] = rollout
    tokens = int(rollout.lengths.sum())
    _, context = sequence_cost([rollout.prompt_width] * len(batch), rollout.lengths.tolist())
    flops = 2 * matmul_params(model) * tokens + 2 * model.config.num_hidden_layers * model.config.hidden_size * context
    return {"rows": len(batch), "new_tokens": new_tokens, "decode_steps": rollout.response_ids.shape[1],
            "tokens": tokens, "seconds": round(seconds, 3), "tokens_per_s": round(tokens / seconds),
            "ms_per_decode_step": round(1e3 * seconds / max(rollout.response_ids.shape[1], 1), 2),
            "mfu": round(flops / seconds / peak, 4), "peak_gib": peak_gib()}


def logprob_gap(model, tokenizer, fp32_head: bool, new_tokens: int) -> dict:
    """|behaviour logprob (generator) - trainer's recomputation| on the same weights, per sampled token."""
    control = REGISTRIES["length_control"].build({"name": "none"})
    head = precision(fp32_head)
    rollout = generate(model, tokenizer, prompts(4, 8), precision=head, length_control=control,
                       max_new_tokens=new_tokens, torch_rng=torch.Generator(device=device()).manual_seed(1),
                       static_decode=True)
    with torch.no_grad():
        logprobs, _ = sequence_logprobs(model, head, rollout.input_ids, rollout.attention_mask, rollout.prompt_width)
    gap = (logprobs - rollout.old_logprobs)[rollout.loss_mask].abs()
    return {"mean": float(gap.mean()), "p99": float(gap.quantile(0.99)), "max": float(gap.max()),
            "tokens": int(gap.numel())}


def synthetic_batch(model, n_prompts: int, G: int, P: int, T: int) -> TrainBatch:
    """n_prompts x G sequences of P prompt + T response tokens, random ids, every response token trained."""
    B, vocab, dev = n_prompts * G, model.config.vocab_size, device()
    prompt = torch.randint(4, vocab, (n_prompts, P), device=dev).repeat_interleave(G, dim=0)
    ids = torch.cat([prompt, torch.randint(4, vocab, (B, T), device=dev)], dim=1)
    rollout = Rollout(input_ids=ids, attention_mask=torch.ones_like(ids), prompt_width=P,
                      loss_mask=torch.ones(B, T, dtype=torch.bool, device=dev),
                      old_logprobs=torch.full((B, T), -12.0, device=dev), lengths=torch.full((B,), T, device=dev),
                      truncated=torch.zeros(B, dtype=torch.bool, device=dev),
                      interrupted=torch.zeros(B, dtype=torch.bool, device=dev),
                      versions=torch.zeros(B, T, dtype=torch.long, device=dev))
    return TrainBatch(rollout, torch.randn(B, device=dev), torch.arange(n_prompts, device=dev).repeat_interleave(G),
                      version=0)


def one_step(model, optimizer, schedule, batch: TrainBatch, micro: int, checkpointing: bool = False) -> dict:
    return train_step(model, optimizer, schedule, batch, loss_fn=REGISTRIES["loss"].build({"name": "cispo"}),
                      aggregation=REGISTRIES["aggregation"].build({"name": "prompt_mean"}), precision=precision(True),
                      temperature=1.0, grad_clip=1.0, micro_batch_size=micro, gradient_checkpointing=checkpointing)


def train_bench(model, optimizer, schedule, n_prompts: int, G: int, P: int, T: int, micro: int, peak: float) -> dict:
    """One CISPO step (prompt_mean, fp32 head, AdamW on fp32 master weights): tokens/s and MFU."""
    batch = synthetic_batch(model, n_prompts, G, P, T)
    one_step(model, optimizer, schedule, batch, micro)  # warm-up: gradients and AdamW state allocated
    free()
    sync()
    started = time.perf_counter()
    for _ in range(2):
        metrics = one_step(model, optimizer, schedule, batch, micro)
    sync()
    seconds = (time.perf_counter() - started) / 2
    # What the GPU computes: forward + backward = 3 forwards over each distinct prompt once (the shared
    # prefix) and every response token, plus attention over the contexts.
    tokens = n_prompts * P + n_prompts * G * T
    _, context = sequence_cost([P] * (n_prompts * G), [T] * (n_prompts * G))
    flops = 6 * matmul_params(model) * tokens + 6 * model.config.num_hidden_layers * model.config.hidden_size * context
    params = sum(p.numel() for p in model.parameters())
    return {"rows": n_prompts * G, "prompt": P, "response": T, "micro_batch": micro, "seconds": round(seconds, 3),
            "response_tokens_per_s": round(n_prompts * G * T / seconds), "mfu": round(flops / seconds / peak, 4),
            "peak_gib": peak_gib(), "peak_bytes_per_param": round(torch.cuda.max_memory_allocated() / params, 1)
            if device() == "cuda" else None, "grad_norm": metrics["train/grad_norm"]}


def length_wall(model, optimizer, schedule, lengths: list[int], prompt: int, checkpointing: bool = False) -> dict:
    """One response of T tokens per step (micro-batch 1), T doubling: the longest that trains, and its cost
    (with or without optimizer.gradient_checkpointing)."""
    out = {}
    for T in lengths:
        free()
        try:
            sync()
            started = time.perf_counter()
            one_step(model, optimizer, schedule, synthetic_batch(model, 1, 1, prompt, T), 1, checkpointing)
            sync()
            out[T] = {"ok": True, "seconds": round(time.perf_counter() - started, 2), "peak_gib": peak_gib()}
        except Exception as error:  # noqa: BLE001 - running out of memory is the finding
            if not is_oom(error):
                raise
            out[T] = {"ok": False, "error": "out of memory"}
        optimizer.zero_grad(set_to_none=True)
        log("length", T, "checkpointed" if checkpointing else "", out[T])
        if not out[T]["ok"]:
            break
    trained = [T for T, result in out.items() if result["ok"]]
    return {"longest_trained": max(trained, default=None), "steps": out}


def qwen3_1p7b_on_the_card(results: Results, tiny: bool, max_positions: int):
    """(peak FLOP/s, tokenizer, model, vocab): the card described in results, a random Qwen3-1.7B-shaped model
    with the real 151,936-token vocabulary (tiny: TINY_SHAPE, 1,000)."""
    from recipe.run import configure_cuda

    if device() == "cuda":
        configure_cuda()  # what recipe.engines.train does on CUDA
    torch.manual_seed(0)
    results["card"] = card()
    peak = results["card"]["bf16_peak_flops"] or 989e12
    tokenizer = build_tokenizer()
    shape, vocab = (TINY_SHAPE, 1000) if tiny else (QWEN3_1P7B, 151936)
    return peak, tokenizer, qwen3(shape, vocab, tokenizer, max_positions=max_positions), vocab


def native(tiny: bool, skip_decode: bool = False) -> None:
    results = Results("native_train" if skip_decode else "native")
    peak, tokenizer, model, vocab = qwen3_1p7b_on_the_card(results, tiny, max_positions=65536)
    results["model"] = {"shape": "tiny" if tiny else "Qwen3-1.7B", "params_b": round(
        sum(p.numel() for p in model.parameters()) / 1e9, 3), "vocab": vocab,
        "attention": model.config._attn_implementation}
    lengths = (16, 32) if tiny else (256, 1024)
    if not skip_decode:
        decode_and_gap(results, model, tokenizer, lengths, peak)
    optimizer, schedule = build_optimizer(model, OptimizerConfig(lr=1e-7, warmup_steps=1))
    train = {}
    for T in ((16, 32) if tiny else (1024, 4096)):
        n_prompts, G, P, micro = (2, 4, 8, 2) if tiny else (2, 8, 128, 2)
        try:
            train[f"T{T}"] = train_bench(model, optimizer, schedule, n_prompts, G, P, T, micro, peak)
        except Exception as error:  # noqa: BLE001 - running out of memory is a finding; the wall still runs
            if not is_oom(error):
                raise
            train[f"T{T}"] = {"rows": n_prompts * G, "response": T, "micro_batch": micro, "error": "out of memory"}
        optimizer.zero_grad(set_to_none=True)
        free()
        results["train"] = train
    # The memory wall, each way: every layer's activations kept, then gradient checkpointing (issue 38).
    results["length_wall"] = length_wall(model, optimizer, schedule, [32, 64] if tiny else [8192, 16384, 32768],
                                         8 if tiny else 128)
    results["length_wall_checkpointed"] = length_wall(model, optimizer, schedule, [32, 64] if tiny else
                                                      [8192, 16384, 32768, 61440], 8 if tiny else 128,
                                                      checkpointing=True)


def decode_and_gap(results: Results, model, tokenizer, lengths, peak: float) -> None:
    """Decode throughput (fp32 head at both lengths, bf16 head at the first) and the logprob gaps."""
    results["decode"] = {f"{n}_fp32_head": decode_bench(model, tokenizer, n, True, peak) for n in lengths}
    results["decode"] = {**results["decode"], f"{lengths[0]}_bf16_head": decode_bench(model, tokenizer, lengths[0],
                                                                                      False, peak)}
    free()
    results["logprob_gap"] = {("fp32_head" if on else "bf16_head"): logprob_gap(model, tokenizer, on, lengths[0])
                              for on in (True, False)}
    free()


def same_samples(a: Rollout, b: Rollout) -> dict:
    """How alike two rollouts of the same seed are: rows and tokens equal, logprob gap where both sampled."""
    rows_equal = (a.response_ids == b.response_ids).all(dim=1) if a.response_ids.shape == b.response_ids.shape \
        else torch.zeros(len(a.lengths), dtype=torch.bool)
    T = min(a.response_ids.shape[1], b.response_ids.shape[1])
    # A row's tokens agree up to its first difference (after it, the two decodes condition on other text).
    agree = (a.response_ids[:, :T] == b.response_ids[:, :T]).long().cumprod(dim=1)
    agree = agree * (torch.arange(T, device=agree.device) < a.lengths[:, None])
    both = agree.bool() & a.loss_mask[:, :T] & b.loss_mask[:, :T]
    gap = (a.old_logprobs[:, :T] - b.old_logprobs[:, :T])[both].abs()
    return {"rows_equal": int(rows_equal.sum()), "rows": len(rows_equal),
            "tokens_before_first_difference": int(agree.sum()), "tokens": int(a.lengths.sum()),
            "logprob_gap_max": float(gap.max()) if gap.numel() else None,
            "logprob_gap_mean": float(gap.mean()) if gap.numel() else None}


def decode(tiny: bool) -> None:
    """Decode with CUDA graphs (recipe/static_decode.py) against the eager loop, Qwen3-1.7B shape, 64 rows: tokens/s,
    and the same samples (graphs vs the same static steps launched one by one: bitwise; vs the eager loop)."""
    import recipe.static_decode

    results = Results("decode")
    peak, tokenizer, model, _ = qwen3_1p7b_on_the_card(results, tiny, max_positions=4096)
    short, long = (16, 70) if tiny else (256, 1024)
    kept_graphs, kept_eager = {}, {}

    def measure(key, run):  # a failure is a finding: kept with its cause, and the other figures still run
        try:
            results[key] = run()
        except Exception as error:  # noqa: BLE001
            import traceback

            results[key] = {"error": f"{type(error).__name__}: {error}"[:800],
                            "where": traceback.format_exc()[-1500:]}
        free()

    # The eager loop's ms a step does not depend on the length (BENCHMARKS: 61.6 at 256 and 61.8 at 1,024 tokens),
    # so it runs a quarter of the tokens; the graphs' samples are compared with it at that length.
    quarter = short // 4
    measure("graphs_quarter", lambda: decode_bench(model, tokenizer, quarter, True, peak, static=True,
                                                   keep=kept_graphs))
    measure("eager_quarter", lambda: decode_bench(model, tokenizer, quarter, True, peak, static=False,
                                                  keep=kept_eager))
    if kept_graphs and kept_eager:
        results["graphs_vs_eager_loop"] = same_samples(kept_graphs["rollout"], kept_eager["rollout"])
    measure("graphs_short", lambda: decode_bench(model, tokenizer, short, True, peak, static=True))
    measure("graphs_short_bf16_head", lambda: decode_bench(model, tokenizer, short, False, peak, static=True))
    measure("graphs_long", lambda: decode_bench(model, tokenizer, long, True, peak, static=True))
    for graphs in (False, True):
        recipe.static_decode.CUDA_GRAPHS = graphs
        measure(f"profile_{'graphs' if graphs else 'launched'}", lambda: decode_profile(model, tokenizer, quarter // 2))
    recipe.static_decode.CUDA_GRAPHS = True
    measure("logprob_gap", lambda: {("fp32_head" if on else "bf16_head"): logprob_gap(model, tokenizer, on, short)
                                    for on in (True, False)})
    # Last (its compilation takes minutes): each round through torch.compile before its capture; one view
    # length (quarter <= FIRST_VIEW), so one compilation; the second call is the steady state.
    recipe.static_decode.COMPILE = True
    kept_compiled = {}
    measure("compiled_quarter_first_call", lambda: decode_bench(model, tokenizer, quarter, True, peak, static=True,
                                                                warm_up=False))
    measure("compiled_quarter", lambda: decode_bench(model, tokenizer, quarter, True, peak, static=True,
                                                     warm_up=False, keep=kept_compiled))
    if kept_compiled and kept_graphs:
        results["compiled_vs_graphs"] = same_samples(kept_compiled["rollout"], kept_graphs["rollout"])
    measure("profile_compiled", lambda: decode_profile(model, tokenizer, quarter // 2))
    recipe.static_decode.COMPILE = False


def decode_profile(model, tokenizer, steps: int) -> dict:
    """GPU time of the static decode steps (64 rows, fp32 head), kernel by kernel (torch.profiler): what a step
    spends on the device, against its wall time."""
    control = REGISTRIES["length_control"].build({"name": "none"})
    batch = prompts(8, 8)

    def run():
        return generate(model, tokenizer, batch, precision=precision(True), length_control=control,
                        max_new_tokens=steps, torch_rng=torch.Generator(device=device()).manual_seed(0),
                        static_decode=True)

    run()
    sync()
    seconds, events = profiled(run)
    gpu_us = sum(getattr(e, "self_device_time_total", 0) for e in events)
    return {"steps": steps, "wall_ms_per_step_profiled": round(1e3 * seconds / steps, 2),
            "gpu_ms_per_step": round(gpu_us / 1e3 / steps, 3),
            "kernels_per_step": round(sum(e.count for e in events) / steps, 1),
            "top": [[e.key[:90], round(getattr(e, "self_device_time_total", 0) / 1e3 / steps, 4),
                     round(e.count / steps, 1)] for e in top_events(events, 20)]}


def profiled(run) -> tuple[float, list]:
    """(wall seconds, torch.profiler's per-kernel events) of run() (the device's kernels on CUDA, else CPU ops)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CUDA] if device() == "cuda" else [ProfilerActivity.CPU]
    started = time.perf_counter()
    with profile(activities=activities) as prof:
        run()
        sync()
    seconds = time.perf_counter() - started
    events = ([e for e in prof.key_averages() if getattr(e, "self_device_time_total", 0) > 0]
              or list(prof.key_averages()))
    return seconds, events


def top_events(events: list, n: int) -> list:
    return sorted(events, key=lambda e: getattr(e, "self_device_time_total", 0), reverse=True)[:n]


def train_profile(tiny: bool) -> None:
    """Where a train step's time goes, Qwen3-1.7B shape, 16 x (128 + 4,096) (the acceptance's shape): the step's
    wall time and MFU at micro-batches of 2 and 4 rows, and one step at 2 kernel by kernel (torch.profiler)."""
    results = Results("train_profile")
    peak, tokenizer, model, _ = qwen3_1p7b_on_the_card(results, tiny, max_positions=8192)
    optimizer, schedule = build_optimizer(model, OptimizerConfig(lr=1e-7, warmup_steps=1))
    n_prompts, G, P, T = (2, 4, 8, 32) if tiny else (2, 8, 128, 4096)
    for micro in (2, 4):
        try:
            results[f"micro{micro}"] = train_bench(model, optimizer, schedule, n_prompts, G, P, T, micro, peak)
        except Exception as error:  # noqa: BLE001 - out of memory is a finding
            if not is_oom(error):
                raise
            results[f"micro{micro}"] = {"error": "out of memory"}
        optimizer.zero_grad(set_to_none=True)
        free()
    batch = synthetic_batch(model, n_prompts, G, P, T)
    sync()
    seconds, events = profiled(lambda: one_step(model, optimizer, schedule, batch, 2))
    gpu_us = sum(getattr(e, "self_device_time_total", 0) for e in events)
    results["profile_micro2"] = {
        "wall_s_profiled": round(seconds, 2), "gpu_s": round(gpu_us / 1e6, 3), "kernels": sum(e.count for e in events),
        "top": [[e.key[:100], round(getattr(e, "self_device_time_total", 0) / 1e6, 4), e.count]
                for e in top_events(events, 30)]}


# -------------------------------------------------------------------------------------------- base
def base(tiny: bool) -> None:
    """The ScaleRL base with PPO-off-policy-2 at a random Qwen3-0.6B shape (character vocabulary), 4 prompts x 8
    samples, responses up to 160 tokens: the native engine, then trl, in this process, 6 steps each; the
    seconds a step over steps 2-6 (the first steps hold start-up and, on CUDA, graph capture)."""
    from recipe.config import load_recipe
    from recipe.engines import train

    results = Results("base")
    model_dir = save_random_model(TINY_SHAPE if tiny else QWEN3_0P6B, WORK / ("base_model_tiny" if tiny else
                                                                             "base_model"))
    new_tokens = 32 if tiny else 160
    # A random model never closes </think> nor answers right: the thinking budget is drawn up to
    # new_tokens - 10 (the phrase's 2 tokens and 8 of answer after it), and every group's rewards tie, so
    # batch_filter none keeps them all (the trainers then compute as much as they would with a spread).
    overrides = [f"model.path={model_dir}", "model.dtype=bfloat16", "off_policy=ppo_off_policy", "off_policy.k=2",
                 f"length_control.max_thinking={new_tokens - 10}", f"length_control.min_thinking={new_tokens // 2}",
                 "batch_filter=none", "rollout.prompts_per_batch=4", "rollout.samples_per_prompt=8",
                 f"rollout.max_new_tokens={new_tokens}", "optimizer.lr=1e-6", "optimizer.warmup_steps=1",
                 "eval.every_steps=2", "eval.points_per_doubling=0", "eval.num_prompts=4", "eval.samples_per_prompt=2",
                 "checkpoint.every_steps=1000", "tracking.mlflow=false", "task.train_size=512",
                 "task.validation_size=32", "max_steps=6"]
    runs = {}
    for engine in ("native", "trl"):
        cfg = load_recipe(None, [*overrides, f"engine.name={engine}"])
        free()
        started = time.perf_counter()
        try:
            records = train(cfg, WORK / f"base_{engine}", device=device())
            status = "ok"
        except Exception as error:  # noqa: BLE001 - the finding
            records, status = [], f"{type(error).__name__}: {str(error)[-1500:]}"
        by_step = {r["step"]: r for r in records}
        wall = {step: r.get("compute/wall_seconds") for step, r in by_step.items()}
        ok = wall.get(2) is not None and wall.get(6) is not None
        runs[engine] = {"status": status, "seconds_total": round(time.perf_counter() - started, 1),
                        "s_per_step": round((wall[6] - wall[2]) / 4, 3) if ok else None,
                        "wall_by_step": wall,
                        **{key: by_step.get(6, {}).get(key) for key in (
                            "compute/generation_seconds", "compute/training_seconds", "rollout/len_mean",
                            "train/grad_norm")}}
        results["runs"] = runs
    if runs["native"]["s_per_step"] and runs["trl"]["s_per_step"]:
        results["trl_over_native"] = round(runs["trl"]["s_per_step"] / runs["native"]["s_per_step"], 2)


# -------------------------------------------------------------------------------------------- pipeline
def save_random_model(shape: dict, path: Path, max_positions: int = 4096) -> Path:
    """A random Qwen3-shaped model with the project's character tokenizer, saved as a model directory."""
    tokenizer = build_tokenizer()
    if not (path / "config.json").is_file():
        model = qwen3(shape, len(tokenizer), tokenizer, max_positions)
        save_model_dir(model.float().cpu(), tokenizer, path)
        del model
        free()
    return path


def pipeline(tiny: bool) -> None:
    """PipelineRL-2 on one GPU: the trainer and generator processes both on cuda:0."""
    from recipe.config import load_recipe
    from recipe.engines import train

    results = Results("pipeline")
    started = time.perf_counter()
    model_dir = save_random_model(TINY_SHAPE if tiny else QWEN3_1P7B, WORK / ("pipeline_model_tiny" if tiny else
                                                                             "pipeline_model"))
    results["model_saved_seconds"] = round(time.perf_counter() - started, 1)
    new_tokens = 32 if tiny else 64  # the generator decodes at ~60 ms a step on an H200 (host-bound)
    overrides = [
        f"model.path={model_dir}", "model.dtype=bfloat16", "off_policy=pipeline_rl", "off_policy.k=2",
        # A random model never answers right: the length penalty gives rewards spread, so gradients are non-zero.
        f"length_control={{name: length_penalty, max_length: {new_tokens}, cache_length: {new_tokens * 3 // 4}}}",
        "batch_filter=none", "curriculum=uniform",
        "rollout.prompts_per_batch=8", "rollout.samples_per_prompt=8", f"rollout.max_new_tokens={new_tokens}",
        "optimizer.micro_batch_size=16", "optimizer.warmup_steps=1", "optimizer.lr=1e-6",
        "eval.every_steps=4", "eval.points_per_doubling=0", "eval.num_prompts=4", "eval.samples_per_prompt=2",
        "checkpoint.every_steps=1000", "tracking.mlflow=false", "task.train_size=512", "task.validation_size=32",
        "max_steps=4",
    ]
    cfg = load_recipe(None, overrides)
    records = []
    started = time.perf_counter()
    with GpuMemorySampler() as memory:
        try:
            train(cfg, WORK / "pipeline_run", device=device(), on_eval=records.append)
            status = "ok"
        except Exception as error:  # noqa: BLE001 - the finding
            status = f"{type(error).__name__}: {str(error)[-1500:]}"
    last = records[-1] if records else {}
    results["run"] = {
        "status": status, "seconds": round(time.perf_counter() - started, 1),
        "eval_steps": [r["step"] for r in records],
        **{key: last.get(key) for key in (
            "compute/devices", "compute/device_seconds", "compute/wall_seconds", "compute/generation_seconds",
            "compute/training_seconds", "pipeline/publish_seconds", "pipeline/trainer_idle_frac",
            "pipeline/generator_idle_frac", "pipeline/generator_tokens_per_s", "pipeline/trainer_tokens_per_s",
            "train/staleness_max", "train/logprob_mismatch", "train/grad_norm", "rollout/len_mean")},
        "peak_gib_per_process": memory.gib_per_process()}


# ------------------------------------------------------------------------------------------------- trl
def trl(tiny: bool) -> None:
    """The trl engine on CUDA, bf16 body: plain (in this process) and sharded (engine.sharding fsdp, launched
    through accelerate, one process), each with the fp32 head on and off. Same seed, same model."""
    from recipe.config import load_recipe
    from recipe.engines import train
    from recipe.model import count_parameters, load_model_dir

    results = Results("trl")
    model_dir = save_random_model(TINY_SHAPE if tiny else QWEN3_0P6B,
                                  WORK / ("trl_model_tiny" if tiny else "trl_model"))
    model, _ = load_model_dir(model_dir)
    results["model"] = {"shape": "tiny" if tiny else "Qwen3-0.6B body (character vocabulary)",
                        "params_b": round(sum(p.numel() for p in model.parameters()) / 1e9, 3),
                        "non_embedding_params_b": round(count_parameters(model) / 1e9, 3)}
    del model
    steps, new_tokens = (3, 16) if tiny else (3, 64)
    base = [f"model.path={model_dir}", "model.dtype=bfloat16", "engine.name=trl", "aggregation=token_mean",
            "curriculum=uniform", "batch_filter=none", "off_policy=ppo_off_policy", "off_policy.k=1",
            f"length_control={{name: length_penalty, max_length: {new_tokens}, cache_length: {new_tokens * 3 // 4}}}",
            "rollout.prompts_per_batch=8", "rollout.samples_per_prompt=8", f"rollout.max_new_tokens={new_tokens}",
            "optimizer.lr=1e-6", "optimizer.warmup_steps=1", "eval.every_steps=1", "eval.points_per_doubling=0",
            "eval.num_prompts=2", "eval.samples_per_prompt=2", "checkpoint.every_steps=1000", "tracking.mlflow=false",
            "task.train_size=512", "task.validation_size=32", f"max_steps={steps}"]
    # Rewards with a spread (benchmarks/gpu_spread_reward), so the runs' losses and gradients are not all 0;
    # set before the engine is imported here, and inherited by the ranks accelerate launches.
    os.environ["BENCH_SPREAD_REWARD"] = "1"
    reward_dir = str(Path(__file__).resolve().parent / "gpu_spread_reward")
    os.environ["PYTHONPATH"] = os.pathsep.join([reward_dir, *filter(None, [os.environ.get("PYTHONPATH")])])
    runpy.run_path(str(Path(reward_dir) / "sitecustomize.py"))  # this process: the plain runs
    base.append("optimizer.gradient_checkpointing=true")  # as TRL's default; FSDP's recompute is what failed
    runs = {}
    # The pair compared first (fp32 head plain / sharded), then the head off; FSDP shards on GPUs only.
    variants = [("plain", "none", True), ("fsdp", "fsdp", True), ("fsdp", "fsdp", False), ("plain", "none", False)]
    for label, sharding, fp32_head in variants:
        if sharding != "none" and device() == "cpu":
            continue
        name = f"{label}_{'fp32' if fp32_head else 'bf16'}_head"
        cfg = load_recipe(None, [*base, f"engine.sharding={sharding}", f"precision.fp32_head={fp32_head}"])
        free()
        started = time.perf_counter()
        with GpuMemorySampler() as memory:
            try:
                records = train(cfg, WORK / f"trl_{name}", device=device())
                status = "ok"
            except Exception as error:  # noqa: BLE001 - the finding
                records, status = [], f"{type(error).__name__}: {str(error)[-1500:]}"
        seconds = time.perf_counter() - started
        trained = [r for r in records if r["step"] > 0]
        wall = [r.get("compute/wall_seconds") for r in records]
        step_seconds = (wall[-1] - wall[0]) / steps if len(trained) == steps and None not in wall else None
        tokens = sum(r.get("rollout/len_mean", 0) * 64 for r in trained)
        runs[name] = {"status": status, "seconds_total": round(seconds, 1),
                      "s_per_step": None if step_seconds is None else round(step_seconds, 2),
                      "generated_tokens_per_s": round(tokens / (wall[-1] - wall[0])) if step_seconds else None,
                      # Each evaluation record holds its step's loss (TRL rounds it to 4 places) and grad norm.
                      "losses": [r.get("train/loss") for r in trained],
                      "grad_norms": [r.get("train/grad_norm") for r in trained],
                      "eval_pass_rate_step0": records[0].get("eval/pass_rate") if records else None,
                      "len_mean": [r.get("rollout/len_mean") for r in trained],
                      "peak_gib_this_process": peak_gib() if sharding == "none" else None,
                      "peak_gib_per_process": memory.gib_per_process()}
        results["runs"] = runs
    for head in ("fp32", "bf16"):
        plain, sharded = runs.get(f"plain_{head}_head", {}), runs.get(f"fsdp_{head}_head", {})
        for key in ("losses", "grad_norms"):
            if plain.get(key) and sharded.get(key):
                results[f"{key}_plain_vs_fsdp_{head}_head"] = [
                    None if a is None or b is None else abs(a - b) for a, b in zip(plain[key], sharded[key])]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["native", "decode", "train_profile", "base", "pipeline", "trl"])
    parser.add_argument("--tiny", action="store_true", help="tiny shapes on any device: a logic check, not a figure")
    parser.add_argument("--skip-decode", action="store_true", help="native: the train step and length wall only "
                        "(writes native_train.json)")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    if args.part == "native":
        native(args.tiny, args.skip_decode)
    else:
        {"decode": decode, "train_profile": train_profile, "base": base, "pipeline": pipeline,
         "trl": trl}[args.part](args.tiny)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
