"""Benchmarks of schema routing over a collection (Spider / Spider-Syn / BIRD) and routed `ask`."""
