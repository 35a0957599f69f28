"""Targets: how the harness runs (or reaches) the nodes of the system under test."""

from __future__ import annotations

from pytest_shadowcheck.targets.base import (
    CAPABILITIES,
    ClusterPlan,
    NodeHandle,
    Target,
    TargetError,
)

__all__ = ["CAPABILITIES", "ClusterPlan", "NodeHandle", "Target", "TargetError"]
