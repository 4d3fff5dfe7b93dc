"""The shell scripts of the management and worker layers (components/*/scripts) and the variables they read.

Each script takes its values from the environment (and stdin) only: a secret travels as a variable, never in
an argv. Python reads these files and hands them to bash whole; it never writes shell code. On the Pulumi host
pulumi-command runs a script's text with the interpreter `["/bin/bash", "-c"]`; on a worker, dispatch.sh runs it
(see components/worker/access.py).
"""

from __future__ import annotations

from pathlib import Path

_COMPONENTS = Path(__file__).resolve().parent
MANAGEMENT_SCRIPTS = _COMPONENTS / "management" / "scripts"
WORKER_SCRIPTS = _COMPONENTS / "worker" / "scripts"

NODE_JOIN = "node-join.sh"
NODE_LEAVE = "node-leave.sh"
KIND_CREATE = "kind-create.sh"
KIND_DELETE = "kind-delete.sh"
NODE_MIRRORS = "node-mirrors.sh"
NODE_UPGRADE = "node-upgrade.sh"
DISPATCH = "dispatch.sh"
CONTAINER_EXEC = "container-exec.sh"
# The scripts dispatch.sh may run on a node.
NODE_SCRIPT_NAMES = (NODE_JOIN, NODE_LEAVE, NODE_MIRRORS, NODE_UPGRADE)
SCRIPT_NAMES = (*NODE_SCRIPT_NAMES, KIND_CREATE, KIND_DELETE, DISPATCH, CONTAINER_EXEC)
_SCRIPT_DIRS = {KIND_CREATE: MANAGEMENT_SCRIPTS, KIND_DELETE: MANAGEMENT_SCRIPTS,
                **{name: WORKER_SCRIPTS for name in (*NODE_SCRIPT_NAMES, DISPATCH, CONTAINER_EXEC)}}

# dispatch.sh (run on the node): its argument is the action, its stdin this file and then the data block.
# `update` is what pulumi-command runs when a Command's inputs change and it has an `update` command (SSH only).
ACTIONS = ("create", "update", "delete")
# container-exec.sh (run on the Pulumi host for a container worker).
CONTAINER_ENV = "GPU_TENANCY_CONTAINER"
GONE_HINT_ENV = "GPU_TENANCY_GONE_HINT"

# node-join.sh and node-leave.sh (run on the worker).
NODE_NAME_ENV = "NODE_NAME"
TENANT_ENDPOINT_ENV = "TENANT_ENDPOINT"  # "<host>:<port>" of the tenant API server
JOIN_TOKEN_ENV = "JOIN_TOKEN"  # secret: "<6 [a-z0-9]>.<16 [a-z0-9]>"
CA_CERT_HASH_ENV = "CA_CERT_HASH"  # "sha256:<64 hex>"
TENANT_CA_CERT_ENV = "TENANT_CA_CERT"  # PEM, public
TENANT_VERSION_ENV = "TENANT_VERSION"  # "v1.35.0"
NODE_KIND_ENV = "NODE_KIND"
NODE_KIND_CONTAINER = "container"  # a kindest/node container
NODE_KIND_MACHINE = "machine"  # a real server over SSH
NODE_JOIN_ENV = (
    NODE_NAME_ENV,
    TENANT_ENDPOINT_ENV,
    JOIN_TOKEN_ENV,
    CA_CERT_HASH_ENV,
    TENANT_CA_CERT_ENV,
    TENANT_VERSION_ENV,
    NODE_KIND_ENV,
)
# node-join.sh in gpuMode nvidia, on a worker that lists `gpus` (HAMi's device plugin will run there): what to check.
GPU_MODE_ENV = "GPU_MODE"  # "nvidia"; unset otherwise
NVIDIA_RUNTIME_CLASS_ENV = "NVIDIA_RUNTIME_CLASS"  # nvidia.runtimeClassName, "" when nvidia must be the default
GPU_UUIDS_ENV = "GPU_UUIDS"  # the configured cards' UUIDs, space-separated
# node-upgrade.sh (run on SSH workers; NODE_NAME_ENV and TENANT_VERSION_ENV too).
UPGRADE_MODE_ENV = "UPGRADE_MODE"
UPGRADE_MODE_RECORD = "record"  # just joined at TENANT_VERSION: record it, change nothing
UPGRADE_MODE_UPGRADE = "upgrade"  # the version changed: check the packages, kubeadm upgrade node, restart kubelet
# node-mirrors.sh (run on the kind node and on workers).
REGISTRY_MIRRORS_ENV = "REGISTRY_MIRRORS"  # lines "<registry> <upstream server URL> <mirror URL>"
CONFIGURE_CONTAINERD_ENV = "CONFIGURE_CONTAINERD"  # "true": containerd 2.x may get our drop-in and a restart

# Test-only knobs of the node scripts (never set in production, so the scripts' defaults apply).
NODE_ROOT_ENV = "GPU_TENANCY_NODE_ROOT"  # prefix for /etc, /opt, /var, /proc and /sys
JOIN_ATTEMPTS_ENV = "JOIN_ATTEMPTS"  # default 12
JOIN_PAUSE_ENV = "JOIN_RETRY_PAUSE_SECONDS"  # default 10
RUNTIME_ATTEMPTS_ENV = "RUNTIME_WAIT_ATTEMPTS"  # default 60
RUNTIME_PAUSE_ENV = "RUNTIME_WAIT_PAUSE_SECONDS"  # default 1
ENDPOINT_ATTEMPTS_ENV = "ENDPOINT_WAIT_ATTEMPTS"  # default 12
ENDPOINT_PAUSE_ENV = "ENDPOINT_WAIT_PAUSE_SECONDS"  # default 5

# kind-create.sh and kind-delete.sh (run on the Pulumi host).
KIND_CLUSTER_NAME_ENV = "KIND_CLUSTER_NAME"
KIND_STACK_MARKER_ENV = "KIND_STACK_MARKER"  # value of the node label gpu-tenancy.io/stack
KIND_CHECKOUT_ENV = "KIND_CHECKOUT"  # value of the node label gpu-tenancy.io/checkout; unset for older stacks
KIND_WAIT_SECONDS_ENV = "KIND_WAIT_SECONDS"  # kind-create.sh only, default 300
KIND_CREATE_ENV = (KIND_CLUSTER_NAME_ENV, KIND_STACK_MARKER_ENV, KIND_WAIT_SECONDS_ENV)
KIND_DELETE_ENV = (KIND_CLUSTER_NAME_ENV, KIND_STACK_MARKER_ENV)


def script_text(name: str) -> str:
    """The text of one of the layer scripts, e.g. `script_text(NODE_JOIN)`."""
    return script_path(name).read_text(encoding="utf-8")


def script_path(name: str) -> Path:
    """Where one of the layer scripts lives: kind's under management/, the nodes' under worker/."""
    if name not in SCRIPT_NAMES:
        raise ValueError(f"unknown script {name!r}; expected one of {', '.join(SCRIPT_NAMES)}")
    return _SCRIPT_DIRS[name] / name
