"""Real ``runworkers`` subprocesses on the test database."""
