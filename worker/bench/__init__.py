"""Benchmarks that compare groups side by side in one run (``specd bench``)."""
