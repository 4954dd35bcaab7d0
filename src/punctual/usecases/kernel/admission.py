"""Host limits every new start and schedule passes: input size and workload class (OS-10)."""

from __future__ import annotations

import json
from typing import Any

from punctual.errors import Forbidden, PayloadTooLarge
from punctual.usecases.kernel.context import Services


def input_size(value: Any) -> int:
    """Size of the input as canonical JSON, the measure ``max_input_bytes`` limits."""
    return len(json.dumps(value, separators=(",", ":"), sort_keys=True).encode())


def admit_input_size(services: Services, tenant: str, payload: Any) -> None:
    """``413 input_too_large``: every path that stores input calls this (OS-10)."""
    limit = services.policy.tenant_policy(tenant).max_input_bytes
    size = input_size(payload)
    if size > limit:
        raise PayloadTooLarge(
            f"input is {size} bytes; this tenant accepts at most {limit}",
            code="input_too_large",
            limit=limit,
            size=size,
        )


def admit_input_and_class(
    services: Services, tenant: str, workload_class: str, payload: Any | None
) -> None:
    """``413 input_too_large`` or ``403 workload_class_not_allowed``; ``payload`` None skips
    the size check (an edit that does not change the input)."""
    policy = services.policy.tenant_policy(tenant)
    if payload is not None:
        admit_input_size(services, tenant, payload)
    configured = services.policy.workload_classes
    if workload_class not in configured or workload_class not in policy.allowed_workload_classes:
        allowed = sorted(policy.allowed_workload_classes & set(configured))
        raise Forbidden(
            f"workload class {workload_class!r} is not allowed for tenant {tenant}; "
            f"allowed: {', '.join(allowed) or 'none'}",
            code="workload_class_not_allowed",
            allowed=allowed,
        )
