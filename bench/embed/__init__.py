"""Benchmarks of the embedding backends: speed, agreement with fp32, install size."""
