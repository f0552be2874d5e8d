"""Benchmark support: CUDA-event timing with rotated inputs, the measured ceilings, and
the ``python -m cufuse.bench`` command line."""
