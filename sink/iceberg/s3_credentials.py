"""Where the process writing an ``s3://`` warehouse gets its AWS credentials, and a refusal when it
has none.

pyarrow's S3 client (under pyiceberg's FileIO) looks for credentials along the AWS SDK's chain; when
it finds none it sends its requests unsigned. A real bucket refuses them, but an S3 endpoint that does
not check signatures stores what it is sent, and a drain whose executors lack the credentials its
driver has then commits data files no reader can open. So every process that writes data files (the
driver when it opens the sink, each Spark task before its first file) asks :func:`check_s3_credentials`
first: the run fails before anything is committed, naming what is missing and where.

The chain followed is the SDK's: pyiceberg properties (``s3.access-key-id`` with
``s3.secret-access-key``, ``client.*`` likewise, ``s3.profile-name``, ``s3.role-arn``), the
environment (``AWS_ACCESS_KEY_ID`` with ``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, a web identity
token file, a container credentials URI), the shared credentials and config files, and the instance
metadata service (asked once per process, with a short timeout, unless ``AWS_EC2_METADATA_DISABLED``
is ``true``, as for the SDK). ``s3.anonymous = true`` writes unsigned on purpose.
"""
from __future__ import annotations

import functools
import os
import socket
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from sink.errors import SinkError

S3_SCHEMES = ("s3", "s3a", "s3n")
IMDS_TOKEN_URL = "http://169.254.169.254/latest/api/token"
IMDS_TIMEOUT = 0.3   # seconds: the instance metadata service answers within a millisecond where it exists


class S3CredentialsError(SinkError):
    """A process that would write an ``s3://`` warehouse finds no AWS credentials (terminal)."""


def _pair(props: Mapping[str, str], prefix: str) -> bool:
    return bool(props.get(f"{prefix}.access-key-id") and props.get(f"{prefix}.secret-access-key"))


@functools.cache
def _instance_metadata() -> bool:
    """True when the instance metadata service answers here (an EC2 instance role may hold credentials)."""
    request = urllib.request.Request(IMDS_TOKEN_URL, method="PUT",
                                     headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
    try:
        with urllib.request.urlopen(request, timeout=IMDS_TIMEOUT):
            return True
    except OSError:
        return False


def credentials_source(properties: Mapping[str, str], environ: Mapping[str, str] | None = None,
                       home: Path | None = None, ask_instance: bool = True) -> str | None:
    """Where this process's S3 client will take its credentials from (a few words), or None."""
    env = os.environ if environ is None else environ
    if _pair(properties, "s3") or _pair(properties, "client"):
        return "catalog properties"
    if str(properties.get("s3.anonymous", "")).lower() == "true":
        return "none: s3.anonymous = true"
    if properties.get("s3.profile-name") or properties.get("client.profile-name"):
        return "the profile the catalog properties name"
    if properties.get("s3.role-arn") or properties.get("client.role-arn"):
        return "the role the catalog properties name"
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return "the environment"
    for key in ("AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        if env.get(key):
            return f"the environment ({key})"
    base = home if home is not None else Path(env.get("HOME", "~")).expanduser()
    for key, default in (("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials"), ("AWS_CONFIG_FILE", ".aws/config")):
        path = Path(env[key]).expanduser() if env.get(key) else base / default
        if path.is_file():
            return f"the file {path}"
    if ask_instance and env.get("AWS_EC2_METADATA_DISABLED", "").lower() != "true" and _instance_metadata():
        return "the instance metadata service"
    return None


def check_s3_credentials(location: str, properties: Mapping[str, str], where: str) -> None:
    """Nothing when ``location`` is not on S3 or this process has credentials for it; else
    :class:`S3CredentialsError` naming ``where`` (the driver, an executor) and how to give them."""
    if urlsplit(location).scheme not in S3_SCHEMES or credentials_source(properties) is not None:
        return
    raise S3CredentialsError(
        f"no S3 credentials on {where} (host {socket.gethostname()}) to write {location}: set "
        f"s3.access-key-id and s3.secret-access-key ([iceberg.properties] or --catalog-property; they travel "
        f"with every task), or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment of the driver and "
        f"of every executor (spark.executorEnv.*), a profile or an instance role; s3.anonymous = true writes "
        f"unsigned on purpose. Nothing was committed")
