"""The ScaleRL base recipe as one explicit value (mirrored by recipe/scalerl.yaml, checked by a test).

Axis choices are the paper's ScaleRL recipe (arXiv 2510.13786: the design choices studied in
section 3, combined into ScaleRL in section 4). Sizes and budgets are those of the embedded CPU
testbed; a cluster recipe overrides model, task, rollout and length budgets in its YAML.
"""

from __future__ import annotations

from components.length_control import INTERRUPTION_PHRASE
from recipe.run_config import RecipeConfig

SCALERL = RecipeConfig(
    loss={"name": "cispo", "eps_max": 4.0, "eps_min": 0.0},
    aggregation={"name": "prompt_mean"},
    advantage_norm={"name": "batch"},
    batch_filter={"name": "zero_variance"},
    curriculum={"name": "no_positive_resampling", "threshold": 0.9},
    length_control={
        "name": "interruption",
        "min_thinking": 6,
        "max_thinking": 12,
        "answer_budget": 8,
        "phrase": INTERRUPTION_PHRASE,
    },
    # PipelineRL-8: a generator and a trainer process, one device (core or GPU) each; new weights reach the
    # generator when they arrive (timing "real"; trainer_speed serves the "modeled" timing only).
    off_policy={"name": "pipeline_rl", "k": 8, "generator_devices": 1, "trainer_devices": 1, "timing": "real",
                "trainer_speed": 3.4},
    precision={"name": "lm_head", "fp32_head": True},
    kl_penalty={"name": "none"},
)
