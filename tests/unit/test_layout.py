"""The README's Layout table matches the tree: every path it names exists, and every folder and module of the
product is named, in its folder's row, so the map a newcomer reads is the code they will find."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("planner", "spark_jobs")


def _layout_rows() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| `")]


def _named(row: str) -> set[str]:
    return set(re.findall(r"`([^`]+)`", row.split(" | ", 1)[0]))


def test_every_path_the_layout_names_exists() -> None:
    paths = {path for row in _layout_rows() for path in _named(row)}
    missing = sorted(path for path in paths if not (ROOT / path).exists())
    assert not missing, f"README Layout names paths that do not exist: {missing}"


def test_every_folder_and_module_of_the_product_is_in_the_layout() -> None:
    rows = _layout_rows()
    folder_rows = {path.rstrip("/"): row for row in rows for path in _named(row)}
    unnamed = []
    for package in PACKAGES:
        for source in sorted((ROOT / package).rglob("*.py")):
            relative = source.relative_to(ROOT)
            if source.name in {"__init__.py", "__main__.py"} or "migrations" in relative.parts:
                continue
            if str(relative) in folder_rows:
                continue
            # A module is named in its nearest folder's row, by its name (`collector`) or its subfolder (`kinds/`).
            for depth in range(len(relative.parts) - 1, 0, -1):
                folder = "/".join(relative.parts[:depth])
                if folder in folder_rows:
                    inner = relative.parts[depth:]
                    names = {f"`{Path(inner[0]).stem}`", f"`{inner[0]}/`"}
                    if not any(name in folder_rows[folder] for name in names):
                        unnamed.append(str(relative))
                    break
            else:
                unnamed.append(str(relative))
    assert not unnamed, f"README Layout does not name: {unnamed}"
