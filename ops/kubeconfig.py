"""`make kubeconfig TENANT=<name> [ADMIN=1]`: a tenant's kubeconfig from the stack outputs, written with mode 600.

The default is the tenant's *user* credential (namespaced `edit` rights in its workload namespaces, Pod Security
`baseline`); `--admin` writes the tenant admin credential, which is the operator's. A tenant the stack does not
have is refused with the list of those it has, and nothing is written.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from ops.hostcheck import PULUMI_MISSING
from ops.private_file import write_private

ROOT = Path(__file__).resolve().parent.parent
Run = Callable[..., "subprocess.CompletedProcess[str]"]


class StackOutputError(Exception):
    """The stack's kubeconfig outputs cannot be read: no pulumi CLI, no `up` yet, or no such tenant."""


def tenant_kubeconfigs(stack: str, admin: bool, run: Run = subprocess.run) -> dict[str, str]:
    output = "tenantAdminKubeconfigs" if admin else "tenantKubeconfigs"
    argv = ["pulumi", "stack", "output", output, "--show-secrets", "--json", "--stack", stack]
    try:
        done = run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise StackOutputError(PULUMI_MISSING) from None
    if done.returncode != 0:
        # stdout may hold decrypted secrets: only stderr is shown.
        raise StackOutputError(f"`pulumi stack output {output}` failed: {' '.join(done.stderr.split())[-400:]}")
    try:
        value = json.loads(done.stdout)
    except ValueError:
        raise StackOutputError(f"stack {stack!r} has no {output} output yet: run `make up` first") from None
    if not isinstance(value, dict):
        raise StackOutputError(f"stack {stack!r} has no {output} output yet: run `make up` first")
    return value


def write_kubeconfig(stack: str, tenant: str, admin: bool, directory: Path = ROOT, run: Run = subprocess.run) -> Path:
    kubeconfigs = tenant_kubeconfigs(stack, admin, run)
    if tenant not in kubeconfigs:
        known = ", ".join(sorted(kubeconfigs)) or "none"
        raise StackOutputError(f"stack {stack!r} has no tenant {tenant!r} (its tenants: {known})")
    name = f"{tenant}-admin.kubeconfig" if admin else f"{tenant}.kubeconfig"
    return write_private(directory / name, kubeconfigs[tenant])


def main(argv: list[str] | None = None, run: Run = subprocess.run, directory: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(prog="make kubeconfig", description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True)
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--admin", action="store_true", help="the tenant admin credential (the operator's)")
    args = parser.parse_args(argv)
    try:
        path = write_kubeconfig(args.stack, args.tenant, args.admin, directory, run)
    except StackOutputError as error:
        print(f"make kubeconfig: {error}", file=sys.stderr)
        return 2
    what = "tenant ADMIN credentials" if args.admin else "tenant user credentials (namespaced edit rights)"
    print(f"wrote {path.name} ({what}; mode 600, keep it private)\nKUBECONFIG={path.name} kubectl get pods")
    return 0


if __name__ == "__main__":
    sys.exit(main())
