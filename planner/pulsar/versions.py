"""Pulsar release lines whose load-balancing behaviour differs, selected by `pulsarVersion` (the releases compared
with Pulsar's own classes: docs/fidelity.md, "Releases compared")."""

from __future__ import annotations

import re
from dataclasses import dataclass

_VERSION_PATTERN = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?(?:[-.].*)?")

LATEST = "4.2.4"
OLDEST_SUPPORTED = (3, 0, 0)

# What a `pulsarVersion` without a patch level (`3.0`) means: the newest release of that line the planner compared
# with Pulsar's own classes (docs/fidelity.md, "Configuration and release from the cluster", lists the same table;
# a test keeps the two equal). A line missing here is refused: 4.1.x is not on Maven Central to compare.
RELEASE_LINES: dict[tuple[int, int], str] = {
    (3, 0): "3.0.7",
    (3, 1): "3.1.2",
    (3, 2): "3.2.3",
    (3, 3): "3.3.6",
    (4, 0): "4.0.8",
    (4, 2): "4.2.4",
    (5, 0): "5.0.1",  # read in the 5.0.1 jar, not run by the harness (docs/fidelity.md, "Releases compared")
}


@dataclass(frozen=True, order=True, slots=True)
class PulsarVersion:
    major: int
    minor: int
    patch: int = 0

    @classmethod
    def parse(cls, text: str) -> PulsarVersion:
        """`4.2.4`, `latest` (the newest release this planner knows), or a release line such as `3.0`: the newest
        release of that line the planner compared (`RELEASE_LINES`); a line it did not compare is refused."""
        text = text.strip()
        if text.lower() in {"latest", ""}:
            text = LATEST
        match = _VERSION_PATTERN.fullmatch(text)
        if match is None:
            raise ValueError(f"{text!r} is not a Pulsar version like 4.2.4 or 3.0")
        major, minor = int(match.group(1)), int(match.group(2))
        if (major, minor, int(match.group(3) or 0)) < OLDEST_SUPPORTED:
            raise ValueError(f"Pulsar {text} is not supported; the planner models 3.0.0 and later")
        if match.group(3) is None:
            return cls._of_line(text, major, minor)
        return cls(major, minor, int(match.group(3)))

    @classmethod
    def _of_line(cls, text: str, major: int, minor: int) -> PulsarVersion:
        release = RELEASE_LINES.get((major, minor))
        if release is None:
            known = ", ".join(f"{line[0]}.{line[1]}" for line in sorted(RELEASE_LINES))
            raise ValueError(
                f"{text!r} names no release: the planner compared no release of the {major}.{minor} line "
                f"(lines it did: {known}); give the exact release, such as {major}.{minor}.0"
            )
        return cls.parse(release)

    @classmethod
    def parse_prefix(cls, text: str) -> PulsarVersion:
        """The release a broker reports (`/admin/v2/brokers/version`: `4.2.4`, `"3.0.7"`, `3.1.4.2-SNAPSHOT`)."""
        match = re.match(r'\s*"?(\d+\.\d+(?:\.\d+)?)', text)
        if match is None:
            raise ValueError(f"{text!r} names no Pulsar release")
        return cls.parse(match.group(1))

    def as_tuple(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    def at_least(self, major: int, minor: int, patch: int = 0) -> bool:
        return self.as_tuple() >= (major, minor, patch)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"

    # Behaviour switches, each named after what changed, with the Pulsar PR and release that changed it.

    @property
    def destination_keyed_by_bundle_name(self) -> bool:
        """PR #25518 (4.2.0): an unload's destination is kept by full bundle name until the bundle's lookup; before,
        by its range alone, so two namespaces' bundles of one range share one destination."""
        return self.at_least(4, 2)

    @property
    def direct_memory_weight_default(self) -> float:
        """PR #21168 (3.2.0, backported to the 3.1 line: 1.0 in the 3.1.0 jar's ServiceConfiguration, 0.0 in 3.1.2's;
        3.1.1 is not on Maven Central) took direct memory out of the score by default."""
        return 0.0 if self.at_least(3, 2) or ((self.major, self.minor) == (3, 1) and self.patch >= 1) else 1.0

    @property
    def weighted_overload_check(self) -> bool:
        """PIP-358 (4.0.0): OverloadShedder, LeastLongTermMessageRate and placement use the weighted score."""
        return self.at_least(4, 0)

    @property
    def has_new_bandwidth_weight_keys(self) -> bool:
        """PIP-357 (4.0.0): `loadBalancerBandwidth*ResourceWeight`, the misspelled keys still read."""
        return self.at_least(4, 0)

    @property
    def avg_shedder_truncating_comparator(self) -> bool:
        """Before PR #24954 AvgShedder sorted brokers with `(int)(a - b)`: fixed in 4.2.0, backported to 4.0.8
        (checked against the 4.0.7 and 4.0.8 jars; 4.1.x is not on Maven Central to check)."""
        return not (self.at_least(4, 2) or ((self.major, self.minor) == (4, 0) and self.patch >= 8))

    @property
    def uniform_shedder_before_pr_21025(self) -> bool:
        """Before PR #21025 (3.2.0, backported to 3.0.2 and 3.1.1; read in the 3.0.0 source and the 3.1.0 jar)
        UniformLoadShedder took one broker as overloaded for both criteria: the last, in its map's order, whose msg
        rate or throughput beat the highest so far."""
        line = (self.major, self.minor)
        return not (self.at_least(3, 2) or (line == (3, 1) and self.patch >= 1) or (line == (3, 0) and self.patch >= 2))

    @property
    def uniform_shedder_overshoot(self) -> float:
        """Before PR #21906 (4.1.0) UniformLoadShedder let a bundle exceed the budget by 1000."""
        return 0.0 if self.at_least(4, 1) else 1000.0

    @property
    def has_shedding_excluded_namespaces(self) -> bool:
        """PIP-380 (PR #23549, 4.1.0): `loadBalancerSheddingExcludedNamespaces`; absent from the 3.0.7, 3.3.6 and
        4.0.8 sources, present in 4.2.4's (4.1.x is not on Maven Central to check)."""
        return self.at_least(4, 1)

    @property
    def transfer_shedder_compares_throughput_ema(self) -> bool:
        """TransferShedder's `isUnderLoaded`: from 3.0.7, 3.2.3 and 3.3.0 a broker is underloaded below the average
        load times the multiplier or below the busiest broker's throughput EMA times it; before, below the
        average load times the multiplier or with a throughput EMA under 1 byte/s (read in the 3.0.2, 3.0.7,
        3.1.2, 3.2.0, 3.2.3 and 3.3.2 sources)."""
        version = self.as_tuple()
        return (3, 0, 7) <= version < (3, 1, 0) or (3, 2, 3) <= version < (3, 3, 0) or version >= (3, 3, 0)

    @property
    def transfer_shedder_skips_idle_bundles(self) -> bool:
        """TransferShedder passes over bundles without throughput, and brokers leave them out of their top bundles,
        from 3.3.5 and 4.0.1 (absent from the 3.3.2 and 4.0.0 sources, present in 3.3.5's and 4.0.1's)."""
        version = self.as_tuple()
        return (3, 3, 5) <= version < (3, 4, 0) or version >= (4, 0, 1)

    @property
    def evenly_distributes_system_namespace(self) -> bool:
        """PR #22953 (June 2024; released in 3.0.6, 3.2.4 and the 3.3 line, never in 3.1): `selectBroker` spreads
        `pulsar/system` bundles evenly whatever `loadBalancerDistributeBundlesEvenlyEnabled` says. In the jars: absent
        from 3.0.2, 3.1.0, 3.1.2, 3.2.0 and 3.2.3, present in 3.0.7, 3.3.2 and every 4.x; 3.0.6, 3.2.4, 3.3.0 and
        3.3.1 are not on Maven Central, so 3.3.1 is taken as the first 3.3 release with it."""
        version = self.as_tuple()
        return (3, 0, 6) <= version < (3, 1, 0) or (3, 2, 4) <= version < (3, 3, 0) or version >= (3, 3, 1)

    @property
    def sheds_system_namespace(self) -> bool:
        """`LoadData.getBundleDataForLoadShedding` leaves out heartbeat and SLA-monitor bundles only from 3.0.2 (3.0.0
        left out every `isSystemServiceNamespace` bundle, `pulsar/system` too; 3.0.1 is not on Maven Central)."""
        return self.at_least(3, 0, 2)

    @property
    def avg_shedder_pending_unloads(self) -> bool:
        """PR #26246 (read in the 5.0.1 jar; 5.0.0 is not on Maven Central): AvgShedder's planned destinations last
        one shedding attempt, are re-drawn when overloaded or gone, and random picks are no longer remembered."""
        return self.at_least(5, 0)

    @property
    def isolation_matches_broker_ids(self) -> bool:
        """From 5.0 (read in the 5.0.1 `pulsar-broker` and `pulsar-common` jars) namespace isolation matches a
        policy's broker patterns that hold a `:` against the broker id (`host:port`) too, not only its host."""
        return self.at_least(5, 0)

    @property
    def placement_shedder_mismatch_falls_back(self) -> bool:
        """From 5.0 (read in the 5.0.1 jar) AvgShedder as placement under another shedder is no longer refused at
        startup: the broker warns and places with LeastLongTermMessageRate."""
        return self.at_least(5, 0)
