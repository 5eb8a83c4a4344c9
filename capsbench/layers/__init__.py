"""Capsule building blocks, apart from the architectures that use them (as timm's layers/ from its models/): squash,
primary capsules, votes and the decoder; dynamic, EM, self-attention and self-routing; the straight-through switch."""
