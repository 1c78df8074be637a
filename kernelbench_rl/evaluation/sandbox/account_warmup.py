"""Imported by the zygote (startup.ZYGOTE_PRELOAD), after the modules a child needs: the CPU compute account's first
use is paid here once, and every child forked from the zygote inherits it warm (compute_account.warm)."""

from kernelbench_rl.evaluation.sandbox import compute_account

compute_account.warm()
