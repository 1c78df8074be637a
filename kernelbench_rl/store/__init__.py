"""DuckDB store: schema, migrations and the only code that writes SQL."""

from kernelbench_rl.store.db import (
    DEFAULT_DB_PATH,
    Store,
    StoreMissingError,
    StoreSchemaError,
    StoreVersionError,
    default_db_path,
    eval_key_for,
    sha256_text,
)

__all__ = [
    "DEFAULT_DB_PATH",
    "Store",
    "StoreMissingError",
    "StoreSchemaError",
    "StoreVersionError",
    "default_db_path",
    "eval_key_for",
    "sha256_text",
]
