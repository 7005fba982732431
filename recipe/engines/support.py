"""Which recipe choices each training engine can run, and how: the one place that decides it.

A row per (axis, choice): how the native engine runs it, and how TRL's GRPOTrainer does (a config
field it has, an extension point we fill in recipe/engines/trl/, or a refusal with the fix).
`check_engine` refuses a recipe before any job starts; `support_table` prints docs/engines.md's table.
Torch-free: the sweep planner calls it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from components.registry import ConfigError

ENGINES = ("native", "trl")


class UnsupportedRecipe(ConfigError):
    """A recipe choice the chosen engine cannot run; the message names the axis, the choice and the fix."""


@dataclass(frozen=True)
class Support:
    kind: str  # "config" (a TRL setting), "emulated" (our code at a TRL extension point) or "refused"
    how: str


def config(how: str) -> Support:
    return Support("config", how)


def emulated(how: str) -> Support:
    return Support("emulated", how)


def refused(how: str) -> Support:
    return Support("refused", how)


AGGREGATION_HOW = ("our aggregation's weights over each step's minibatch (every rank's rows), applied per token by "
                   "ScaleRLGRPOTrainer._compute_loss; step j of a generation trains minibatch j, as native "
                   "(TRL's shuffle of the generation batch is not used)")

CURRICULUM_HOW = ("our curriculum component picks each generation batch's prompts (ScaleRLGRPOTrainer."
                  "curriculum_inputs): the native engine's draws, from every earlier batch's pass rates")

# off_policy pipeline_rl on trl runs TRL's AsyncGRPOTrainer, which computes the loss and the advantages itself
# (the PPO clip, eps_low / eps_high, summed over the batch's tokens / their count; each group's rewards
# z-scored in its rollout worker, zero-variance groups at advantage 0), samples its own prompts and generates
# whole responses on its vLLM server: our components cannot reach inside it. The choices it computes, per axis
# (an axis not named takes any choice: our reward function shapes the rewards, the head follows the model).
ASYNC_GRPO_CHOICES: dict[str, tuple[str, ...]] = {
    "loss": ("dapo", "grpo"), "aggregation": ("token_mean",), "advantage_norm": ("prompt",),
    "batch_filter": ("none",), "curriculum": ("uniform",), "length_control": ("none", "length_penalty"),
}

ASYNC_GRPO_HOW = ("TRL's AsyncGRPOTrainer (trl.experimental.async_grpo): generation on a vLLM server in flight "
                  "with training, max_staleness = k, weights sent every step; it computes its own loss and "
                  "advantages, so only with " + ", ".join(f"{axis} {'/'.join(names)}" for axis, names in
                                                    ASYNC_GRPO_CHOICES.items()))

# (axis, choice) -> how the trl engine runs it. The native engine runs every registered choice.
TRL_SUPPORT: dict[tuple[str, str], Support] = {
    ("loss", "cispo"): emulated("our loss component, called by ScaleRLGRPOTrainer._compute_loss on TRL's logprobs"),
    ("loss", "dapo"): emulated("our loss component, called by ScaleRLGRPOTrainer._compute_loss on TRL's logprobs"),
    ("loss", "grpo"): emulated("our loss component, called by ScaleRLGRPOTrainer._compute_loss on TRL's logprobs"),
    ("loss", "gspo"): emulated("our loss component, called by ScaleRLGRPOTrainer._compute_loss on TRL's logprobs"),
    ("aggregation", "token_mean"): emulated(AGGREGATION_HOW),
    ("aggregation", "sample_mean"): emulated(AGGREGATION_HOW),
    ("aggregation", "prompt_mean"): emulated(AGGREGATION_HOW),
    ("advantage_norm", "batch"): emulated("our advantage_norm recomputes TRL's advantages from the same rewards"),
    ("advantage_norm", "prompt"): emulated("our advantage_norm recomputes TRL's advantages from the same rewards"),
    ("advantage_norm", "none"): emulated("our advantage_norm recomputes TRL's advantages from the same rewards"),
    ("batch_filter", "zero_variance"): emulated("a filtered group's loss mask is zeroed: no gradient, and the "
                                                "aggregation's weights count only kept rows, as native"),
    ("batch_filter", "none"): config("TRL's default: zero-variance groups stay, with advantage 0"),
    ("batch_filter", "dynamic_sampling"): refused("TRL generates each generation batch once, for its k steps: it "
                                                  "has no hook to sample more prompts for a minibatch"),
    ("curriculum", "uniform"): emulated(CURRICULUM_HOW),
    ("curriculum", "no_positive_resampling"): emulated(CURRICULUM_HOW + "; the retired set is saved in TRL's "
                                                      "checkpoints"),
    ("length_control", "none"): config("max_completion_length = rollout.max_new_tokens; a cut sample scores wrong"),
    ("length_control", "length_penalty"): emulated("the DAPO overlong penalty added in our reward function"),
    ("length_control", "interruption"): emulated("interrupting_rollout at TRL's rollout_func: TRL's generation "
                                                 "to the thinking budget, the phrase forced (env_mask 0), then the "
                                                 "answer budget"),
    ("off_policy", "ppo_off_policy"): config("steps_per_generation = k optimizer steps per generation "
                                             "(old logprobs recomputed by TRL at generation time)"),
    ("off_policy", "pipeline_rl"): config(ASYNC_GRPO_HOW),
    ("kl_penalty", "none"): config("beta = 0: TRL keeps no reference model"),
    ("kl_penalty", "reference"): emulated("beta = coef: TRL runs its reference model at generation time and our "
                                          "kl_penalty turns its logprobs into the penalty (k1 or k3); reset_every N: "
                                          "TRL's sync_ref_model every N steps, mixup alpha 1. A reset between a "
                                          "generation's k minibatches reaches the next generation (native: the next "
                                          "step), and a resumed run's reference is the starting model until its "
                                          "next reset"),
    ("precision", "lm_head"): emulated("fp32_head true: cast_lm_head_to_fp32; false on a float32 body: the head's "
                                       "forward runs in bf16 as the native engine's does"),
}

# Choices the trl engine refuses only in combination: (axis, choice, other axis, other choice, fix).
TRL_REFUSED_PAIRS: tuple[tuple[str, str, str, str, str], ...] = ()

# How far each trl row is proven: "CPU test" (a test of the default run trains or checks it through TRL:
# tests/recipe/test_trl_engine.py), "GPU run" (BENCHMARKS.md, "On one GPU"), "not verified". Refused rows have
# nothing to verify. The native engine runs every choice in the default tests.
CPU_TEST, GPU_RUN, NOT_VERIFIED = "CPU test", "GPU run", "not verified"
TRL_VERIFIED: dict[tuple[str, str], str] = {
    **{("loss", name): CPU_TEST for name in ("cispo", "dapo", "grpo", "gspo")},
    **{("aggregation", name): CPU_TEST for name in ("prompt_mean", "sample_mean", "token_mean")},
    **{("advantage_norm", name): CPU_TEST for name in ("batch", "prompt", "none")},
    ("batch_filter", "zero_variance"): CPU_TEST, ("batch_filter", "none"): CPU_TEST,
    ("curriculum", "uniform"): CPU_TEST, ("curriculum", "no_positive_resampling"): CPU_TEST,
    ("length_control", "length_penalty"): CPU_TEST, ("length_control", "none"): CPU_TEST,
    ("length_control", "interruption"): f"{CPU_TEST} (transformers generation; colocated vLLM, the CPU build)",
    ("off_policy", "ppo_off_policy"): CPU_TEST,
    # Its config and refusals are tested on CPU; it needs a vLLM server on a GPU to run at all.
    ("off_policy", "pipeline_rl"): "GPU only, not verified here",
    ("kl_penalty", "none"): CPU_TEST, ("kl_penalty", "reference"): CPU_TEST,
    ("precision", "lm_head"): f"{CPU_TEST}; {GPU_RUN} (fp32 head, bf16 body, H200)",
}
# The trl engine's own settings: (setting, how, verified).
TRL_ENGINE_ROWS = (
    ("engine.num_processes > 1", "accelerate launch --multi_gpu: torchrun ranks, DDP (gloo on CPU, NCCL on GPUs)",
     f"{CPU_TEST} (2 gloo ranks, kill -9 of one, resume); {NOT_VERIFIED} on GPUs"),
    ("engine.sharding fsdp", "PyTorch FSDP2 through accelerate (GPUs only; refused on CPU)",
     f"{CPU_TEST} (accelerate forced to shard a gloo group); {GPU_RUN} (1 process, H200, fp32 and bf16 head)"),
    ("engine.sharding zero3", "DeepSpeed ZeRO-3 through accelerate (GPUs with deepspeed; refused where it is missing)",
     f"{NOT_VERIFIED} (launch flags checked by accelerate's parser; deepspeed cannot be installed on the CPU machine)"),
    ("engine.sharding <file>", "an accelerate config file (`accelerate config`), passed as --config_file",
     f"{NOT_VERIFIED} (checked to exist and parse)"),
    ("executor.slurm.nodes > 1", "one accelerate launcher per node: --machine_rank SLURM_NODEID, main host the "
     "first of SLURM_JOB_NODELIST, port derived from SLURM_JOB_ID",
     f"{CPU_TEST} (a 1-node SLURM job through the same path); {NOT_VERIFIED} on several nodes"),
    ("engine.vllm_mode colocate", "TRL's colocated vLLM engine in each training process, started with the recipe's "
     "dtype and head; weights loaded by vLLM's layerwise reload (TRL's load_weights fails on the CPU build); "
     "interruption samples each row to its own budget (recipe/engines/trl_vllm.py)",
     f"{CPU_TEST} (the CPU build: the ScaleRL base, PPO-off-policy for PipelineRL); {NOT_VERIFIED} on GPUs"),
    ("engine.vllm_mode server", "a `trl vllm-serve` server; weights sent over NCCL (GPUs only: refused on CPU)",
     NOT_VERIFIED),
)
# Who generates, per engine: (rollout.generator, native engine and how far proven, trl engine, trl verified).
GENERATOR_ROWS = (
    ("torch", f"yes: recipe/generator.py's decode loop on the policy's model ({CPU_TEST}; {GPU_RUN}, H200)",
     "config: TRL's transformers generation (engine.vllm_mode null)", f"{CPU_TEST}; {GPU_RUN} (H200)"),
    ("vllm", f"yes: an in-process vLLM engine serving the policy's weights, recipe/vllm_generator.py ({CPU_TEST} "
             f"with the CPU build; {NOT_VERIFIED} on GPU: benchmarks/gpu_proof.sh)",
     "refused: the trl engine generates with vLLM through engine.vllm_mode colocate (below)", "-"),
)


def axis_choices(recipe: Mapping[str, Any]) -> dict[str, str]:
    """{axis: chosen component name} of a recipe dict (or RecipeConfig's dict form)."""
    from components import REGISTRIES

    return {axis: recipe[axis]["name"] for axis in REGISTRIES}


def check_engine(recipe: Mapping[str, Any]) -> None:
    """Raise UnsupportedRecipe if recipe["engine"]["name"] cannot run the recipe's choices."""
    engine = recipe["engine"]["name"]
    if engine not in ENGINES:
        raise UnsupportedRecipe(f"engine.name: got {engine!r}, expected one of {', '.join(ENGINES)}")
    if recipe["engine"]["vllm_mode"] not in (None, "colocate", "server"):
        raise UnsupportedRecipe(f"engine.vllm_mode: got {recipe['engine']['vllm_mode']!r}, expected null, colocate "
                                "or server")
    url = recipe["engine"]["vllm_server_url"]
    if not (isinstance(url, str) and url.startswith(("http://", "https://"))):
        raise UnsupportedRecipe(f"engine.vllm_server_url: got {url!r}, expected the vLLM server's base URL, e.g. "
                                "http://localhost:8000")
    if recipe["engine"]["vllm_mode"] == "server" and recipe["engine"]["vllm_server_devices"] < 1:
        raise UnsupportedRecipe("engine.vllm_server_devices: got 0 with engine.vllm_mode server; set it to the GPUs "
                                "your vLLM server runs on (the job is charged for them: they generate for it)")
    if recipe["rollout"]["generator"] == "vllm":
        check_vllm_generator(recipe)
    if engine == "native":
        if recipe["engine"]["sharding"] != "none":
            raise UnsupportedRecipe("engine.sharding: only engine trl shards a model; set engine.sharding none "
                                    "for engine native (or engine.name trl)")
        if recipe["engine"]["vllm_mode"] is not None:
            raise UnsupportedRecipe("engine.vllm_mode: only engine trl uses it; set it to null for engine native")
        if recipe["batch_filter"]["name"] == "dynamic_sampling" and recipe["off_policy"]["name"] == "pipeline_rl":
            raise UnsupportedRecipe("batch_filter: dynamic_sampling cannot run with off_policy pipeline_rl (its "
                                    "generator streams each minibatch's groups as the trainer takes them, and a refill "
                                    "would need more prompts in flight); use off_policy ppo_off_policy, or "
                                    "batch_filter zero_variance (ScaleRL's drop-only form)")
        if recipe["engine"]["num_processes"] != 1:
            raise UnsupportedRecipe("engine.num_processes: the native engine runs one process per role; "
                                    "set engine.num_processes 1 (use off_policy pipeline_rl's *_devices to split "
                                    "roles) "
                                    "or engine.name trl for accelerate-launched multi-GPU training")
        return
    choices = axis_choices(recipe)
    for axis, choice in choices.items():
        support = TRL_SUPPORT.get((axis, choice))
        if support is None or support.kind == "refused":
            why = support.how if support else "no mapping to TRL yet; use engine native"
            raise UnsupportedRecipe(f"{axis}: {choice} cannot run on engine trl ({why}); engines that can: native")
    if choices["off_policy"] == "pipeline_rl":
        check_async_grpo(recipe, choices)
    for axis, choice, other, other_choice, fix in TRL_REFUSED_PAIRS:
        if choices[axis] == choice and choices[other] == other_choice:
            raise UnsupportedRecipe(f"{other}: {other_choice} with {axis} {choice} cannot run on engine trl ({fix}); "
                                    "engines that can: native")
    if recipe["optimizer"]["micro_batch_tokens"]:
        raise UnsupportedRecipe(f"optimizer.micro_batch_tokens: {recipe['optimizer']['micro_batch_tokens']} cannot "
                                "run on engine trl (TRL accumulates micro-batches of a fixed number of rows); set "
                                "optimizer.micro_batch_tokens 0 and bound memory with optimizer.micro_batch_size")
    if recipe["rollout"]["decode_token_budget"]:
        raise UnsupportedRecipe(f"rollout.decode_token_budget: {recipe['rollout']['decode_token_budget']} cannot run "
                                "on engine trl (TRL generates the rollouts itself); set it to 0 and bound generation "
                                "memory with TRL's vLLM settings")
    micro = recipe["optimizer"]["micro_batch_size"]
    batch = recipe["rollout"]["prompts_per_batch"] * recipe["rollout"]["samples_per_prompt"]
    if micro and batch % (micro * recipe["engine"]["num_processes"]):
        raise UnsupportedRecipe(f"optimizer.micro_batch_size: {micro} x engine.num_processes must divide the "
                                f"minibatch of {batch} sequences on engine trl (TRL accumulates whole micro-batches)")


def check_vllm_generator(recipe: Mapping[str, Any]) -> None:
    """rollout.generator vllm: the native engine's, and without the torch generator's own memory bound."""
    if recipe["engine"]["name"] != "native":
        raise UnsupportedRecipe("rollout.generator: vllm is the native engine's generator; engine trl generates with "
                                "vLLM through engine.vllm_mode colocate (TRL's colocated engine): set "
                                "rollout.generator torch and engine.vllm_mode colocate")
    for key in ("rollout", "eval"):
        if recipe[key]["decode_token_budget"]:
            raise UnsupportedRecipe(f"{key}.decode_token_budget: {recipe[key]['decode_token_budget']} bounds the torch "
                                    "generator's decode batches; vLLM's key/value cache is a fixed pool "
                                    "(rollout.vllm_cpu_kv_cache_gib, rollout.vllm_gpu_memory_utilization): set "
                                    f"{key}.decode_token_budget 0, or rollout.generator torch")


def check_async_grpo(recipe: Mapping[str, Any], choices: Mapping[str, str]) -> None:
    """off_policy pipeline_rl on engine trl: a vLLM server, and only the choices TRL's AsyncGRPOTrainer computes."""
    if recipe["engine"]["vllm_mode"] != "server":
        raise UnsupportedRecipe("off_policy: pipeline_rl on engine trl runs TRL's AsyncGRPOTrainer, which generates on "
                                "a vLLM server: set engine.vllm_mode server and engine.vllm_server_url (a running "
                                "`trl vllm-serve`), or use off_policy ppo_off_policy, or engine native")
    for axis, allowed in ASYNC_GRPO_CHOICES.items():
        if choices[axis] not in allowed:
            raise UnsupportedRecipe(f"{axis}: {choices[axis]} with off_policy pipeline_rl cannot run on engine trl "
                                    "(TRL's "
                                    "AsyncGRPOTrainer computes its own loss and advantages and samples its own "
                                    f"prompts); set {axis} {' or '.join(allowed)}, or off_policy ppo_off_policy, or "
                                    "engine native")
    if recipe["precision"]["fp32_head"] and recipe["model"]["dtype"] != "float32":
        raise UnsupportedRecipe("precision: fp32_head true with off_policy pipeline_rl cannot run on engine trl "
                                "(TRL's AsyncGRPOTrainer has no fp32 head for a bf16 body); set precision.fp32_head "
                                "false or model.dtype float32, or off_policy ppo_off_policy, or engine native")


def support_table() -> str:
    """docs/engines.md's table: axis, choice, native, trl (config / emulated how / refused why), how far trl's row is
    verified; then the trl engine's own settings."""
    from components import REGISTRIES

    lines = ["| axis | choice | native | trl | trl verified |", "|---|---|---|---|---|"]
    for axis, registry in REGISTRIES.items():
        for choice in registry.names():
            support = TRL_SUPPORT[(axis, choice)]
            verified = "-" if support.kind == "refused" else TRL_VERIFIED.get((axis, choice), NOT_VERIFIED)
            lines.append(f"| {axis} | {choice} | yes | {support.kind}: {support.how} | {verified} |")
    for axis, choice, other, other_choice, fix in TRL_REFUSED_PAIRS:
        lines.append(f"| {axis} + {other} | {choice} + {other_choice} | yes | refused: {fix} | - |")
    for generator, native, trl, verified in GENERATOR_ROWS:
        lines.append(f"| rollout.generator | {generator} | {native} | {trl} | {verified} |")
    for setting, how, verified in TRL_ENGINE_ROWS:
        lines.append(f"| engine | {setting} | no | {how} | {verified} |")
    return "\n".join(lines)
