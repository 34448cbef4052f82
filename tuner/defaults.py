"""Defaults shared by the Python API, the command line and the benchmarks; importable without TVM."""

# Configs measured per round. Each round's search costs about as much whatever its size (features
# of a few hundred candidates), so 32 keeps search under a fifth of the tuning time on the CPU
# while the model still retrains 8 times in 256 trials.
BATCH_SIZE = 32
