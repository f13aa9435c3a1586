"""Pure tests: no runtime threads, no worker processes (authority, bad input, checks)."""
