"""Grids of runs: specs, compare, tune, settle, run batches, executors."""
