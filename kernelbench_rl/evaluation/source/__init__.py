"""What a candidate's text says, read without running it: the kernel's code extracted from an answer and the kernels
it defines. The static policy (../static_policy/) judges the same text and names the candidate's class
(static_policy/candidate_class.py); source/ imports it, never the other way.
"""
