"""Where a writing process finds S3 credentials, followed as the AWS SDK's chain does, and the
refusal when it finds none (the drain-level cases are in tests/drain/test_warehouses.py and
tests/drain/test_spark_cluster.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from sink.iceberg.s3_credentials import S3CredentialsError, check_s3_credentials, credentials_source


def test_each_link_of_the_chain_is_found_and_an_empty_chain_is_none(tmp_path: Path) -> None:
    def source(props: dict[str, str], env: dict[str, str]) -> str | None:
        return credentials_source(props, env, home=tmp_path, ask_instance=False)

    assert source({}, {}) is None
    assert source({"s3.access-key-id": "k"}, {}) is None                 # half a pair is no credentials
    assert source({"s3.access-key-id": "k", "s3.secret-access-key": "s"}, {}) == "catalog properties"
    assert source({"client.access-key-id": "k", "client.secret-access-key": "s"}, {}) == "catalog properties"
    assert source({"s3.anonymous": "true"}, {}) == "none: s3.anonymous = true"
    assert source({"s3.profile-name": "p"}, {}) == "the profile the catalog properties name"
    assert source({"s3.role-arn": "arn:aws:iam::1:role/r"}, {}) == "the role the catalog properties name"
    assert source({}, {"AWS_ACCESS_KEY_ID": "k"}) is None
    assert source({}, {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}) == "the environment"
    assert source({}, {"AWS_WEB_IDENTITY_TOKEN_FILE": "/t"}) == "the environment (AWS_WEB_IDENTITY_TOKEN_FILE)"
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws" / "config").write_text("[default]\nregion = us-east-1\n")
    assert source({}, {}) == f"the file {tmp_path / '.aws' / 'config'}"
    elsewhere = tmp_path / "creds"
    elsewhere.write_text("[default]\n")
    assert source({}, {"AWS_SHARED_CREDENTIALS_FILE": str(elsewhere)}) == f"the file {elsewhere}"


def test_a_process_without_credentials_is_refused_for_s3_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE",
                "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    check_s3_credentials("file:///tmp/wh", {}, "the driver")          # not S3: nothing to check
    with pytest.raises(S3CredentialsError, match=r"no S3 credentials on an executor \(host .*\) to write "
                                                 r"s3://b/wh: set s3.access-key-id") as e:
        check_s3_credentials("s3://b/wh", {"s3.endpoint": "http://127.0.0.1:9"}, "an executor")
    assert "Nothing was committed" in str(e.value)
    check_s3_credentials("s3a://b/wh", {"s3.access-key-id": "k", "s3.secret-access-key": "s"}, "an executor")
