# Sourced by the build scripts: build outputs kept outside the clone, keyed
# by a hash of everything that goes into them, so that a fresh clone (CI's
# every run) or `cargo clean` does not build again what has not changed.
#
#   WASM_APISERVER_CACHE  the cache's root
#                         (default ${XDG_CACHE_HOME:-$HOME/.cache}/wasm-apiserver)
#   WASM_APISERVER_NO_CACHE=1  build as if the cache were empty (and do not
#                         write it): the way to check that a build still works
#
# Entries are folders `<root>/<kind>/<key>/`; the newest 8 of each kind are
# kept. An entry is written to a temp folder and renamed into place, so a
# reader never sees half of one, and two writers of the same key cannot
# mix their files.

cache_root() {
    echo "${WASM_APISERVER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/wasm-apiserver}"
}

cache_enabled() {
    [[ "${WASM_APISERVER_NO_CACHE:-}" != 1 ]]
}

# tree_hash PATH...: a hash of the names and contents of every file under the
# PATHs (relative to the current folder), build outputs and installed
# packages left out, and of the strings on stdin (tool versions, commands).
tree_hash() {
    {
        find "$@" \( -name target -o -name node_modules -o -name __pycache__ -o -name '.*.tmp' \) -prune \
            -o -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum
        cat
    } | sha256sum | cut -c1-32
}

# The Rust toolchain a guest build uses (rust-toolchain.toml pins it).
rust_versions() {
    rustc -vV
    cargo -V
}

# cache_restore KIND KEY DEST: copies the entry's files into DEST (each one
# renamed into place, and only when it differs) and succeeds; fails when
# there is no such entry.
cache_restore() {
    local dir
    dir="$(cache_root)/$1/$2"
    cache_enabled && [[ -f "$dir/.complete" ]] || return 1
    mkdir -p "$3"
    local f name
    for f in "$dir"/*; do
        [[ -f "$f" ]] || continue
        name="$(basename "$f")"
        if ! cmp -s "$f" "$3/$name"; then
            cp -f "$f" "$3/.$name.tmp"
            mv -f "$3/.$name.tmp" "$3/$name"
        fi
    done
    touch "$dir"
}

# cache_store KIND KEY FILE...: records the files as the entry KIND/KEY and
# drops the oldest entries of KIND beyond 8.
cache_store() {
    cache_enabled || return 0
    local kind="$1" key="$2"
    shift 2
    local base tmp
    base="$(cache_root)/$kind"
    mkdir -p "$base"
    tmp="$(mktemp -d "$base/.new.XXXXXX")"
    cp -f "$@" "$tmp/"
    touch "$tmp/.complete"
    if ! mv -T "$tmp" "$base/$key" 2>/dev/null; then
        rm -rf "$tmp"
    fi
    # shellcheck disable=SC2012
    ls -1dt "$base"/*/ 2>/dev/null | tail -n +9 | xargs -r rm -rf
}

# Compiled dependencies, as CI caches for Rust keep them: a cargo profile
# folder (target/debug) saved without this repository's own crates, and put
# back into a clone that has none, so that cargo finds every third-party
# crate fresh and compiles only ours. cargo's fingerprints still decide:
# what changed since (a bumped lock file) is rebuilt, and the run saves a
# new copy under its own key. The newest 2 copies are kept.

# This repository's own artifacts (left out of a saved copy).
_own_artifacts=(-name '*wasm_apiserver*' -o -name '*wasm-apiserver*' -o -name 'it-*'
    -o -name 'e2e-*' -o -name 'corpus-*' -o -name 'mutations-*' -o -name 'checker-*'
    -o -name 'check_history-*' -o -name 'check-history*' -o -name 'namespace_defaults*'
    -o -name 'namespace-defaults*' -o -name 'labels_policy*' -o -name 'labels-policy*'
    -o -name 'node_label_score*' -o -name 'node-label-score*' -o -name 'hostile_scheduler*'
    -o -name 'hostile-scheduler*' -o -name 'incremental')

# prune_own_artifacts DIR: removes this repository's artifacts from a copy
# of a cargo profile folder.
prune_own_artifacts() {
    find "$1" -mindepth 1 \( "${_own_artifacts[@]}" \) -prune -exec rm -rf {} +
}

# target_restore NAME DIR: fills DIR, when it does not exist, from the
# newest saved copy of NAME.
target_restore() {
    local name="$1" dir="$2" entry
    cache_enabled || return 0
    [[ -e "$dir" ]] && return 0
    entry="$(ls -1dt "$(cache_root)/targets/$name"/*/ 2>/dev/null | head -1 || true)"
    [[ -n "$entry" && -f "$entry/.complete" ]] || return 0
    mkdir -p "$(dirname "$dir")"
    cp -a "$entry/tree" "$dir.restoring"
    mv -T "$dir.restoring" "$dir"
    echo "restored $dir from the build cache (targets/$name/$(basename "$entry"))" >&2
}

# target_save NAME KEY DIR: saves DIR as NAME's copy KEY, unless there is one.
target_save() {
    local name="$1" key="$2" dir="$3" base tmp
    cache_enabled || return 0
    base="$(cache_root)/targets/$name"
    [[ -f "$base/$key/.complete" && -d "$dir" ]] && return 0
    mkdir -p "$base"
    tmp="$(mktemp -d "$base/.new.XXXXXX")"
    cp -a "$dir" "$tmp/tree"
    prune_own_artifacts "$tmp/tree"
    touch "$tmp/.complete"
    if ! mv -T "$tmp" "$base/$key" 2>/dev/null; then
        rm -rf "$tmp"
    fi
    # shellcheck disable=SC2012
    ls -1dt "$base"/*/ 2>/dev/null | tail -n +3 | xargs -r rm -rf
}
