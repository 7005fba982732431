"""The job overrides every end-to-end sweep test shares: seconds-long jobs of a ~10k-parameter model."""

# Indented to sit under a spec's `overrides:` key. Synchronous off-policy mode: deterministic curves,
# so the local and SLURM executors can be compared exactly.
TINY_JOB_OVERRIDES = """\
  model: {hidden_size: 32, intermediate_size: 64, num_layers: 1, num_heads: 2}
  warm_start: {steps: 20, batch_size: 16}
  task: {train_size: 64, validation_size: 16}
  rollout: {prompts_per_batch: 4, samples_per_prompt: 4}
  eval: {every_steps: 2, points_per_doubling: 0, num_prompts: 8, samples_per_prompt: 2}
  off_policy: {name: ppo_off_policy, k: 2}
  checkpoint: {every_steps: 2}
"""
