"""Small shared helpers, torch-free unless a function says otherwise: registries and lazy loading, atomic writes,
hashes that key caches, statistics, progress, numeric precision, the shipped YAML's location, the figure style."""
