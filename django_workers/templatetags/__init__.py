"""Template tags of django_workers: ``{% load django_workers %}``."""
