"""The Python client's kubelet paths through the API server to the stand-in
kubelet: `kubernetes.stream.stream` exec (output, stdin, exit code) and
`portforward` carrying an HTTP request. Usage: kubelet_test.py KUBECONFIG
POD TARGET_PORT."""

import sys
import time

from kubernetes import client, config
from kubernetes.stream import portforward, stream

kubeconfig, pod, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
config.load_kube_config(kubeconfig)
api = client.CoreV1Api()

out = stream(api.connect_get_namespaced_pod_exec, pod, "default",
             command=["sh", "-c", "echo out; echo err >&2"],
             stderr=True, stdin=False, stdout=True, tty=False)
assert "out" in out and "err" in out, repr(out)

resp = stream(api.connect_get_namespaced_pod_exec, pod, "default",
              command=["sh", "-c", "read x; echo got $x; exit 3"],
              stderr=True, stdin=True, stdout=True, tty=False,
              _preload_content=False)
resp.write_stdin("hello\n")
got = ""
deadline = time.time() + 30
while resp.is_open() and time.time() < deadline:
    resp.update(timeout=1)
    got += resp.read_stdout()
resp.run_forever(timeout=5)
assert "got hello" in got, repr(got)
assert resp.returncode == 3, resp.returncode

pf = portforward(api.connect_get_namespaced_pod_portforward, pod, "default",
                 ports=str(port))
sock = pf.socket(port)
sock.setblocking(True)
sock.settimeout(10)
sock.sendall(b"GET /through-python HTTP/1.0\r\n\r\n")
data = b""
deadline = time.time() + 30
while b"hello from target" not in data and time.time() < deadline:
    chunk = sock.recv(4096)
    if not chunk:
        break
    data += chunk
assert b"hello from target GET /through-python" in data, data
sock.close()
pf.close()
print("all kubelet checks passed")
