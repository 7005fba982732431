"""Swappable recipe components, one registry per ablation axis (see components.registry).

Importing this package does not import torch: components take tensors and call their methods, and
import torch inside the few functions that need the module, so the sweep planner stays light.
"""

from components.advantages import ADVANTAGE_NORMS
from components.aggregation import AGGREGATIONS
from components.curricula import CURRICULA
from components.filters import BATCH_FILTERS
from components.kl import KL_PENALTIES
from components.length_control import LENGTH_CONTROLS
from components.losses import LOSSES
from components.off_policy import OFF_POLICY_MODES
from components.precision import PRECISIONS
from components.registry import ConfigError, Registry

# Axis name (the recipe config field) -> registry, in the order `sweep components` prints them.
REGISTRIES: dict[str, Registry] = {
    "loss": LOSSES,
    "aggregation": AGGREGATIONS,
    "advantage_norm": ADVANTAGE_NORMS,
    "batch_filter": BATCH_FILTERS,
    "curriculum": CURRICULA,
    "length_control": LENGTH_CONTROLS,
    "off_policy": OFF_POLICY_MODES,
    "precision": PRECISIONS,
    "kl_penalty": KL_PENALTIES,
}

__all__ = ["REGISTRIES", "ConfigError", "Registry"]
