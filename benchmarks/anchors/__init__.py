"""The performance anchors (django-tasks-db, Procrastinate), driven from their own venv.

Only our scripts that install and drive them live here; their code is installed
into ``benchmarks/.venv-anchors`` by ``run.py --anchors`` and never committed.
"""
