"""A ValidatingAdmissionPolicy's verdict on one request, its CEL evaluated by cel-python (core CEL only: has, ==, in,
all, exists, startsWith, which cel-python evaluates as the API server's cel-go does)."""

from __future__ import annotations

from typing import Any

import pytest


def admits(spec: dict[str, Any], user: str, operation: str, resource: str, new: Any, old: Any,
           groups: tuple[str, ...] = ("system:authenticated",), subresource: str = "") -> bool:
    """Whether the policy `spec` lets the request through: it does not match, or every validation holds."""
    rules = spec["matchConstraints"]["resourceRules"]
    requested = f"{resource}/{subresource}" if subresource else resource
    if not any(requested in rule["resources"] and operation in rule["operations"] for rule in rules):
        return True
    celpy = pytest.importorskip("celpy", reason="cel-python (requirements-dev.txt) evaluates the policy's CEL")
    activation = celpy.json_to_cel({
        "request": {"userInfo": {"username": user, "groups": list(groups)}, "operation": operation,
                    "resource": {"group": "", "version": "v1", "resource": resource}, "subResource": subresource},
        "object": new, "oldObject": old})
    env = celpy.Environment()

    def holds(expression: str) -> bool:
        return bool(env.program(env.compile(expression)).evaluate(activation))

    matched = all(holds(condition["expression"]) for condition in spec.get("matchConditions", []))
    return not matched or all(holds(v["expression"]) for v in spec["validations"])
