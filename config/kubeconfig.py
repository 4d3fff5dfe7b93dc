"""What a kubeconfig says, read without connecting (its current context's cluster and user), for `config/`, which
validates `management.kubeconfig`, and `components.kube`, which connects with it. Errors never quote it."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

Kubeconfig = str | Mapping[str, Any]


class KubeconfigError(ValueError):
    """A kubeconfig that cannot be used. `problem` reads after the kubeconfig's name ("has no current-context");
    callers put their own name in front (`management.kubeconfig`, an output's key)."""

    def __init__(self, problem: str) -> None:
        super().__init__(f"kubeconfig {problem}")
        self.problem = problem


# --------------------------------------------------------------------------- #
# Kubeconfigs
# --------------------------------------------------------------------------- #


def parse(kubeconfig: Kubeconfig) -> dict[str, Any]:
    """The kubeconfig as a mapping (YAML text is parsed); KubeconfigError when it is not one."""
    if isinstance(kubeconfig, str):
        try:
            document = yaml.safe_load(kubeconfig)
        except yaml.YAMLError as error:
            # Only where: PyYAML's message quotes the offending line, which may hold client-key-data.
            mark = getattr(error, "problem_mark", None)
            where = f" (error at line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
            raise KubeconfigError(f"is not YAML{where}") from None
    else:
        document = kubeconfig
    if not isinstance(document, Mapping):
        raise KubeconfigError("is not a kubeconfig (a YAML mapping of clusters, users and contexts)")
    return dict(document)


@dataclass(frozen=True)
class Context:
    """What a kubeconfig's current context points at: the bodies of its cluster and user entries."""

    name: str
    cluster_name: str
    cluster: Mapping[str, Any]
    user_name: str | None
    user: Mapping[str, Any]  # empty for a context without a user (anonymous)
    namespace: str | None

    @property
    def server(self) -> str:
        server = self.cluster.get("server")
        if not isinstance(server, str) or not server:
            raise KubeconfigError(f"has no server in its cluster {self.cluster_name!r}")
        return server

    def ca_certificate(self) -> str:
        """The cluster's CA (PEM) from `certificate-authority-data`: public, all a worker needs to trust it."""
        try:
            return base64.b64decode(str(self.cluster["certificate-authority-data"]), validate=True).decode()
        except (KeyError, binascii.Error, UnicodeDecodeError):
            raise KubeconfigError(f"has no base64 certificate-authority-data in cluster {self.cluster_name!r}") \
                from None


def _named(document: Mapping[str, Any], section: str, name: Any) -> Mapping[str, Any] | None:
    for entry in document.get(section) or []:
        if isinstance(entry, Mapping) and entry.get("name") == name:
            body = entry.get(section[:-1])  # clusters -> cluster, users -> user, contexts -> context
            return body if isinstance(body, Mapping) else {}
    return None


def current_context(kubeconfig: Kubeconfig) -> Context:
    """Resolve `current-context` to its context, cluster and user entries, as kubectl does; no fallback to a lone
    context (kubectl and the official loader have none either)."""
    document = parse(kubeconfig)
    name = document.get("current-context")
    if not name or not isinstance(name, str):
        raise KubeconfigError("has no current-context: set the context to use "
                              "(kubectl config use-context <name> --kubeconfig <file>)")
    context = _named(document, "contexts", name)
    if context is None:
        raise KubeconfigError(f"has no context named {name!r} (its current-context)")
    cluster_name = context.get("cluster")
    if not cluster_name:
        raise KubeconfigError(f"has a context {name!r} that names no cluster")
    cluster = _named(document, "clusters", cluster_name)
    if cluster is None:
        raise KubeconfigError(f"has no cluster named {cluster_name!r} (context {name!r} names it)")
    user_name = context.get("user") or None
    user = _named(document, "users", user_name) if user_name else {}
    if user is None:
        raise KubeconfigError(f"has no user named {user_name!r} (context {name!r} names it)")
    namespace = context.get("namespace")
    return Context(name=name, cluster_name=str(cluster_name), cluster=dict(cluster),
                   user_name=str(user_name) if user_name else None, user=dict(user),
                   namespace=str(namespace) if namespace else None)
