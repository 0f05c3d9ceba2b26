"""The local Pulsar cluster behaves like the real thing the planner drives: brokers, load reports,
unload with destination, both split algorithms the planner predicts, and no message loss under moves."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
import requests

from planner.plan.bundles import range_equally_divide, specified_positions_divide
from planner.pulsar.bundle_range import BundleRange
from planner.pulsar.model import LocalBrokerData
from pulsar_rebalance_devtools.traffic import BundleTraffic, TrafficGenerator

pytestmark = pytest.mark.integration

T = TypeVar("T")
HTTP_TIMEOUT = 10


def poll(probe: Callable[[], T | None], timeout: float, what: str, interval: float = 0.5) -> T:
    """Call `probe` until it returns something other than None; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = probe()
        except (requests.RequestException, ValueError) as error:  # a broker busy with an unload
            last_error = error
        else:
            if result is not None:
                return result
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what} (last error: {last_error})")


def expected_range_equally_divide(lower: int, upper: int) -> list[int]:
    """What the planner predicts for Pulsar's `range_equally_divide`."""
    return range_equally_divide.split_positions(BundleRange(lower, upper))


def expected_specified_positions_divide(lower: int, upper: int, positions: list[int], topics: list[str]) -> list[int]:
    """What the planner predicts for `specified_positions_divide` with these loaded topics."""
    return specified_positions_divide.split_positions(BundleRange(lower, upper), positions, topics)


def bundle_range(generator: TrafficGenerator, index: int) -> BundleRange:
    return BundleRange(generator.boundaries[index], generator.boundaries[index + 1])


def split(
    admin_url: str,
    namespace: str,
    bundle: BundleRange,
    algorithm: str,
    positions: list[int] | None = None,
    unload: bool = False,
) -> None:
    response = requests.put(
        f"{admin_url}/admin/v2/namespaces/{namespace}/{bundle}/split",
        params={"unload": str(unload).lower(), "splitAlgorithmName": algorithm},
        json=positions,
        timeout=HTTP_TIMEOUT,
    )
    assert response.status_code == 204, response.text


def boundaries_become(generator: TrafficGenerator, expected: list[int]) -> list[int]:
    return poll(
        lambda: expected if generator.current_boundaries() == expected else None,
        30,
        f"boundaries {[f'0x{b:08x}' for b in expected]} of {generator.namespace}",
    )


def load_reports(cluster: dict[str, Any]) -> dict[str, LocalBrokerData]:
    reports = {}
    for broker in cluster["brokers"]:
        response = requests.get(f"{broker['adminUrl']}/admin/v2/broker-stats/load-report", timeout=HTTP_TIMEOUT)
        response.raise_for_status()
        reports[broker["id"]] = LocalBrokerData.model_validate(response.json())
    return reports


def test_every_broker_lists_all_brokers_of_the_cluster(pulsar_cluster):
    expected = {broker["id"] for broker in pulsar_cluster["brokers"]}

    for broker in pulsar_cluster["brokers"]:
        response = requests.get(
            f"{broker['adminUrl']}/admin/v2/brokers/{pulsar_cluster['cluster']}", timeout=HTTP_TIMEOUT
        )

        assert response.status_code == 200
        assert set(response.json()) == expected


def test_load_reports_parse_and_show_the_traffic_on_the_broker_owning_the_hot_bundle(pulsar_cluster, traffic_generator):
    hot, cold = pulsar_cluster["brokers"][0]["id"], pulsar_cluster["brokers"][1]["id"]
    generator = traffic_generator([BundleTraffic(bundle=0, topics=2, rate=100), BundleTraffic(bundle=2, rate=2)])
    generator.place_bundles({0: hot, 2: cold})
    hot_bundle = f"{generator.namespace}/{bundle_range(generator, 0)}"
    generator.start()

    def skewed_reports() -> dict[str, LocalBrokerData] | None:
        reports = load_reports(pulsar_cluster)
        hot_stats = reports[hot].last_stats.get(hot_bundle)
        others = [report.msg_rate_in for broker, report in reports.items() if broker != hot]
        if hot_stats is None or hot_stats.msg_rate_in <= 0 or reports[hot].msg_rate_in <= max(others):
            return None
        return reports

    # Stats refresh every 5 s; a previous test's traffic may linger that long in other brokers' reports.
    reports = poll(skewed_reports, 60, f"{hot_bundle}'s traffic in {hot}'s load report")

    assert reports[hot].msg_rate_in > 0
    assert reports[hot].msg_throughput_in > 0
    assert hot_bundle in reports[hot].bundles
    assert all(hot_bundle not in report.last_stats for broker, report in reports.items() if broker != hot)


def test_unload_with_destination_moves_the_bundle_to_the_chosen_broker(pulsar_cluster, traffic_generator):
    # No clients run here: the destination is a one-shot hint that the next lookup (ours) consumes.
    generator = traffic_generator([BundleTraffic(bundle=1)])
    bundle = bundle_range(generator, 1)
    topic = generator.topics_in(bundle)[0]
    source = generator.owner(topic)
    destination = next(broker for broker in pulsar_cluster["brokers"] if broker["id"] != source)

    response = requests.put(
        f"{generator.admin_url}/admin/v2/namespaces/{generator.namespace}/{bundle}/unload",
        params={"destinationBroker": destination["id"]},
        timeout=HTTP_TIMEOUT,
    )
    assert response.status_code == 204, response.text

    domain, _, path = topic.partition("://")
    lookup = poll(
        lambda: requests.get(f"{generator.admin_url}/lookup/v2/topic/{domain}/{path}", timeout=HTTP_TIMEOUT).json(),
        30,
        f"a lookup of {topic}",
    )
    assert lookup["httpUrl"] == destination["adminUrl"]
    assert lookup["brokerUrl"] == destination["serviceUrl"]
    owned = requests.get(
        f"{generator.admin_url}/admin/v2/brokers/{pulsar_cluster['cluster']}/{destination['id']}/ownedNamespaces",
        timeout=HTTP_TIMEOUT,
    ).json()
    assert f"{generator.namespace}/{bundle}" in owned


def test_split_range_equally_divide_puts_the_boundary_where_the_planner_predicts(traffic_generator):
    generator = traffic_generator([BundleTraffic(bundle=1)])
    bundle = bundle_range(generator, 1)
    generator.owner(generator.topics_in(bundle)[0])  # a split needs an owner

    split(generator.admin_url, generator.namespace, bundle, "range_equally_divide")

    expected = sorted(generator.boundaries + expected_range_equally_divide(bundle.lower, bundle.upper))
    assert boundaries_become(generator, expected) == expected
    assert expected_range_equally_divide(bundle.lower, bundle.upper) == [0x60000000]


def test_split_specified_positions_divide_keeps_only_positions_inside_the_bundle(traffic_generator):
    # The REST variant splits only bundles with at least two loaded topics: run two slow producers.
    generator = traffic_generator([BundleTraffic(bundle=1, topics=2, rate=1)])
    bundle = bundle_range(generator, 1)
    generator.start()
    positions = [bundle.upper - 0x100, bundle.lower + 0x1000, bundle.lower, bundle.upper + 0x1000]

    split(generator.admin_url, generator.namespace, bundle, "specified_positions_divide", positions)

    inside = expected_specified_positions_divide(bundle.lower, bundle.upper, positions, generator.topics_in(bundle))
    assert inside == [bundle.lower + 0x1000, bundle.upper - 0x100]
    expected = sorted(generator.boundaries + inside)
    assert boundaries_become(generator, expected) == expected


def test_consumers_receive_every_message_across_unloads_and_splits(pulsar_cluster, traffic_generator):
    first, second = pulsar_cluster["brokers"][0]["id"], pulsar_cluster["brokers"][1]["id"]
    generator = traffic_generator(
        [BundleTraffic(bundle=0, topics=2, rate=50), BundleTraffic(bundle=2, topics=2, rate=20)]
    )
    hot, warm = bundle_range(generator, 0), bundle_range(generator, 2)
    generator.place_bundles({0: first, 2: second})
    generator.start()

    def traffic_flows() -> None:
        """Wait until producers got another 40 sends acknowledged: they survived the last step."""
        target = generator.report().produced + 40
        poll(lambda: True if generator.report().produced >= target else None, 60, "traffic to continue")

    traffic_flows()
    generator.move_bundle(str(hot), generator.topics_in(hot)[0], second)
    traffic_flows()
    split(generator.admin_url, generator.namespace, hot, "range_equally_divide")
    traffic_flows()
    split(
        generator.admin_url,
        generator.namespace,
        warm,
        "specified_positions_divide",
        [warm.lower + (warm.upper - warm.lower) // 3],
        unload=True,
    )
    traffic_flows()
    lower_half = BundleRange(hot.lower, expected_range_equally_divide(hot.lower, hot.upper)[0])
    unload = requests.put(
        f"{generator.admin_url}/admin/v2/namespaces/{generator.namespace}/{lower_half}/unload", timeout=HTTP_TIMEOUT
    )
    assert unload.status_code == 204, unload.text
    traffic_flows()
    generator.stop()

    report = generator.report()
    assert report.produced >= 200
    assert report.missing == {}
    assert report.consumed == report.produced
    assert len(generator.current_boundaries()) == len(generator.boundaries) + 2
