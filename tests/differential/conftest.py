"""Differential tests: Pulsar's own Java strategies against the planner on the same random inputs.

The session fixture `java_harness` builds the harness in `java/` with Maven (offline first, from the local
repository in ~/.m2, else online from Maven Central) against `org.apache.pulsar:pulsar-broker` and returns a
runner that answers a whole batch of cases in one JVM. The tests run once per Pulsar version, each with the
planner set to that `pulsarVersion`: by default the pom's `pulsar.version` (the newest 4.x on Maven Central)
and `OLDER_PULSAR_VERSION` (the newest 3.0.x there); `DIFFERENTIAL_PULSAR_VERSIONS=4.2.4,4.0.8` picks others.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

JAVA_DIR = Path(__file__).parent / "java"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "differential: compares the planner with Pulsar's own Java code")


def default_pulsar_version() -> str:
    match = re.search(r"<pulsar\.version>([^<]+)</pulsar\.version>", (JAVA_DIR / "pom.xml").read_text())
    assert match is not None, "pom.xml has no <pulsar.version>"
    return match.group(1)


# The 3.0 LTS line: 3.0.7 is the newest 3.0.x release on Maven Central (3.0.0, 3.0.2 and 3.0.7 are there), and
# the only one with AvgShedder (3.0.6 and later). The pom's `pulsar-3.0` profile pins its grpc and Jackson.
OLDER_PULSAR_VERSION = "3.0.7"


def pulsar_versions() -> list[str]:
    listed = os.environ.get("DIFFERENTIAL_PULSAR_VERSIONS", "")
    chosen = [version.strip() for version in listed.split(",") if version.strip()]
    return chosen or [default_pulsar_version(), OLDER_PULSAR_VERSION]


@dataclass
class JavaRun:
    """A batch running in its JVM; `results()` waits for it."""

    process: subprocess.Popen[bytes]
    cases_file: Path
    results_file: Path
    stderr_file: Path

    def results(self) -> dict[str, dict[str, Any]]:
        """Pulsar's answers by case id."""
        try:
            returncode = self.process.wait(timeout=1800)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"the Java harness took more than 30 minutes on {self.cases_file}")
        if returncode != 0:
            stderr = self.stderr_file.read_text(errors="replace")
            pytest.fail(f"the Java harness failed on {self.cases_file}:\n{stderr[-5000:]}")
        results = {}
        for line in self.results_file.read_text().splitlines():
            result = json.loads(line)
            results[result["id"]] = result
        return results


@dataclass(frozen=True)
class JavaHarness:
    """Runs `differential.Harness` on a batch of cases in one JVM."""

    classpath: str
    pulsar_version: str

    def start(self, cases: Iterable[dict[str, Any]], workdir: Path) -> JavaRun:
        """Start the JVM on the batch and return at once, so the planner's side can run meanwhile."""
        workdir.mkdir(parents=True, exist_ok=True)
        cases_file = workdir / "cases.jsonl"
        results_file = workdir / "results.jsonl"
        stderr_file = workdir / "stderr.txt"
        with cases_file.open("w") as out:
            for case in cases:
                out.write(json.dumps(case) + "\n")
        command = [
            "java",
            "-XX:+UseSerialGC",
            f"-Dlog4j2.configurationFile={JAVA_DIR / 'log4j2.properties'}",
            "-cp",
            self.classpath,
            "differential.Harness",
            str(cases_file),
            str(results_file),
        ]
        with stderr_file.open("wb") as stderr:
            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
        return JavaRun(process, cases_file, results_file, stderr_file)

    def run(self, cases: Iterable[dict[str, Any]], workdir: Path) -> dict[str, dict[str, Any]]:
        """Pulsar's answers by case id. Cases may name their LoadData by `loadDataFile`."""
        return self.start(cases, workdir).results()


# The modules that hold the load-balancing code, and the metadata store the cycle cases run on (it is built against
# its release's pulsar-common); see _build_mixed.
PULSAR_MODULES = (
    "pulsar-broker",
    "pulsar-broker-common",
    "pulsar-common",
    "pulsar-client-admin-api",
    "pulsar-metadata",
)


def _maven(arguments: list[str]) -> str | None:
    """Run Maven offline (the local repository in ~/.m2), then online; None on success, else the errors."""
    failures = []
    for offline in (True, False):
        command = ["mvn", "-B", "-q", *(["-o"] if offline else []), *arguments]
        completed = subprocess.run(command, cwd=JAVA_DIR, capture_output=True, text=True, timeout=1800, check=False)
        if completed.returncode == 0:
            return None
        failures.append(f"$ {' '.join(command)}\n{(completed.stdout + completed.stderr)[-3000:]}")
    return "\n".join(failures)


def _build_mixed(version: str, default_classpath: str) -> str:
    """Maven Central lacks parts of some older releases' dependency trees (jetcd-core-shaded and
    pulsar-opentelemetry 4.0.8): run that release's own Pulsar modules on the default release's libraries."""
    target = JAVA_DIR / "target" / version
    jars = []
    for jar in default_classpath.split(os.pathsep)[1:]:
        path = Path(jar)
        if path.parent.parent.name in PULSAR_MODULES and path.parent.parent.parent.name == "pulsar":
            module = path.parent.parent.name
            errors = _maven(
                ["dependency:get", f"-Dartifact=org.apache.pulsar:{module}:{version}", "-Dtransitive=false"]
            )
            if errors:
                pytest.fail(f"could not fetch {module} {version}:\n{errors}")
            path = path.parent.parent / version / f"{module}-{version}.jar"
        jars.append(str(path))
    classes = target / "classes"
    sources = [str(source) for source in (JAVA_DIR / "src").rglob("*.java")]
    command = ["javac", "-nowarn", "-d", str(classes), "-cp", os.pathsep.join(jars), *sources]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    if completed.returncode != 0:
        pytest.fail(f"could not compile the harness against Pulsar {version}:\n{completed.stderr[-3000:]}")
    (target / "classpath.txt").write_text(os.pathsep.join(jars))
    return os.pathsep.join([str(classes), *jars])


def _build(version: str) -> str:
    """Compile the harness for `version` unless it is up to date; return its classpath."""
    target = JAVA_DIR / "target" / version
    harness_class = target / "classes" / "differential" / "Harness.class"
    classpath_file = target / "classpath.txt"
    sources = [JAVA_DIR / "pom.xml", *(JAVA_DIR / "src").rglob("*.java")]
    if harness_class.exists() and classpath_file.exists():
        built = min(harness_class.stat().st_mtime, classpath_file.stat().st_mtime)
        jars = classpath_file.read_text().strip().split(os.pathsep)
        if all(source.stat().st_mtime < built for source in sources) and all(Path(jar).exists() for jar in jars):
            return os.pathsep.join([str(target / "classes"), *jars])
    goals = [
        f"-Dpulsar.version={version}",
        "compile",
        "dependency:build-classpath",
        f"-Dmdep.outputFile={classpath_file}",
    ]
    errors = _maven(goals)
    if errors is None:
        return os.pathsep.join([str(target / "classes"), classpath_file.read_text().strip()])
    if version != default_pulsar_version() and "Could not resolve dependencies" in errors:
        return _build_mixed(version, _build(default_pulsar_version()))
    pytest.fail(f"could not build the differential harness:\n{errors}")


# Every 3.x and 4.x release of pulsar-broker on Maven Central (its maven-metadata.xml of 2026-11-20; 4.1.x and 4.2.0
# to 4.2.3 are not there). The slow run compares each (test_every_release.py). 5.0.1 is there too, but not its
# parent pom nor pulsar-common 5.0.1, and its classes need Java 21 (docs/fidelity.md).
CENTRAL_RELEASES = (
    "3.0.0", "3.0.2", "3.0.7", "3.1.0", "3.1.2", "3.2.0", "3.2.2", "3.2.3", "3.3.2", "3.3.5", "3.3.6",
    "4.0.0", "4.0.1", "4.0.2", "4.0.4", "4.0.5", "4.0.6", "4.0.7", "4.0.8", "4.2.4",
)  # fmt: skip


def java_harness_for(version: str, *, own_tree: bool = True) -> JavaHarness:
    """The harness built against `version` (reused while its sources and the pom are unchanged). Without its own
    dependency tree, the release's Pulsar modules run on the libraries of a default release (3.0.7's before 3.3, the
    pom's from 3.3): resolving each 3.x release's tree makes Maven backtrack over grpc's hard
    version ranges for tens of minutes (see README.md in this folder)."""
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"the differential tests need {' and '.join(missing)} (OpenJDK 17 and Maven, see README)")
    if own_tree or version in (default_pulsar_version(), OLDER_PULSAR_VERSION):
        return JavaHarness(classpath=_build(version), pulsar_version=version)
    # 3.3 and later load OpenTelemetry classes that 3.0.7's tree does not have.
    older_line = tuple(int(part) for part in version.split(".")[:2]) < (3, 3)
    base = OLDER_PULSAR_VERSION if older_line else default_pulsar_version()
    return JavaHarness(classpath=_build_mixed(version, _build(base)), pulsar_version=version)


@pytest.fixture(scope="session", params=pulsar_versions())
def java_harness(request: pytest.FixtureRequest) -> JavaHarness:
    return java_harness_for(request.param)
