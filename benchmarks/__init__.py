"""Benchmarks of django-workers against the SPEC §10 targets and anchors; see run.py."""
