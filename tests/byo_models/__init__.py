"""External models for the tests: plain modules, capsule outputs and models that break the contract."""
