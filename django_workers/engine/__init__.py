"""The workflow engine: the pure machine, the rows it reads, and the answers stores write.

Below the stores: ``machine`` decides, ``records`` shapes a workflow's rows and
snapshots, ``persistence`` turns what a store read in its ending transaction
(the locked workflow rows, what ended, the node records it asks for) into the
writes the store makes, and ``context`` is a running node's view of its
workflow. Nothing here imports a store, the database, the submission path or
the user-facing ``workflows`` package.
"""
