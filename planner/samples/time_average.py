"""Pulsar's sample-count moving averages (`TimeAverageMessageData.update`, `BundleData.update`).

`n = min(n + 1, maxSamples)`, `avg = ((n - 1) * avg + x) / n`: a cumulative mean until `maxSamples`
samples were seen, then an exponential average with weight 1/maxSamples. The first sample replaces
whatever default was there.
"""

from __future__ import annotations

from planner.pulsar.model import BundleData, NamespaceBundleStats, TimeAverageMessageData


def _updated(old_average: float, sample: float, num_samples: int) -> float:
    return ((num_samples - 1) * old_average + sample) / num_samples


def update_time_average(average: TimeAverageMessageData, sample: NamespaceBundleStats) -> TimeAverageMessageData:
    """Fold one bundle stats sample into a moving average."""
    num_samples = min(average.num_samples + 1, average.max_samples)
    return average.model_copy(
        update={
            "num_samples": num_samples,
            "msg_throughput_in": _updated(average.msg_throughput_in, sample.msg_throughput_in, num_samples),
            "msg_throughput_out": _updated(average.msg_throughput_out, sample.msg_throughput_out, num_samples),
            "msg_rate_in": _updated(average.msg_rate_in, sample.msg_rate_in, num_samples),
            "msg_rate_out": _updated(average.msg_rate_out, sample.msg_rate_out, num_samples),
        }
    )


def update_bundle_data(bundle_data: BundleData, sample: NamespaceBundleStats) -> BundleData:
    """Fold one sample into both averages; `topics` is the last sample's."""
    return BundleData(
        short_term_data=update_time_average(bundle_data.short_term_data, sample),
        long_term_data=update_time_average(bundle_data.long_term_data, sample),
        topics=sample.topics,
    )
