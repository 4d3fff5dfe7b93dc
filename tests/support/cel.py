"""A ValidatingAdmissionPolicy's verdict on one request, its CEL evaluated by cel-python (core CEL only: has, ==, in,
all, exists, startsWith, which cel-python evaluates as the API server's cel-go does). The simulator's admission uses
`denial`; unit tests ask `admits`."""

from __future__ import annotations

from typing import Any


def denial(spec: dict[str, Any], user: str, groups: tuple[str, ...], operation: str, resource: str, new: Any,
           old: Any) -> str | None:
    """Why the policy `spec` refuses the request (`resource` may name a subresource, `nodes/status`), or None: the
    rules or matchConditions do not match, or every validation holds. A CEL error refuses (failurePolicy Fail)."""
    import celpy  # requirements-dev.txt

    if not any(resource in rule["resources"] and operation in rule["operations"]
               for rule in spec["matchConstraints"]["resourceRules"]):
        return None
    env = celpy.Environment()
    activation = celpy.json_to_cel({
        "request": {"userInfo": {"username": user, "groups": list(groups)}, "operation": operation,
                    "resource": {"resource": resource.partition("/")[0]}, "subResource": resource.partition("/")[2]},
        "object": new, "oldObject": old})

    def verdict(expression: str) -> Any:
        try:
            return env.program(env.compile(expression)).evaluate(activation)
        except celpy.CELEvalError as error:
            return error

    for condition in spec.get("matchConditions", []):
        result = verdict(condition["expression"])
        if isinstance(result, celpy.CELEvalError):
            return f"expression '{condition['expression']}' resulted in error: {result}"
        if not result:
            return None
    for validation in spec["validations"]:
        result = verdict(validation["expression"])
        if isinstance(result, celpy.CELEvalError):
            return f"expression '{validation['expression']}' resulted in error: {result}"
        if not result:
            return validation["message"]
    return None


def admits(spec: dict[str, Any], user: str, operation: str, resource: str, new: Any, old: Any,
           groups: tuple[str, ...] = ("system:authenticated",), subresource: str = "") -> bool:
    """Whether the policy `spec` lets the request through."""
    requested = f"{resource}/{subresource}" if subresource else resource
    return denial(spec, user, groups, operation, requested, new, old) is None
