"""The robustness suite: its Params (params), the suite and its attack plan (suite), the masking checks (checks) and
the detection-aware measurement (detection). Importing the package imports nothing heavy."""
