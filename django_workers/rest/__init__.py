"""The REST API: DRF views over the public task and workflow API, scoped by ``request.user``.

Mount it with ``path("workers/", include("django_workers.urls"))``; DRF is
imported only inside this package.
"""
