"""Training: typed parts built from a config, the optimizer step, the schedule and the epoch loop."""
