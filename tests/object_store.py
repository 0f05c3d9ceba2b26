"""An S3-compatible server on 127.0.0.1 (moto) for the tests that write samples or archives to an object store."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from moto.server import ThreadedMotoServer
from pyarrow import fs

# The AWS environment of every process that reads the tests' S3 server; no SDK asks an instance metadata service.
TEST_S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "test-access-key",
    "AWS_SECRET_ACCESS_KEY": "test-secret-key",
    "AWS_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@contextmanager
def s3_server(bucket: str) -> Iterator[str]:
    """A running server with an empty `bucket`; yields its `host:port`."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"{host}:{port}"
    try:
        s3(endpoint, allow_bucket_creation=True).create_dir(bucket)
        yield endpoint
    finally:
        server.stop()


def s3(endpoint: str, **options: Any) -> fs.S3FileSystem:
    return fs.S3FileSystem(
        endpoint_override=endpoint,
        scheme="http",
        access_key=TEST_S3_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        secret_key=TEST_S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        region="us-east-1",
        **options,
    )


def objects(endpoint: str, prefix: str) -> list[str]:
    """Every object under `prefix` (`bucket/...`)."""
    listed = s3(endpoint).get_file_info(fs.FileSelector(prefix, recursive=True, allow_not_found=True))
    return sorted(info.path for info in listed if info.type == fs.FileType.File)
