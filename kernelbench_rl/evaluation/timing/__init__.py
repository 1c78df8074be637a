"""Is it fast: timed calls and their statistics, the worker's clock beside the device's, the reference timed side
by side, and the speed of light (floor, roofline).
"""
