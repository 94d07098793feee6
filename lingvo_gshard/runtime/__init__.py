"""How a program runs: the step runner (jit, TF graph with XLA islands, DTensor, TPU strategy), the learner's
compiled steps, hardware detection and the resolution of params an experiment leaves to the machine."""
