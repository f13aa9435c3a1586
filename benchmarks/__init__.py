"""Benchmarks of django-workers against the performance targets and anchors; see run.py."""
