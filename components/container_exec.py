"""Run a script inside a worker container without putting secrets on any command line.

The script travels on stdin (`bash -s`), secrets travel as environment
variables that `docker exec -e NAME` copies from the pulumi-command process
(the value never appears in argv), and a tenant kubeconfig is written to a
private temporary file inside the container only for the script's lifetime.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

TENANT_KUBECONFIG_ENV = "TENANT_KUBECONFIG"

# Prepended to scripts that talk to the tenant API with the admin kubeconfig.
TENANT_KUBECONFIG_PREAMBLE = f"""\
kubeconfig_file="$(mktemp)"
trap 'rm -f "$kubeconfig_file"' EXIT
printf '%s' "${TENANT_KUBECONFIG_ENV}" > "$kubeconfig_file"
unset {TENANT_KUBECONFIG_ENV}
export KUBECONFIG="$kubeconfig_file"
"""


def docker_exec(container: str, env_names: Sequence[str] = ()) -> str:
    """`docker exec` that runs stdin with bash and forwards the named variables by name only."""
    forwarded = " ".join(f"-e {shlex.quote(name)}" for name in env_names)
    parts = ["docker exec -i", forwarded, shlex.quote(container), "bash -s"]
    return " ".join(part for part in parts if part)


def with_tenant_kubeconfig(script: str) -> str:
    """Script body prefixed with the preamble that materialises $TENANT_KUBECONFIG."""
    return "set -euo pipefail\n" + TENANT_KUBECONFIG_PREAMBLE + script
