"""DuckDB over the Iceberg tables binlake writes, offline: the iceberg, avro and httpfs extensions
come from their pinned PyPI packages (``duckdb-extension-*``), never from the network."""
from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

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


def connect_iceberg(database: str = ":memory:",
                    s3: Mapping[str, str] | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with ``iceberg_scan`` loaded (avro first, as iceberg needs it).

    ``s3``: the pyiceberg properties of an ``s3://`` warehouse (``s3.endpoint``, ``s3.region``,
    ``s3.access-key-id``, ``s3.secret-access-key``; keys missing there come from the AWS
    environment variables): httpfs is loaded and a DuckDB S3 secret made from them.
    """
    con = duckdb.connect(database, config={"autoinstall_known_extensions": False,
                                           "autoload_known_extensions": False})
    for name in ("avro", "iceberg") + (("httpfs",) if s3 is not None else ()):
        con.execute(f"LOAD '{_extension_file(name)}'")
    if s3 is not None:
        params = s3_secret(s3)
        con.execute("CREATE SECRET binlake_s3 (TYPE s3, " + ", ".join(f"{k} ${k}" for k in params) + ")", params)
    return con


def s3_secret(props: Mapping[str, str]) -> dict[str, object]:
    """DuckDB S3 secret parameters for pyiceberg S3 properties (path-style when an endpoint is given)."""
    env = os.environ
    out: dict[str, object] = {
        "KEY_ID": props.get("s3.access-key-id") or env.get("AWS_ACCESS_KEY_ID", ""),
        "SECRET": props.get("s3.secret-access-key") or env.get("AWS_SECRET_ACCESS_KEY", ""),
        "REGION": props.get("s3.region") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION", "us-east-1"),
    }
    token = props.get("s3.session-token") or env.get("AWS_SESSION_TOKEN")
    if token:
        out["SESSION_TOKEN"] = token
    endpoint = props.get("s3.endpoint")
    if endpoint:
        url = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        out["ENDPOINT"] = url.netloc
        out["USE_SSL"] = url.scheme == "https"
        out["URL_STYLE"] = "vhost" if props.get("s3.force-virtual-addressing") == "true" else "path"
    return out
