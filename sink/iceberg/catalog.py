"""Open the Iceberg catalog a drain writes to: SQLite + local warehouse by default, any pyiceberg
catalog by URI (``sqlite:///…``, ``postgresql+psycopg2://…`` → SQL; ``http(s)://…`` → REST; …)."""
from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import urlsplit

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.table import Table

from schemas.retry import retry
from sink.errors import CatalogConfigError
from sink.redact import redact_uri

CREATE_RACE_RETRIES = 3

CATALOG_NAME = "binlake"


def default_catalog_uri(warehouse: str) -> str:
    """The SQLite catalog file beside a local warehouse directory."""
    path = _local_dir(warehouse)
    return f"sqlite:///{path / 'catalog.db'}"


def _local_dir(warehouse: str) -> Path:
    if warehouse.startswith("file://"):
        return Path(warehouse[len("file://"):])
    if "://" in warehouse:
        raise CatalogConfigError(f"warehouse {warehouse!r} is not local: give --catalog-uri as well")
    return Path(warehouse).resolve()


def warehouse_location(warehouse: str) -> str:
    """``warehouse`` as a URI pyiceberg accepts (plain paths become absolute ``file://`` URIs)."""
    if "://" in warehouse:
        return warehouse
    return f"file://{Path(warehouse).resolve()}"


def open_catalog(warehouse: str, catalog_uri: str | None = None, **properties: object) -> Catalog:
    """The catalog named ``binlake``; local warehouses are created when missing. A REST catalog
    (``http(s)://``) gets ``warehouse`` as given: servers such as Polaris or Lakekeeper take a
    warehouse name there, and the server, not binlake, owns the location.

    Extra ``properties`` go to pyiceberg (e.g. ``s3.endpoint``; without credentials among them,
    S3 access takes the usual AWS environment variables). Raises :class:`CatalogConfigError` with
    the URI (password redacted) when pyiceberg cannot open it.
    """
    if catalog_uri and urlsplit(catalog_uri).scheme in ("http", "https"):
        location = warehouse          # a REST catalog: the server resolves it (a location, or a name)
    else:
        location = warehouse_location(warehouse)
        if location.startswith("file://"):
            _local_dir(location).mkdir(parents=True, exist_ok=True)
    uri = catalog_uri or default_catalog_uri(location)
    try:
        return retry(lambda: load_catalog(CATALOG_NAME, uri=uri, warehouse=location,
                                          **{k: str(v) for k, v in properties.items()}),
                     attempts=CREATE_RACE_RETRIES + 1, wait=lambda n: 0.2 * (n + 1), retry_if=_lost_create_race,
                     sleep=time.sleep)   # tests patch the sleep through this module's time
    except Exception as e:  # pyiceberg raises ValueError, SQLAlchemy errors, connection errors…
        raise CatalogConfigError(f"cannot open the Iceberg catalog {redact_uri(uri)!r} (warehouse {location}): "
                                 f"{_without(str(e), uri)}") from e


def _lost_create_race(e: BaseException) -> bool:
    """True when opening failed because another process created the catalog's tables at the same
    moment (a SQL catalog creates them on first open: PostgreSQL then reports a duplicate
    ``pg_type`` entry, SQLite "already exists"); opening again finds them."""
    text = str(e)
    return "already exists" in text or "pg_type_typname_nsp_index" in text


def _without(message: str, uri: str) -> str:
    """``message`` with any copy of the URI's password removed (drivers may echo their DSN)."""
    password = urlsplit(uri).password
    return message.replace(password, "***") if password else message


def table_or_none(catalog: Catalog, name: str | tuple[str, ...]) -> Table | None:
    """The table ``name`` (``"db.table"``, split at the first dot, or an identifier tuple); None when
    it or its namespace does not exist."""
    ident = name if isinstance(name, tuple) else tuple(name.partition(".")[::2])
    try:
        return catalog.load_table(ident)
    except (NoSuchTableError, NoSuchNamespaceError):
        return None
