"""docker exec wrapper: secrets by name only; kubeconfig preamble works in bash."""

import os
import subprocess

from components.container_exec import TENANT_KUBECONFIG_ENV, docker_exec, with_tenant_kubeconfig


def test_docker_exec_forwards_variable_names_not_values():
    cmd = docker_exec("tenant-a-worker-0", ["JOIN_TOKEN", TENANT_KUBECONFIG_ENV])
    assert cmd == "docker exec -i -e JOIN_TOKEN -e TENANT_KUBECONFIG tenant-a-worker-0 bash -s"
    assert "=" not in cmd


def test_preamble_exposes_kubeconfig_as_file_and_removes_it(tmp_path):
    script = with_tenant_kubeconfig('cat "$KUBECONFIG"; echo "env:${TENANT_KUBECONFIG:-unset}"; echo "$KUBECONFIG" > "$OUT"\n')
    out_file = tmp_path / "path"
    done = subprocess.run(
        ["bash", "-s"], input=script, capture_output=True, text=True, check=True,
        env={**os.environ, TENANT_KUBECONFIG_ENV: "apiVersion: v1\nkind: Config\n", "OUT": str(out_file)},
    )
    assert done.stdout.startswith("apiVersion: v1\nkind: Config")
    assert "env:unset" in done.stdout
    written = out_file.read_text().strip()
    assert written and not os.path.exists(written)
