"""Outside models for the tests of issue 25: plain modules, capsule outputs and models that break the contract."""
