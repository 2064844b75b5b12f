"""Release against release: two real `wasm-apiserver` binaries under the same
external load, interleaved. Run through `scripts/bench-releases`, which builds
both binaries and installs wrk; see its header."""

import argparse
import http.client
import json
import os
import re
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time

TOKEN = "bench-token-0123456789"
SCENARIOS = ["create", "get", "list-100", "admission", "watch", "scrape"]
# `scrape` (GET /metrics with 1,000 CRDs served) runs only when named.
DEFAULT_SCENARIOS = ["create", "get", "list-100", "admission", "watch"]
TARGET = 0.97
SCRAPE_CRDS = 1000
SCRAPE_TARGET_MS = 50
WATCHERS = 32
WATCH_WRITES = 300


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One release's binary on its own data dir and port."""

    def __init__(self, name, binary, plugin_dir, work, flags=()):
        self.name = name
        self.port = free_port()
        self.dir = os.path.join(work, re.sub(r"[^A-Za-z0-9]+", "-", name))
        os.makedirs(self.dir)
        tokens = os.path.join(self.dir, "tokens.csv")
        with open(tokens, "w") as f:
            f.write(f'{TOKEN},bench,bench-uid,"bench"\n')
        self.log = open(os.path.join(self.dir, "server.log"), "w")
        self.proc = subprocess.Popen(
            [binary, "serve", "--data-dir", os.path.join(self.dir, "data"),
             "--secure-port", str(self.port), "--token-auth-file", tokens,
             "--plugin-dir", plugin_dir, *flags],
            stdout=self.log, stderr=subprocess.STDOUT,
            env={**os.environ, "RUST_LIB_BACKTRACE": "0"})
        self.ctx = ssl.create_default_context()
        self.ctx.check_hostname = False
        self.ctx.verify_mode = ssl.CERT_NONE
        deadline = time.time() + 60
        while True:
            if self.proc.poll() is not None:
                sys.exit(f"{name} exited; see {self.log.name}")
            try:
                if self.request("GET", "/readyz")[0] == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                sys.exit(f"{name} not ready in 60 s; see {self.log.name}")
            time.sleep(0.2)

    def url(self):
        return f"https://127.0.0.1:{self.port}"

    def conn(self):
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=30)

    def request(self, method, path, body=None, conn=None):
        c = conn or self.conn()
        headers = {"Authorization": f"Bearer {TOKEN}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
            body = json.dumps(body)
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        data = r.read()
        if conn is None:
            c.close()
        return r.status, data

    def must(self, method, path, body=None, ok=(200, 201)):
        status, data = self.request(method, path, body)
        if status not in ok:
            sys.exit(f"{self.name}: {method} {path}: {status} {data[:300]!r}")
        return data

    def cpu_seconds(self):
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def setup(server):
    """The same objects on every server; the bench user is authorized by RBAC
    (a ClusterRoleBinding to cluster-admin), not by a privileged group."""
    # Until the binding exists the token's user may do nothing: bootstrap it
    # as the admin (client certificate in the data dir's kubeconfig).
    kubeconfig = os.path.join(server.dir, "data", "admin.kubeconfig")
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "bench"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bench"}],
    }
    subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "apply", "-f", "-"],
                   input=json.dumps(binding), text=True, check=True, capture_output=True)
    deadline = time.time() + 30
    while server.request("GET", "/api/v1/namespaces/default")[0] != 200:
        if time.time() > deadline:
            sys.exit(f"{server.name}: the bench user is not authorized")
        time.sleep(0.2)
    for ns, labels in [("bench", {}), ("list100", {}), ("watch", {}),
                       ("adm", {"bench-admission": "yes"})]:
        server.must("POST", "/api/v1/namespaces",
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}})
    server.must("POST", "/api/v1/namespaces/bench/configmaps", configmap("get-me"))
    conn = server.conn()
    for i in range(100):
        status, data = server.request("POST", "/api/v1/namespaces/list100/configmaps",
                                      configmap(f"item-{i:03}"), conn)
        if status != 201:
            sys.exit(f"{server.name}: {status} {data[:200]!r}")
    conn.close()
    # A component of the frozen 0.2.0 package, which every release since
    # loads (the first-party plugins follow the newest package).
    plugin = {
        "apiVersion": "admission.wasm-apiserver.io/v1alpha1", "kind": "AdmissionPlugin",
        "metadata": {"name": "deny-probe"},
        "spec": {
            "module": {"file": "frozen_v2_deny_names.wasm"}, "phases": ["Validating"],
            "mode": "Deny", "failurePolicy": "Fail",
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["configmaps"]}],
            "namespaceSelector": {"matchLabels": {"bench-admission": "yes"}},
            "config": {"prefix": "probe"},
        },
    }
    server.must("POST", "/apis/admission.wasm-apiserver.io/v1alpha1/admissionplugins", plugin)
    # Active once a create without the label is refused.
    deadline = time.time() + 60
    while True:
        status, _ = server.request("POST", "/api/v1/namespaces/adm/configmaps", configmap("probe", team=False))
        if status in (400, 403, 422):
            break
        if status == 201:
            server.request("DELETE", "/api/v1/namespaces/adm/configmaps/probe")
        if time.time() > deadline:
            sys.exit(f"{server.name}: the admission plugin never became active: {status} {_[:300]!r}\n"
                     f"{server.must('GET', '/apis/admission.wasm-apiserver.io/v1alpha1/admissionplugins')[:1500]!r}")
        time.sleep(0.3)


def configmap(name, team=True):
    labels = {"app": "bench"}
    if team:
        labels["team"] = "load"
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels},
            "data": {"payload": "0123456789abcdef" * 3}}


LUA_CREATE = r"""
local counter = 0
local threads = 0
function setup(thread)
  thread:set("id", threads)
  threads = threads + 1
end
function request()
  counter = counter + 1
  local name = string.format("%s-%d-%d", os.getenv("BENCH_PREFIX"), id, counter)
  local body = '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"' .. name ..
    '","labels":{"app":"bench","team":"load"}},"data":{"payload":"0123456789abcdef0123456789abcdef0123456789abcdef"}}'
  -- wrk.format sends only the headers given here, not wrk.headers (-H).
  local headers = {["Content-Type"] = "application/json", ["Authorization"] = wrk.headers["Authorization"]}
  return wrk.format("POST", os.getenv("BENCH_PATH"), headers, body)
end
"""


def wrk(server, path, seconds, connections, work, lua=None, prefix=""):
    cmd = ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency",
           "-H", f"Authorization: Bearer {TOKEN}"]
    env = dict(os.environ)
    if lua:
        script = os.path.join(work, "create.lua")
        with open(script, "w") as f:
            f.write(lua)
        cmd += ["-s", script]
        env["BENCH_PATH"] = path
        env["BENCH_PREFIX"] = prefix
    cmd.append(server.url() + path)
    cpu = server.cpu_seconds()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    cpu = server.cpu_seconds() - cpu
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    total = int(re.search(r"(\d+) requests in", out).group(1))
    p50 = re.search(r"50%\s+([\d.]+)(us|ms|s)", out)
    p50_ms = float(p50.group(1)) * {"us": 0.001, "ms": 1, "s": 1000}[p50.group(2)]
    if bad and int(bad.group(1)) > total // 100 or errors:
        sys.exit(f"{server.name} {path}: {bad.group(0) if bad else ''} {errors.group(0) if errors else ''}\n{out}")
    return {"rate": rate, "p50_ms": p50_ms, "cpu_per_req_us": cpu / max(total, 1) * 1e6}


def watch_fanout(server, round_no):
    """WATCHERS watches of one namespace, then WATCH_WRITES creates as fast as
    one connection sends them: events delivered per second, from the first
    create until every watcher has seen the last."""
    ns = "watch"
    status, data = server.request("GET", f"/api/v1/namespaces/{ns}/configmaps?limit=1")
    rv = json.loads(data)["metadata"]["resourceVersion"]
    prefix = f"w{round_no}-"
    done = [threading.Event() for _ in range(WATCHERS)]
    ready = threading.Barrier(WATCHERS + 1)
    finished = [0.0] * WATCHERS

    def watcher(i):
        s = socket.create_connection(("127.0.0.1", server.port))
        s = server.ctx.wrap_socket(s)
        s.sendall((f"GET /api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion={rv} HTTP/1.1\r\n"
                   f"Host: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\r\n").encode())
        ready.wait()
        # Each event names its object once; a match split across two reads is
        # counted once, when its end arrives (the tail kept is one byte
        # shorter than the pattern).
        pattern = f'"name":"{prefix}'.encode()
        seen = 0
        tail = b""
        while seen < WATCH_WRITES:
            chunk = s.recv(65536)
            if not chunk:
                break
            data = tail + chunk
            seen += data.count(pattern)
            tail = data[-(len(pattern) - 1):]
        finished[i] = time.perf_counter()
        done[i].set()
        s.close()

    threads = [threading.Thread(target=watcher, args=(i,), daemon=True) for i in range(WATCHERS)]
    for t in threads:
        t.start()
    ready.wait()
    time.sleep(0.5)
    start = time.perf_counter()
    conn = server.conn()
    for i in range(WATCH_WRITES):
        status, _ = server.request("POST", f"/api/v1/namespaces/{ns}/configmaps",
                                   configmap(f"{prefix}{i:04}"), conn)
        if status != 201:
            sys.exit(f"{server.name}: watch write {status}")
    conn.close()
    for d in done:
        if not d.wait(60):
            sys.exit(f"{server.name}: a watcher missed events")
    elapsed = max(finished) - start
    return {"rate": WATCHERS * WATCH_WRITES / elapsed, "p50_ms": elapsed * 1000, "cpu_per_req_us": 0.0}


def serve_crds(server, n):
    """`n` CRDs (one kind each), then waits until the last one is served."""
    c = server.conn()
    for i in range(n):
        crd = {
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"things{i}.scrape.bench.io"},
            "spec": {"group": "scrape.bench.io", "scope": "Namespaced",
                     "names": {"plural": f"things{i}", "singular": f"thing{i}",
                               "kind": f"Thing{i}", "listKind": f"Thing{i}List"},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {
                                       "type": "object",
                                       "x-kubernetes-preserve-unknown-fields": True}}}]}}
        status, data = server.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                                      crd, conn=c)
        if status not in (201, 409):
            sys.exit(f"{server.name}: CRD {i}: {status} {data[:200]!r}")
    c.close()
    deadline = time.time() + 300
    while server.request("GET", f"/apis/scrape.bench.io/v1/things{n - 1}")[0] != 200:
        if time.time() > deadline:
            sys.exit(f"{server.name}: the CRDs are not served after 300 s")
        time.sleep(0.5)


def scrape(server, times=15):
    """GET /metrics `times` times: the median time and the size."""
    c = server.conn()
    elapsed, size = [], 0
    cpu = server.cpu_seconds()
    for _ in range(times):
        t = time.perf_counter()
        status, data = server.request("GET", "/metrics", conn=c)
        elapsed.append((time.perf_counter() - t) * 1000)
        if status != 200:
            sys.exit(f"{server.name}: GET /metrics: {status}")
        size = len(data)
    cpu = server.cpu_seconds() - cpu
    c.close()
    med = statistics.median(elapsed)
    return {"rate": 1000 / med, "p50_ms": med, "cpu_per_req_us": cpu / times * 1e6, "bytes": size}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--previous", required=True)
    p.add_argument("--previous-name", required=True)
    p.add_argument("--head", required=True)
    p.add_argument("--head-name", required=True)
    p.add_argument("--plugin-dir", required=True)
    p.add_argument("--previous-flags", default="", help="extra serve flags of the previous binary")
    p.add_argument("--head-flags", default="", help="extra serve flags of HEAD's binary")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=int, default=8)
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("scenarios", nargs="*")
    a = p.parse_args()
    wanted = [s for s in SCENARIOS
              if (s in DEFAULT_SCENARIOS if not a.scenarios else any(f in s for f in a.scenarios))]
    work = tempfile.mkdtemp(prefix="bench-releases-")
    print(f"release against release: previous {a.previous_name} vs {a.head_name}; "
          f"wrk -t2 -c{a.connections}, {a.seconds} s per window, {a.rounds} rounds, interleaved "
          f"(the order flips every round); {os.cpu_count()} cores shared by wrk and the servers")
    with open("/proc/loadavg") as f:
        print("load average before the run:", " ".join(f.read().split()[:3]))
    servers = {}
    try:
        for key, name, binary, flags in [
                ("previous", a.previous_name, a.previous, a.previous_flags.split()),
                ("head", a.head_name, a.head, a.head_flags.split())]:
            servers[key] = Server(name, binary, a.plugin_dir, work, flags)
            setup(servers[key])
            if "scrape" in wanted:
                serve_crds(servers[key], SCRAPE_CRDS)
        # Both run throughout (every controller on); only one is loaded at a time.
        time.sleep(2)
        results = {s: {"previous": [], "head": []} for s in wanted}
        for r in range(a.rounds):
            order = ["previous", "head"] if r % 2 == 0 else ["head", "previous"]
            for scenario in wanted:
                for key in order:
                    srv = servers[key]
                    if scenario == "create":
                        m = wrk(srv, "/api/v1/namespaces/bench/configmaps", a.seconds, a.connections,
                                work, LUA_CREATE, f"c{r}")
                    elif scenario == "get":
                        m = wrk(srv, "/api/v1/namespaces/bench/configmaps/get-me", a.seconds,
                                a.connections, work)
                    elif scenario == "list-100":
                        m = wrk(srv, "/api/v1/namespaces/list100/configmaps", a.seconds,
                                min(a.connections, 16), work)
                    elif scenario == "admission":
                        m = wrk(srv, "/api/v1/namespaces/adm/configmaps", a.seconds, a.connections,
                                work, LUA_CREATE, f"a{r}")
                    elif scenario == "scrape":
                        m = scrape(srv)
                    else:
                        m = watch_fanout(srv, r)
                    results[scenario][key].append(m)
                    print(f"round {r + 1} {scenario:<10} {srv.name:<24} {m['rate']:>10.0f}/s  "
                          f"p50 {m['p50_ms']:.2f} ms  server CPU {m['cpu_per_req_us']:.0f} µs/req",
                          flush=True)
        print()
        print(f"| scenario | previous ({a.previous_name}) /s | HEAD /s | HEAD/previous per round | median | target >= {TARGET}x |")
        print("|---|---:|---:|---|---:|---|")
        for scenario in wanted:
            prev = [m["rate"] for m in results[scenario]["previous"]]
            head = [m["rate"] for m in results[scenario]["head"]]
            ratios = [h / q for h, q in zip(head, prev)]
            med = statistics.median(ratios)
            verdict = "met" if med >= TARGET else "MISSED"
            print(f"| {scenario} | {statistics.median(prev):.0f} | {statistics.median(head):.0f} | "
                  f"{', '.join(f'{x:.3f}' for x in ratios)} | {med:.3f}x | {verdict} |")
        if "scrape" in wanted:
            print()
            print(f"GET /metrics with {SCRAPE_CRDS} CRDs served (median of 15 per round, target <= {SCRAPE_TARGET_MS} ms):")
            for key in ["previous", "head"]:
                ms = statistics.median(m["p50_ms"] for m in results["scrape"][key])
                size = results["scrape"][key][-1]["bytes"]
                verdict = "met" if ms <= SCRAPE_TARGET_MS else "MISSED"
                print(f"  {servers[key].name}: {ms:.1f} ms, {size} bytes: {verdict}")
    finally:
        for s in servers.values():
            s.stop()


if __name__ == "__main__":
    main()
