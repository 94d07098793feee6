"""Training: the loop that runs a registered experiment (the trainer binary is tools/trainer.py)."""
