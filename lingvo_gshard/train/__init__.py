"""Training: the loop that runs a registered experiment, its checkpoints, its wall-clock budget and what the
log directory records (the trainer binary is tools/trainer.py)."""
