"""Java artifacts from Maven Central, through the machine's Maven (`mvn`), cached outside any repository.

The dev tools' downloads (the local Pulsar cluster's distribution, a local identity provider); the product needs
no Maven: the Spark job's jars are resolved by Spark itself (`planner.spark_submit`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from planner import progress

DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


class MavenError(RuntimeError):
    """Maven is missing, or a resolution failed (its first [ERROR] line)."""


def maven() -> str:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenError("Maven (`mvn`) is needed to download Java artifacts; run scripts/install_system_deps.sh")
    return mvn


def run_maven(args: list[str], work: Path, progress_label: str | None = None) -> None:
    """`progress_label`: show the bytes downloaded so far under it (on a terminal)."""
    # A private local repository inside the work dir keeps ~/.m2 untouched and is deleted with it.
    repository = work / "m2"
    command = [maven(), "-B", "-q", f"-Dmaven.repo.local={repository}", *args]
    label = progress_label or "Maven"
    with progress.download(label, lambda: progress.directory_bytes(repository)):
        result = subprocess.run(command, cwd=work, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        output = _ANSI_ESCAPE.sub("", result.stdout + result.stderr)
        first_error = next((line for line in output.splitlines() if line.startswith("[ERROR]")), output[-500:])
        raise MavenError(f"{' '.join(args[:1])} failed: {first_error}")
