"""Workflows: DAGs of tasks across queues, with ``.always()`` nodes and saga compensation.

So far the package holds only ``machine``, the pure state machine that decides what
each end of a node does. The builder, the persistence and the handles come later;
nothing here imports Django.
"""
