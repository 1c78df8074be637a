"""The evaluator as its caller sees it, in the caller's process: `Evaluator` (api.py), the pool of worker processes
(pool.py) and the folders they own (tempdirs.py). Nothing here runs a candidate or touches the GPU.
"""
