"""DuckDB over the Iceberg tables binlake writes, offline: the iceberg and avro extensions come from
their pinned PyPI packages (``duckdb-extension-*``), never from the network."""
from __future__ import annotations

import importlib
from pathlib import Path

import duckdb


def _extension_file(name: str) -> Path:
    pkg = importlib.import_module(f"duckdb_extension_{name}")
    if pkg.__file__ is None:  # a namespace package: no directory to find the extension in
        raise FileNotFoundError(f"duckdb_extension_{name} is not an installed package (no __init__.py); "
                                f"install duckdb-extension-{name}=={duckdb.__version__}")
    path = Path(pkg.__file__).parent / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if not path.exists():
        raise FileNotFoundError(f"DuckDB {duckdb.__version__} has no {name} extension at {path}; "
                                f"install duckdb-extension-{name}=={duckdb.__version__}")
    return path


def connect_iceberg(database: str = ":memory:") -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with ``iceberg_scan`` loaded (avro first, as iceberg needs it)."""
    con = duckdb.connect(database, config={"autoinstall_known_extensions": False,
                                           "autoload_known_extensions": False})
    for name in ("avro", "iceberg"):
        con.execute(f"LOAD '{_extension_file(name)}'")
    return con
