"""Namespace bundle names and ranges, as Pulsar formats them (`tenant/ns/0xLLLLLLLL_0xUUUUUUUU`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from planner.errors import InputError
from planner.names import NAME_PATTERN

FULL_RANGE_LOWER = 0x00000000
FULL_RANGE_UPPER = 0xFFFFFFFF

_RANGE_PATTERN = re.compile(r"0x([0-9a-f]{8})_0x([0-9a-f]{8})")
# Pulsar accepts v2 namespace names (tenant/ns) and legacy v1 names (tenant/cluster/ns); the
# heartbeat namespace `pulsar/<cluster>/<host:port>` that every broker reports is a v1 name. Each part follows
# Pulsar's naming rule (`planner.names`): bundle names become storage and URL paths.
_BUNDLE_NAME_PATTERN = re.compile(
    rf"({NAME_PATTERN}/(?:{NAME_PATTERN}/)?{NAME_PATTERN})/(0x([0-9a-f]{{8}})_0x([0-9a-f]{{8}}))", re.ASCII
)


class BundleNameError(InputError):
    """A bundle name or range that does not follow Pulsar's format."""


@dataclass(frozen=True, order=True, slots=True)
class BundleRange:
    """A bundle's hash range `[lower, upper)`; the namespace's last bundle also holds `upper`."""

    lower: int
    upper: int

    def __post_init__(self) -> None:
        if not FULL_RANGE_LOWER <= self.lower < self.upper <= FULL_RANGE_UPPER:
            raise BundleNameError(
                f"bundle range bounds out of order or outside 0x00000000..0xffffffff: "
                f"0x{self.lower:08x}_0x{self.upper:08x}"
            )

    @classmethod
    def parse(cls, text: str) -> BundleRange:
        match = _RANGE_PATTERN.fullmatch(text)
        if match is None:
            raise BundleNameError(f"bundle range {text!r} is not of the form 0x%08x_0x%08x (lower-case hex)")
        return cls(int(match.group(1), 16), int(match.group(2), 16))

    def __str__(self) -> str:
        return f"0x{self.lower:08x}_0x{self.upper:08x}"


@dataclass(frozen=True, slots=True)
class BundleName:
    """A full bundle name: namespace plus range."""

    namespace: str
    range: BundleRange

    @classmethod
    def parse(cls, text: str) -> BundleName:
        match = _BUNDLE_NAME_PATTERN.fullmatch(text)
        if match is None:
            raise BundleNameError(
                f"bundle name {text!r} is not of the form tenant/namespace/0x%08x_0x%08x "
                "(names of letters, digits, - = : . _)"
            )
        return cls(match.group(1), BundleRange.parse(match.group(2)))

    def __str__(self) -> str:
        return f"{self.namespace}/{self.range}"


def namespace_of(bundle: str) -> str:
    """The namespace part of a full bundle name (everything before the last `/`)."""
    return bundle.rpartition("/")[0]


def check_bundle_name(name: str) -> None:
    """Raise BundleNameError unless `name` is a well-formed full bundle name (fast path for bulk validation)."""
    match = _BUNDLE_NAME_PATTERN.fullmatch(name)
    if match is None or int(match.group(3), 16) >= int(match.group(4), 16):
        BundleName.parse(name)  # raises with the precise reason
