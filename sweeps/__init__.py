"""Sweeps: the spec schema, the planner, launchers, run state and the `sweep` command line."""
