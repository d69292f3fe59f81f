"""The official Python client's exec and port-forward against a cluster (argv[1]: kubeconfig).

Prints one line per check, for the e2e test to assert on.
"""
import sys

from kubernetes import client, config
from kubernetes.stream import portforward, stream

config.load_kube_config(sys.argv[1])
api = client.CoreV1Api()

out = stream(api.connect_get_namespaced_pod_exec, "web", "default", container="web",
             command=["hostname"], stderr=True, stdin=False, stdout=True, tty=False)
print("EXEC", out.strip())

resp = stream(api.connect_get_namespaced_pod_exec, "web", "default", container="web",
              command=["sh", "-c", "echo out; exit 3"], stderr=True, stdin=False, stdout=True,
              tty=False, _preload_content=False)
resp.run_forever(timeout=20)
print("STDOUT", resp.read_stdout().strip())
print("CODE", resp.returncode)

pf = portforward(api.connect_get_namespaced_pod_portforward, "web", "default", ports="80")
sock = pf.socket(80)
sock.setblocking(True)
sock.settimeout(20)
sock.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
data = b""
while True:
    chunk = sock.recv(4096)
    if not chunk:
        break
    data += chunk
print("PF", data.split(b"\r\n")[0].decode(), b"Welcome to nginx!" in data)
