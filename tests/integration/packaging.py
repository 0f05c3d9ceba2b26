"""The package as a platform team gets it: the wheel built from the checkout, installed into fresh virtualenvs.

One wheel per test session, whichever tests ask for it (the installation into a stock Airflow, the extras
each installed alone). pip's own cache (~/.cache/pip) keeps the repeated installs to a download each.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_built: dict[str, Path] = {}


def clean_env() -> dict[str, str]:
    """No variable of the dev environment (its venv, PYTHONPATH, settings): only what any shell has."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ["HOME"], "LANG": "C.UTF-8"}


def built_distributions(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The wheel and the sdist built from the checkout, once per session."""
    if not _built:
        dist = tmp_path_factory.mktemp("dist")
        done = subprocess.run(
            [sys.executable, "-m", "build", "--wheel", "--sdist", "--outdir", str(dist), str(REPO)],
            capture_output=True,
            text=True,
            env=clean_env(),
            check=False,
        )
        assert done.returncode == 0, f"python -m build:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        [_built["wheel"]] = dist.glob("pulsar_rebalance-*.whl")
        [_built["sdist"]] = dist.glob("pulsar_rebalance-*.tar.gz")
    return _built["wheel"], _built["sdist"]


def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return built_distributions(tmp_path_factory)[0]


def fresh_venv(root: Path, requirement: str) -> Path:
    """A new virtualenv under `root` with only `requirement` installed (and what it declares); returns the venv."""
    venv = root / "venv"
    base_python = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base_python, "-m", "venv", str(venv)], check=True, env=clean_env())
    done = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", requirement],
        capture_output=True,
        text=True,
        cwd=root,
        env=clean_env(),
        check=False,
    )
    assert done.returncode == 0, f"pip install {requirement}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return venv
