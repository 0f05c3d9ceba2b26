"""Where the stages keep their files, addressed by URI: the samples dataset, the snapshots' archives and the plan
runs' input and output.

Tasks of one DAG run may run on different machines, and the Spark job on a cluster, so files are named by URI
under the configured storage root (`planner.settings`, `storage`), never by a path of one machine's disk:

- a local or shared path, or a `file://` URI;
- an object store, `s3://bucket/prefix`, optionally with pyarrow's S3 options as a query string
  (`?endpoint_override=host:port&scheme=http&region=us-east-1` for an S3-compatible server). Credentials come
  from the AWS environment (`AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, a profile, an instance role), never
  from the URI: URIs travel through XCom and logs.

pyarrow's filesystems do the I/O here; the Spark job reads the same locations as `s3a://` (`spark_uri`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from pyarrow import fs

from planner.errors import InputError

SCHEMES = ("file", "s3")


def to_uri(location: str | Path) -> str:
    """A URI for a path (made absolute) or a URI as given."""
    text = str(location)
    return text if "://" in text else Path(text).expanduser().resolve().as_uri()


def check_root(location: str | Path, what: str = "setting storage") -> str:
    """The storage root as a URI; refused when its scheme is unknown or it carries credentials."""
    uri = to_uri(location)
    parts = urlsplit(uri)
    if parts.scheme not in SCHEMES:
        raise InputError(f"{what}: {uri!r} is not a path, a file:// or an s3:// URI")
    if parts.username or parts.password:
        raise InputError(f"{what}: credentials do not belong in the URI; use the AWS environment (AWS_ACCESS_KEY_ID)")
    if parts.scheme == "s3" and not parts.netloc:
        raise InputError(f"{what}: {uri!r} names no bucket")
    return uri


def _unsafe_segment(path: str) -> str | None:
    """Why `path` could name something outside the directory it is joined to: a `..` or `.` segment, a
    backslash (a separator on Windows and in some S3 tools) or a NUL; None when it is safe."""
    if "\\" in path or "\0" in path:
        return "it has a backslash or NUL"
    if any(segment in {".", ".."} for segment in path.split("/")):
        return "it has a . or .. segment"
    return None


def join(uri: str, *parts: str) -> str:
    """`uri` with relative path parts appended; an object store's query string stays at the end. A part that is
    absolute or could step out of `uri` (`..`) is refused, whatever name it came from."""
    base, _, query = uri.partition("?")
    for part in parts:
        reason = "it is absolute" if part.startswith("/") else _unsafe_segment(part)
        if reason is not None:
            raise InputError(f"storage path {part!r} under {display(uri)}: refused ({reason})")
    joined = "/".join([base.rstrip("/"), *(part.strip("/") for part in parts)])
    return f"{joined}?{query}" if query else joined


def display(uri: str) -> str:
    """A location as people read it: without the query string (endpoint options)."""
    return str(uri).partition("?")[0]


def filesystem(uri: str) -> tuple[fs.FileSystem, str]:
    """pyarrow's filesystem for `uri` and the path within it (for pyarrow.dataset and pyarrow.parquet); a URI
    whose path (an object store's key) could step out of its directories is refused, as `join` refuses parts."""
    reason = _unsafe_segment(unquote(urlsplit(to_uri(uri)).path))
    if reason is not None:
        raise InputError(f"storage location {display(uri)!r}: refused ({reason})")
    try:
        located: tuple[fs.FileSystem, str] = fs.FileSystem.from_uri(to_uri(uri))
        return located
    except (ValueError, OSError) as error:
        raise InputError(f"storage location {display(uri)!r}: {error}") from None


def read_bytes(uri: str, what: str) -> bytes:
    filesystem_, path = filesystem(uri)
    try:
        # The bytes as stored: pyarrow would otherwise decompress by the name's extension (.gz).
        with filesystem_.open_input_stream(path, compression=None) as stream:
            data: bytes = stream.read()
            return data
    except FileNotFoundError:
        raise InputError(f"{what}: {display(uri)} does not exist") from None


def _temporary(path: str) -> str:
    """A name beside `path` that dataset readers skip (a leading dot), unique to this process."""
    parent, _, name = path.rpartition("/")
    return f"{parent}/.{name}.{os.getpid()}.tmp"


def _write_whole(uri: str, write: Callable[[fs.FileSystem, str], None]) -> None:
    """Write whole or not at all: `write` fills a temporary name beside the target, which is then moved over it."""
    filesystem_, path = filesystem(uri)
    filesystem_.create_dir(path.rpartition("/")[0], recursive=True)
    temporary = _temporary(path)
    write(filesystem_, temporary)
    filesystem_.move(temporary, path)


def write_bytes(uri: str, data: bytes) -> None:
    def write(filesystem_: fs.FileSystem, path: str) -> None:
        with filesystem_.open_output_stream(path, compression=None) as stream:
            stream.write(data)

    _write_whole(uri, write)


def write_parquet(table: object, uri: str) -> None:
    """A Parquet file, whole or not at all."""
    import pyarrow.parquet as pq

    _write_whole(uri, lambda filesystem_, path: pq.write_table(table, path, filesystem=filesystem_, compression="zstd"))


def move(source: str, target: str) -> None:
    """A file to another name on the same filesystem (a rename on disks; a copy and delete on object stores)."""
    filesystem_, source_path = filesystem(source)
    filesystem_.move(source_path, filesystem(target)[1])


def delete(uri: str) -> None:
    """Delete a file if it exists."""
    filesystem_, path = filesystem(uri)
    with contextlib.suppress(FileNotFoundError):
        filesystem_.delete_file(path)


def exists(uri: str) -> bool:
    filesystem_, path = filesystem(uri)
    found: bool = filesystem_.get_file_info(path).type != fs.FileType.NotFound
    return found


def list_files(uri: str) -> list[str]:
    """The files directly under a directory, as URIs in name order; none if it does not exist. Names that readers
    skip (beginning with `_` or `.`: staged or being written) are left out."""
    filesystem_, path = filesystem(uri)
    found = filesystem_.get_file_info(fs.FileSelector(path, allow_not_found=True))
    names = sorted(info.base_name for info in found if info.type == fs.FileType.File)
    return [join(uri, name) for name in names if not name.startswith(("_", "."))]


def s3_options(uri: str) -> Mapping[str, str]:
    """The pyarrow S3 options an `s3://` URI carries in its query string (endpoint_override, scheme, region)."""
    return {key: values[-1] for key, values in parse_qs(urlsplit(uri).query).items()}


def spark_uri(uri: str) -> str:
    """The same location as Spark's Hadoop filesystems name it: `s3a://bucket/prefix` for `s3://`."""
    parts = urlsplit(to_uri(uri))
    if parts.scheme == "s3":
        return f"s3a://{parts.netloc}{parts.path}"
    return display(to_uri(uri))


def hadoop_s3a_settings(uri: str) -> dict[str, str]:
    """Hadoop's s3a settings that follow from an `s3://` URI's options, for the Spark job."""
    if urlsplit(uri).scheme != "s3":
        return {}
    options = s3_options(uri)
    settings: dict[str, str] = {}
    if "endpoint_override" in options:
        scheme = options.get("scheme", "https")
        endpoint = options["endpoint_override"]
        settings["fs.s3a.endpoint"] = endpoint if "://" in endpoint else f"{scheme}://{endpoint}"
        # An S3-compatible server addresses buckets by path, not by host name.
        settings["fs.s3a.path.style.access"] = "true"
        settings["fs.s3a.connection.ssl.enabled"] = str(scheme == "https").lower()
    if "region" in options:
        settings["fs.s3a.endpoint.region"] = options["region"]
    return settings
