"""The ScaleRL recipe: its typed config, the base recipe value, and the RL training run."""
