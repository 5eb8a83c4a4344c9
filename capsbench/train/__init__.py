"""Training: protocols (how images become inputs and targets), the training step and loop, adversarial training,
evaluation helpers, and the checkpoint cache that keys trained weights on everything that determines them."""
