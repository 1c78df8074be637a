"""Is it fast, decided from plain numbers: whether and how both sides are timed side by side, which baseline stands,
the speedup and its direction, the worker's clock against the times a child reported, the profiled work share
(decisions.py), and the speed of light (floor, roofline). The worker measures (worker/candidate_timing.py) and hands
the numbers down; nothing here imports the worker or the verdict, and the timed calls themselves run in the child
(sandbox/timer.py).
"""
