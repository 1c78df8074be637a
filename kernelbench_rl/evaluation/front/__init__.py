"""The evaluator as its caller sees it, in the caller's process: `Evaluator` (api.py), the pool of worker processes
(pool.py), which owns the folders worker/tempdirs.py names. Nothing here runs a candidate or touches the GPU.
"""
