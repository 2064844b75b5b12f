#!/usr/bin/env bash
# Builds the first-party guest components in plugins/ for wasm32-wasip2.
#
# Output: plugins/target/wasm32-wasip2/release/<crate_name>.wasm (e.g.
# require_labels.wasm). Idempotent: cargo rebuilds only what changed, so a
# second run takes well under a second.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root/plugins"

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
    rustup target add wasm32-wasip2
fi

cargo build --target wasm32-wasip2 --release --quiet --target-dir "$root/plugins/target" "$@"

out="$root/plugins/target/wasm32-wasip2/release"
for wasm in "$out"/*.wasm; do
    printf '%8d  %s\n' "$(stat -c %s "$wasm")" "${wasm#"$root"/}"
done
