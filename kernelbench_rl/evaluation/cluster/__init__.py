"""The evaluator over Dask (one worker per GPU of a cluster): the client side, the worker plugin, the spec of a
cluster to start. The same verdicts as the local pool.
"""
