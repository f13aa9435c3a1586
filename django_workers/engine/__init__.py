"""The workflow engine: the pure machine, the rows it reads, and the routine stores run.

Below the stores: ``machine`` decides, ``records`` shapes a workflow's rows and
snapshots, ``persistence`` is what a store runs in its ending transaction, and
``context`` is a running node's view of its workflow. Nothing here imports a
store, the submission path or the user-facing ``workflows`` package.
"""
