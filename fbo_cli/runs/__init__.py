"""A run's life: config, runner, checkpoint, identity, the run directory's files."""
