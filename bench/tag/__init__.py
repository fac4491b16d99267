"""Benchmarks of the TAG methods (TAG dev / held-out sets) and the LM operators."""
