"""Benchmarks (not tests): see bench/__main__.py."""
