"""One step's gradients through the trl engine's loss on a fixed batch, in however many processes run it.

    python -m tests.recipe.trl_one_step MODEL_DIR OUT                      one process, the whole batch
    python -m accelerate.commands.launch --multi_gpu --num_processes 2 ... -m tests.recipe.trl_one_step MODEL_DIR OUT

Each process takes its slice of the batch's rows (as TRL splits a generation batch), computes
ScaleRLGRPOTrainer._compute_loss with the scale build_trainer set (x processes) and backpropagates through the
DDP-wrapped model, which averages the ranks' gradients; rank 0 saves them to OUT. The test compares the
gradients of 2 processes x half the batch with 1 process x the whole batch
(tests/recipe/test_trl_engine.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch


def fixed_batch(vocab: int, prompts: int = 2, samples: int = 4, prompt_width: int = 5, width: int = 7) -> dict:
    """prompts x samples rows of random tokens, unequal response lengths, advantages of both signs."""
    generator = torch.Generator().manual_seed(0)
    rows = prompts * samples
    prompt_ids = torch.randint(4, vocab, (prompts, prompt_width), generator=generator).repeat_interleave(samples, 0)
    lengths = torch.randint(1, width + 1, (rows,), generator=generator)
    return {"prompt_ids": prompt_ids, "prompt_mask": torch.ones_like(prompt_ids),
            "completion_ids": torch.randint(4, vocab, (rows, width), generator=generator),
            "completion_mask": (torch.arange(width)[None, :] < lengths[:, None]).long(),
            "advantages": torch.randn(rows, generator=generator),
            "old_per_token_logps": -3.0 + 0.3 * torch.randn(rows, width, generator=generator),
            "group_ids": torch.arange(prompts).repeat_interleave(samples), "lengths": lengths}


def main(model_dir: str, out: str) -> None:
    from recipe.config import load_recipe
    from recipe.engines.trl import build_trainer, row_weights
    from recipe.model import load_model_dir
    from recipe.run import build_components
    from recipe.tasks import build_task
    from tests.conftest import tiny_override_list

    torch.set_num_threads(1)
    cfg = load_recipe(None, [*tiny_override_list(model_dir), "engine.name=trl", "aggregation=prompt_mean",
                             "off_policy.k=1", "rollout.prompts_per_batch=2"])
    model, tokenizer = load_model_dir(Path(model_dir))
    components = build_components(cfg)
    trainer = build_trainer(cfg, model, tokenizer, build_task(cfg.task, tokenizer), components,
                            Path(out).parent / "trl", "cpu")
    accelerator = trainer.accelerator
    batch = fixed_batch(len(tokenizer))
    batch["recipe_row_weights"] = row_weights(components.aggregation, batch["lengths"], batch["group_ids"])
    local = len(batch["lengths"]) // accelerator.num_processes
    rows = slice(accelerator.process_index * local, (accelerator.process_index + 1) * local)
    inputs = {key: value[rows] for key, value in batch.items() if key not in ("group_ids", "lengths")}
    wrapped = accelerator.prepare(model)
    wrapped.train()
    accelerator.backward(trainer._compute_loss(wrapped, inputs))
    if accelerator.is_main_process:
        torch.save({name: p.grad for name, p in accelerator.unwrap_model(wrapped).named_parameters()}, out)


if __name__ == "__main__":
    main(*sys.argv[1:])
