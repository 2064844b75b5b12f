#!/usr/bin/env bash
# Builds the Kubewarden test policies in tests/kubewarden-policies/ for
# wasm32-wasip1, with Kubewarden's published Rust SDK, as a Kubewarden
# policy repository builds them (plain cargo; no kwctl annotate).
#
# Output: tests/kubewarden-policies/target/wasm32-wasip1/release/<crate>.wasm
# (kw_privileged_pods.wasm, kw_add_label.wasm, kw_hostile.wasm,
# kw_require_labels.wasm for the bench, kw_logging.wasm, and the
# context-aware kw_unique_selector.wasm and kw_namespace_team.wasm). Idempotent:
# the policies are kept in the build cache outside the clone
# (scripts/lib/cache.sh), keyed by a hash of their sources, this script and
# the toolchain's versions, and copied into place when the key is there;
# otherwise cargo rebuilds what changed. `--locked` against the checked-in
# lock file; works offline once the crates are in cargo's cache. Extra
# arguments go to cargo (and bypass the cache).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/cache.sh
source "$root/scripts/lib/cache.sh"
dir="$root/tests/kubewarden-policies"
out="$dir/target/wasm32-wasip1/release"
list() {
    for wasm in "$out"/*.wasm; do
        printf '%8d  %s\n' "$(stat -c %s "$wasm")" "${wasm#"$root"/}"
    done
}
cd "$root"
key="$(rust_versions | tree_hash tests/kubewarden-policies rust-toolchain.toml scripts/build-kubewarden-policies.sh)"
if [[ $# -eq 0 ]] && cache_restore kubewarden "$key" "$out"; then
    list
    exit 0
fi
cd "$dir"

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip1; then
    rustup target add wasm32-wasip1
fi

cargo build --target wasm32-wasip1 --release --quiet --locked --target-dir "$dir/target" "$@"

if [[ $# -eq 0 ]]; then
    cache_store kubewarden "$key" "$out"/*.wasm
fi
list
