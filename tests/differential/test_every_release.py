"""The slow run's differential: every 3.x and 4.x release of Pulsar on Maven Central against the planner set to
that release, `DIFFERENTIAL_RELEASE_CASES` (default 200) cases of every kind each (`scripts/test.sh -m slow`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.differential.conftest import CENTRAL_RELEASES, java_harness_for
from tests.differential.test_differential import SEED, _count, _mismatches, _report, build_batch

pytestmark = [pytest.mark.differential, pytest.mark.slow]

RELEASE_CASES = int(os.environ.get("DIFFERENTIAL_RELEASE_CASES", "200"))
KINDS = ("shed", "splitCandidates", "splitPositions", "transfer", "extensibleSplit", "extensiblePlacement")


@pytest.mark.parametrize("version", CENTRAL_RELEASES)
def test_every_release_on_maven_central_agrees_with_the_planner(version: str, tmp_path: Path) -> None:
    batch = build_batch(java_harness_for(version), tmp_path, RELEASE_CASES, SEED)
    for kind in KINDS:
        failing = _mismatches(batch, kind)
        assert not failing, _report(batch, failing, _count(batch, kind), f"{kind} cases", None)
