"""The store contract, one body run over every store, and the database store's own tests."""
