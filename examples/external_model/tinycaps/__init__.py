"""tinycaps: a small CapsNet in plain PyTorch (no capsbench import), evaluated by capsbench as an external model."""
