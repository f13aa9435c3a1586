"""An in-process WorkerRuntime: runs, the django.tasks backend, handles, races between threads."""
