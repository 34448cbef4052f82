"""Defaults shared by the Python API, the command line and the benchmarks; importable without TVM."""

# Configs measured per round. A round's search costs about the same whatever its size (features
# of a few hundred candidates), so 32 spends about half the share of tuning time on search that
# 16 did, while the model still retrains 8 times in 256 trials.
BATCH_SIZE = 32
