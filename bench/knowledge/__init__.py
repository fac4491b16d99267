"""Benchmarks of domain-knowledge retrieval (evidence F1) and its effect on execution accuracy."""
