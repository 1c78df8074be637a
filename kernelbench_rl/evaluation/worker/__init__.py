"""One trusted worker process per GPU: its start (boot, same-uid mode, start-up caches), the children it runs
candidates in, their scheduling and device memory, the references' outputs and timings it caches, and the sweep
of whatever a candidate left behind. It never imports a candidate's code.
"""
