"""Opening the catalog: losing the race to create a SQL catalog's tables is retried; other errors
are reported once, with the password redacted."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sink.errors import CatalogConfigError
from sink.iceberg import catalog as catalog_mod


def test_a_lost_create_race_is_retried_and_other_errors_are_not(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    race = Exception('duplicate key value violates unique constraint "pg_type_typname_nsp_index"')

    def flaky(name: str, **props: Any) -> str:
        calls.append(props["uri"])
        if len(calls) == 1:
            raise race
        return "the catalog"

    monkeypatch.setattr(catalog_mod, "load_catalog", flaky)
    monkeypatch.setattr(catalog_mod.time, "sleep", lambda s: None)
    assert catalog_mod.open_catalog(str(tmp_path), "postgresql+psycopg2://u:pw@h/db") == "the catalog"
    assert len(calls) == 2

    def broken(name: str, **props: Any) -> str:
        calls.append(props["uri"])
        raise Exception("password authentication failed: pw")

    calls.clear()
    monkeypatch.setattr(catalog_mod, "load_catalog", broken)
    with pytest.raises(CatalogConfigError) as e:
        catalog_mod.open_catalog(str(tmp_path), "postgresql+psycopg2://u:pw@h/db")
    assert len(calls) == 1 and "pw" not in str(e.value) and "***" in str(e.value)
