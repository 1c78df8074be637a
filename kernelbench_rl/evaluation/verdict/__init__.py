"""Is the candidate right: its outputs against the reference's on every seed (the sensitivity seeds and widened
inputs included), the checks on inputs and outputs, and whose fault a failure is.
"""
