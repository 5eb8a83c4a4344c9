"""The driver: plan a suite's units, execute them through a launcher (local, Ray, SLURM), keep each finished unit on
disk, log it to MLflow and write the tables."""
