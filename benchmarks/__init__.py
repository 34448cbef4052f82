"""Benchmarks of the tuner, each run as `python -m benchmarks.NAME` from the repository root."""
