"""The engine: the step, optimizer, loop, logs, checkpoints, workdir, devices and processes, and
the model's view for the devices; what pre-training (pretraining/) and fine-tuning (finetune/)
run."""
