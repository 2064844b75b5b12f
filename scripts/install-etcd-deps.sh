#!/usr/bin/env bash
# Installs what the etcd storage backend and its tests need, from Debian:
#   protobuf-compiler  `protoc`, needed to build etcd-client (cargo feature `etcd`)
#   libprotobuf-dev    the well-known .proto files protoc imports
#                      (google/protobuf/descriptor.proto; only a Recommends)
#   etcd-server        the `etcd` binary the tests start on loopback ports
#   openssl            makes the certificates of the etcd TLS test
#   docker-registry    the OCI registry (CNCF distribution) the module-pull
#                      tests push components to and the server pulls from
#   apache2-utils      `htpasswd`: the bcrypt password file of the registry
#                      that the registry-credentials tests start
#   prometheus         the Prometheus server and `promtool` that the
#                      observability tests scrape `/metrics` with
# Idempotent: installs only what is missing, and runs `apt-get update` once,
# only when something is. Run as root (no sudo).
set -euo pipefail

missing=()
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
[ -f /usr/include/google/protobuf/descriptor.proto ] || missing+=(libprotobuf-dev)
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v docker-registry >/dev/null 2>&1 || missing+=(docker-registry)
command -v htpasswd >/dev/null 2>&1 || missing+=(apache2-utils)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "install-etcd-deps.sh: need root to install: ${missing[*]}" >&2
    exit 1
fi

echo "install-etcd-deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
command -v protoc >/dev/null && command -v etcd >/dev/null && command -v openssl >/dev/null \
    && command -v docker-registry >/dev/null && command -v htpasswd >/dev/null \
    && command -v prometheus >/dev/null && command -v promtool >/dev/null \
    && [ -f /usr/include/google/protobuf/descriptor.proto ]

