from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer

from tests.support import servers

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "docs" / "trace.schema.json"
PROVIDER_KEY = "sk-provider-secret-0a9b8c7d6e5f"


@pytest.fixture(autouse=True)
def provider_key(settings):
    """The server's provider key is set, so the tests can look for it where it must not be."""
    settings.OPENAI_API_KEY = PROVIDER_KEY
    return PROVIDER_KEY


@pytest.fixture(scope="session")
def trace_schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


@pytest.fixture(scope="session")
def s3_server():
    """An S3-compatible server (moto in server mode) on a loopback port."""
    port = servers.free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


S3_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


@pytest.fixture
def s3_bucket(s3_server, request) -> str:
    name = f"evalhub-{request.node.name.lower().replace('_', '-')[:40].strip('-[]')}"
    name = "".join(c if c.isalnum() or c == "-" else "-" for c in name)
    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1", **S3_CREDENTIALS)
    client.create_bucket(Bucket=name)
    return name


@pytest.fixture(params=["local", "s3"])
def trace_storage(request, settings, tmp_path):
    """STORAGES["default"] on local disk, or the real S3Storage against the loopback S3 server."""
    if request.param == "local":
        backend = {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "files")},
        }
    else:
        endpoint = request.getfixturevalue("s3_server")
        backend = {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "bucket_name": request.getfixturevalue("s3_bucket"),
                "endpoint_url": endpoint,
                "region_name": "us-east-1",
                "location": "evalhub",
                "default_acl": None,
                "querystring_auth": True,
                "file_overwrite": True,
                "access_key": S3_CREDENTIALS["aws_access_key_id"],
                "secret_key": S3_CREDENTIALS["aws_secret_access_key"],
            },
        }
    settings.STORAGES = {**settings.STORAGES, "default": backend}
    return request.param
