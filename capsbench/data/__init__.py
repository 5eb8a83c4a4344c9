"""Dataset registry and the in-memory splits every suite consumes."""

from capsbench.data.datasets import DATASETS, SPLIT_SEED, DatasetSpec, Splits, load_splits
from capsbench.data.augment import random_shift
from capsbench.data.batches import as_images, batches

__all__ = ["DATASETS", "SPLIT_SEED", "DatasetSpec", "Splits", "as_images", "batches", "load_splits", "random_shift"]
