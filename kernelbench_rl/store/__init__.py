"""DuckDB store: schema, migrations and the only code that writes SQL."""

from kernelbench_rl.store.db import DEFAULT_DB_PATH, Store

__all__ = ["DEFAULT_DB_PATH", "Store"]
