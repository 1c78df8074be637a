"""What a candidate's text says, read without running it: the kernel's code extracted from an answer, its
class, the kernels it defines. The static policy (../static_policy/) judges the same text.
"""
