"""Benchmarks, run as `python -m bench.<name>`: each prints a ratio to a baseline measured in the same run."""
