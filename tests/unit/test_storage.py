"""Locations by URI (`planner.storage`): a path, file:// and s3:// with pyarrow's options; what Spark is told."""

from __future__ import annotations

import pytest

from planner import storage
from planner.errors import InputError

S3 = "s3://samples/prod?endpoint_override=127.0.0.1:9000&scheme=http&region=us-east-1"


def test_parts_go_before_an_object_stores_options():
    assert storage.join(S3, "samples", "bundles/") == (
        "s3://samples/prod/samples/bundles?endpoint_override=127.0.0.1:9000&scheme=http&region=us-east-1"
    )
    assert storage.join("file:///data/", "runs/", "x") == "file:///data/runs/x"
    assert storage.display(storage.join(S3, "a")) == "s3://samples/prod/a"


@pytest.mark.parametrize("root", ["file:///data/planner", S3])
@pytest.mark.parametrize(
    ("part", "named"),
    [
        ("cluster=x/../../../../outside", ". or .. segment"),
        ("..", ". or .. segment"),
        ("a/./b", ". or .. segment"),
        ("/etc/passwd", "absolute"),
        ("cluster=x\\..\\outside", "backslash or NUL"),
        ("cluster=x\0", "backslash or NUL"),
    ],
)
def test_a_path_that_could_leave_the_storage_root_is_refused_locally_and_on_s3(root, part, named):
    with pytest.raises(InputError, match=named) as refused:
        storage.join(root, "samples", part, "snapshot.parquet")
    assert repr(part) in str(refused.value)


@pytest.mark.parametrize(
    "location",
    ["file:///data/planner/../outside/x", "s3://samples/prod/../../other/x", "s3://samples/prod/%2e%2e/x"],
)
def test_a_location_whose_path_or_key_has_dot_dot_is_refused_before_any_io(location):
    with pytest.raises(InputError, match=r"\. or \.\. segment"):
        storage.filesystem(location)


def test_spark_reads_s3_as_s3a_with_the_settings_the_uri_implies():
    assert storage.spark_uri(storage.join(S3, "samples")) == "s3a://samples/prod/samples"
    assert storage.spark_uri("/data/samples") == "file:///data/samples"
    assert storage.hadoop_s3a_settings(S3) == {
        "fs.s3a.endpoint": "http://127.0.0.1:9000",
        "fs.s3a.path.style.access": "true",
        "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.endpoint.region": "us-east-1",
    }
    assert storage.hadoop_s3a_settings("s3://bucket/prefix") == {}  # AWS itself: Hadoop's defaults
    assert storage.hadoop_s3a_settings("file:///data") == {}


@pytest.mark.parametrize(
    ("location", "named"),
    [
        ("ftp://host/x", "not a path"),
        ("s3://KEY:SECRET@samples/prod", "credentials"),
        ("s3:///prefix", "no bucket"),
    ],
)
def test_bad_roots_are_refused_with_the_reason(location, named):
    with pytest.raises(InputError, match=named) as refused:
        storage.check_root(location)
    assert "SECRET" not in str(refused.value)


def test_files_are_written_whole_and_read_back_as_stored(tmp_path):
    target = storage.join(storage.to_uri(tmp_path), "runs", "a.json.gz")
    storage.write_bytes(target, b"not gzip, yet named .gz")
    # pyarrow would decompress by the name's extension: the bytes must come back as written.
    assert storage.read_bytes(target, "test file") == b"not gzip, yet named .gz"
    assert [path.name for path in (tmp_path / "runs").iterdir()] == ["a.json.gz"]
    storage.move(target, storage.join(storage.to_uri(tmp_path), "runs", "b.json.gz"))
    assert not storage.exists(target)
    storage.delete(target)  # absent: nothing to do
    with pytest.raises(InputError, match="does not exist"):
        storage.read_bytes(target, "test file")
