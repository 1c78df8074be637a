"""Bridges to other people's tools: an OpenEnv environment server, TRL's GRPOTrainer, and
OpenAI-compatible models. Each module imports its third-party package lazily or at its own
top, so `import kernelbench_rl` never needs them."""

import warnings

# openenv imports fastmcp, which imports a deprecated authlib module: a warning users cannot act on.
warnings.filterwarnings("ignore", message=r"authlib\.jose module is deprecated")
