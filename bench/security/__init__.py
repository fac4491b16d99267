"""Benchmarks of the safety limits: runaway queries per dialect (time to stop, memory)."""
