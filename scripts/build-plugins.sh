#!/usr/bin/env bash
# Builds the first-party guest components in plugins/.
#
# Output: plugins/target/wasm32-wasip2/release/<crate_name>.wasm (e.g.
# require_labels.wasm). Idempotent: the components are kept in the build
# cache outside the clone (scripts/lib/cache.sh), keyed by a hash of
# plugins/, wit/, this script and the toolchain's versions; when the key is
# there they are copied into place and nothing is compiled (a fresh clone
# included). Otherwise cargo builds what changed and the cache records it.
# Extra arguments go to cargo (and bypass the cache).
#
# Most crates build for wasm32-wasip2. The policies in `wasi_free` use
# nothing of WASI: they build for wasm32-unknown-unknown, and wasm-tools
# encodes the module as a component (from the WIT that wit-bindgen embeds).
# A component without WASI imports links one imported interface instead of
# sixteen and creates no WASI state, which makes a call cheaper (measured
# in ARCHITECTURE.md, "Plugin call cost"); the hostile fixtures and the
# other plugins keep WASI.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/cache.sh
source "$root/scripts/lib/cache.sh"
cd "$root"

wasi_free=(require-labels default-labels deny-privileged allow-all)
wasm_tools_version=1.263.0
out="$root/plugins/target/wasm32-wasip2/release"

list() {
    for wasm in "$out"/*.wasm; do
        printf '%8d  %s\n' "$(stat -c %s "$wasm")" "${wasm#"$root"/}"
    done
}

key="$({ rust_versions; echo "wasm-tools $wasm_tools_version"; } |
    tree_hash plugins wit rust-toolchain.toml scripts/build-plugins.sh)"
if [[ $# -eq 0 ]] && cache_restore guests "$key" "$out"; then
    list
    exit 0
fi
cd "$root/plugins"

for target in wasm32-wasip2 wasm32-unknown-unknown; do
    if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
        rustup target add "$target"
    fi
done
if ! wasm-tools --version 2>/dev/null | grep -q "^wasm-tools $wasm_tools_version"; then
    cargo install --quiet --locked wasm-tools --version "$wasm_tools_version" \
        --no-default-features --features component
fi

exclude=()
only=()
for crate in "${wasi_free[@]}"; do
    exclude+=(--exclude "$crate")
    only+=(-p "$crate")
done
cargo build --target wasm32-wasip2 --release --quiet --target-dir "$root/plugins/target" \
    --workspace "${exclude[@]}" "$@"
cargo build --target wasm32-unknown-unknown --release --quiet --target-dir "$root/plugins/target" \
    "${only[@]}" "$@"

core="$root/plugins/target/wasm32-unknown-unknown/release"
mkdir -p "$out"
for crate in "${wasi_free[@]}"; do
    name="${crate//-/_}"
    # Several test processes may run this at once: encode to a file of our
    # own, then rename it into place if it differs.
    tmp="$(mktemp "$out/.$name.XXXXXX")"
    wasm-tools component new "$core/$name.wasm" -o "$tmp"
    if cmp -s "$tmp" "$out/$name.wasm"; then
        rm -f "$tmp"
    else
        mv -f "$tmp" "$out/$name.wasm"
    fi
done

if [[ $# -eq 0 ]]; then
    cache_store guests "$key" "$out"/*.wasm
fi
list
