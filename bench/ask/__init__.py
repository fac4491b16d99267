"""Benchmarks of `tagql ask` end to end on BIRD dev: execution accuracy, latency, decoding, cold start."""
