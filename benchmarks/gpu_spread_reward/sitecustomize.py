"""For benchmarks/bench_gpu.py's trl part only, which puts this directory on PYTHONPATH with
BENCH_SPREAD_REWARD=1. A random model never answers right, so every reward is -1, every advantage and
gradient 0, and a plain and a sharded run would compare zeros. This subtracts the fraction of even token
ids in each completion (random text: a spread within every group) from each reward, in the rewards TRL
sees and in the ones our advantage computation reads (RecipeRewards.last), in every process of a run
(the ranks accelerate launches import this too)."""

import os

if os.environ.get("BENCH_SPREAD_REWARD") == "1":
    import torch

    from recipe.engines import trl as _trl

    _task_reward = _trl.RecipeRewards.__call__

    def _with_spread(self, prompts, completions, completion_ids, answer, **kwargs):
        _task_reward(self, prompts, completions, completion_ids, answer, **kwargs)
        even = torch.tensor([sum(int(i) % 2 == 0 for i in ids) / max(1, len(ids)) for ids in completion_ids])
        self.last["rewards"] = self.last["rewards"] - even
        return self.last["rewards"].tolist()

    _trl.RecipeRewards.__call__ = _with_spread
