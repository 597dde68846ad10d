"""dlsched.policies: the Policy interface, the telemetry feed, learned (SB3) policies."""

from dlsched.policies.feed import TelemetryFeed
from dlsched.policies.policy import HandcraftedPolicy, Policy

__all__ = ["HandcraftedPolicy", "Policy", "TelemetryFeed"]
