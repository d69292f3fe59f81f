"""A pytest fixture that runs a whole rkube cluster for the test session.

`rkube server --ephemeral --port 0 --print-kubeconfig` starts the store (in memory), the
apiserver, the controllers, the scheduler and simulated nodes in one process, prints the admin
kubeconfig once everything is ready (ending with a `...` line), and stops on SIGTERM.
Set RKUBE to the binary's path if `rkube` is not on PATH.
"""
import os
import subprocess
import tempfile

import kubernetes
import pytest
import yaml


@pytest.fixture(scope="session")
def rkube_kubeconfig():
    """The path of an admin kubeconfig for a fresh cluster, removed afterwards."""
    proc = subprocess.Popen(
        [os.environ.get("RKUBE", "rkube"), "server", "--ephemeral", "--port", "0",
         "--nodes", "2", "--print-kubeconfig"],
        stdout=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stdout:
        if line.rstrip("\n") == "...":
            break
        lines.append(line)
    else:
        raise RuntimeError(f"rkube server exited ({proc.wait()}) before it was ready")
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write("".join(lines))
    try:
        yield f.name
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        os.unlink(f.name)


@pytest.fixture(scope="session")
def k8s(rkube_kubeconfig):
    """An ApiClient of the official Python client for the cluster."""
    config = kubernetes.client.Configuration()
    with open(rkube_kubeconfig) as f:
        kubernetes.config.load_kube_config_from_dict(yaml.safe_load(f), client_configuration=config)
    with kubernetes.client.ApiClient(config) as api:
        yield api
