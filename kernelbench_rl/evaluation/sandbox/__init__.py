"""The only code that runs in the untrusted child: its confinement (uid, Landlock, seccomp, limits), the wire to the
worker, the problem's inputs, the timed calls (timer.py), the Triton interpreter on the CPU and the compute
account. It imports nothing from the worker, the verdict, the front or the cluster (tests/test_import_cycles.py).
"""
