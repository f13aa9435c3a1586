"""The example shop: background tasks for orders, and the ``demo`` command."""
