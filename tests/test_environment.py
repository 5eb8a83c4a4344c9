"""The resolved environment: MLflow 3 despite torchattacks' requests pin (see pyproject.toml [tool.uv])."""

from importlib import metadata


def test_mlflow_3_and_torchattacks_installed_together():
    assert metadata.version("mlflow").startswith("3.")
    assert metadata.version("torchattacks") == "3.5.1"
    import torchattacks  # noqa: F401  (imports despite its requests~=2.25.1 pin being overridden)
