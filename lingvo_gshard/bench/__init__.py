"""Benchmarks against other implementations, measured in the same run (tools/*_benchmark.py use them)."""
