"""Files the stages hand each other (a plan run's input and output), addressed by URI.

Tasks of one DAG run may run on different machines, so they pass each other URIs under the configured
storage root (`planner.settings`, `storage`), never paths of their own disk. pyarrow's filesystems
resolve a URI (`file:///shared/...`, or an object store's) or an absolute path.
"""

from __future__ import annotations

import os
from pathlib import Path

from pyarrow import fs

from planner.errors import InputError


def to_uri(location: str | Path) -> str:
    """A URI for a path (made absolute) or a URI as given."""
    text = str(location)
    return text if "://" in text else Path(text).expanduser().resolve().as_uri()


def join(uri: str, *parts: str) -> str:
    return "/".join([uri.rstrip("/"), *(part.strip("/") for part in parts)])


def _resolve(uri: str) -> tuple[fs.FileSystem, str]:
    try:
        return fs.FileSystem.from_uri(to_uri(uri))
    except (ValueError, OSError) as error:
        raise InputError(f"storage location {uri!r}: {error}") from None


def read_bytes(uri: str, what: str) -> bytes:
    filesystem, path = _resolve(uri)
    try:
        with filesystem.open_input_stream(path) as stream:
            return stream.read()
    except FileNotFoundError:
        raise InputError(f"{what}: {uri} does not exist") from None


def write_bytes(uri: str, data: bytes) -> None:
    """Write whole or not at all: to a temporary name beside the target, then moved over it."""
    filesystem, path = _resolve(uri)
    parent = path.rsplit("/", 1)[0]
    filesystem.create_dir(parent, recursive=True)
    temporary = f"{parent}/.{path.rsplit('/', 1)[1]}.{os.getpid()}.tmp"
    with filesystem.open_output_stream(temporary) as stream:
        stream.write(data)
    filesystem.move(temporary, path)
