"""Hardware-in-the-loop tests: the same test functions on every rig (see conftest.py)."""
