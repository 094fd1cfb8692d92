"""The training run: the step, optimizer, loop, logs, checkpoints, workdir, devices and processes, and the pre-training run that ties them together."""
