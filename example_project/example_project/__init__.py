"""A small Django site that uses django-workers the way an adopting project would."""
