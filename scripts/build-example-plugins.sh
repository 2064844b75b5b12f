#!/usr/bin/env bash
# Builds the polyglot example policies into wasm components:
#
#   examples/python-policy/app.py -> examples/target/python-policy.wasm  (componentize-py)
#   examples/js-policy/app.js     -> examples/target/js-policy.wasm      (componentize-js)
#   examples/labels-policy/{rust,python,js} (one policy, three languages, on
#   the SDKs in plugins/sdk, plugins/sdk-python, plugins/sdk-js)
#                                 -> examples/target/labels-policy-{rust,python,js}.wasm
#   examples/unique-ingress-host/python/app.py (context-aware: reads the
#   cluster through the Python SDK's `cluster` helpers)
#                                 -> examples/target/unique-ingress-host-python.wasm
#   examples/unique-ingress-host/js/{app,logic}.js (the same policy on the
#   JavaScript SDK's `cluster` helpers)
#                                 -> examples/target/unique-ingress-host-js.wasm
#   examples/namespace-defaults/python/app.py (a controller, on the Python
#   controller SDK)               -> examples/target/namespace-defaults-python.wasm
#   examples/namespace-defaults/js/{app,logic}.js (the same, on the
#   JavaScript controller SDK)    -> examples/target/namespace-defaults-js.wasm
#   examples/node-label-score/{rust,python,js} (one scheduler plugin, world
#   scheduler-plugin, in three languages on the SDKs' scheduler support)
#                                 -> examples/target/node-label-score-{rust,python,js}.wasm
#
# Idempotent and fast on reruns:
# * rebuilds a component only when a hash of its inputs (source, wit/,
#   lock file, tool version, build command) differs from the one recorded
#   beside it (examples/target/<name>.inputs), and takes it from the build
#   cache outside the clone (scripts/lib/cache.sh) when that hash is there,
#   so a fresh clone builds nothing that was built before on this machine;
# * installs componentize-py 0.25.1 (pip) only when a Python component must
#   be built and that version is not installed, and the npm dependencies of
#   examples/js-policy (`npm ci`) only when a JavaScript component must be
#   built and node_modules lacks a devDependency of package.json at its
#   pinned version (componentize-js 0.23.0, and preview2-shim 0.25.0, which
#   componentize-js imports at run time without declaring it).
#
# Needs python3 (with pip), node and npm; reaches only PyPI and the npm
# registry, and only when installing.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/cache.sh
source "$root/scripts/lib/cache.sh"
out="$root/examples/target"
mkdir -p "$out"

# Two concurrent runs (e.g. two test binaries) must not interleave.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$out/.lock"
    flock 9
fi

PY_VERSION=0.25.1

need() {
    command -v "$1" >/dev/null 2>&1 || {
        echo "build-example-plugins: '$1' is required but not on PATH" >&2
        exit 1
    }
}

now() { date +%s.%N; }
since() { awk -v s="$1" -v e="$(now)" 'BEGIN { printf "%.1f s", e - s }'; }

# Hash of the given files plus any extra strings on stdin.
inputs_hash() {
    { sha256sum "$@" | sed "s|$root/||"; cat; } | sha256sum | cut -d' ' -f1
}

# build NAME HASH COMMAND...: runs COMMAND (which writes $tmp) unless
# examples/target/NAME.wasm is up to date with HASH.
build() {
    local name="$1" hash="$2"
    shift 2
    local wasm="$out/$name.wasm" stamp="$out/$name.inputs"
    if [[ -f "$wasm" && -f "$stamp" && "$(cat "$stamp")" == "$hash" ]]; then
        printf '%10d  %s (up to date)\n' "$(stat -c %s "$wasm")" "${wasm#"$root"/}"
        return
    fi
    rm -f "$stamp"
    if cache_restore "examples/$name" "$hash" "$out"; then
        echo "$hash" >"$stamp"
        printf '%10d  %s (from the build cache)\n' "$(stat -c %s "$wasm")" "${wasm#"$root"/}"
        return
    fi
    tmp="$out/.$name.wasm.tmp"
    rm -f "$tmp"
    local start
    start="$(now)"
    "$@"
    mv -f "$tmp" "$wasm"
    echo "$hash" >"$stamp"
    cache_store "examples/$name" "$hash" "$wasm"
    printf '%10d  %s (built in %s)\n' "$(stat -c %s "$wasm")" "${wasm#"$root"/}" "$(since "$start")"
}

wit_files=("$root"/wit/*.wit)

# --- Python -----------------------------------------------------------------
need python3
py_installed() {
    python3 -c 'import importlib.metadata as m; print(m.version("componentize-py"))' 2>/dev/null || true
}
# Installs componentize-py when missing (called by the builds, so a run
# with every component up to date installs nothing).
py_tool() {
    if [[ "$(py_installed)" != "$PY_VERSION" ]]; then
        local start
        start="$(now)"
        PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check \
            "componentize-py==$PY_VERSION" >&2
        echo "installed componentize-py $PY_VERSION in $(since "$start")" >&2
    fi
}
# Run the installed package directly: no reliance on PATH or pyenv shims.
componentize_py() {
    py_tool
    PYTHONDONTWRITEBYTECODE=1 python3 -c \
        'import sys; from componentize_py import script; sys.argv[0] = "componentize-py"; sys.exit(script())' "$@"
}
py_build() {
    (cd "$root/examples/python-policy" &&
        componentize_py -d "$root/wit" -w admission-plugin componentize app -o "$tmp" >/dev/null)
}
py_hash="$(echo "componentize-py $PY_VERSION -w admission-plugin componentize app" |
    inputs_hash "$root/examples/python-policy/app.py" "${wit_files[@]}")"
build python-policy "$py_hash" py_build

# labels-policy in Python: the SDK module is found through -p (a policy
# repository would keep a copy next to app.py instead).
py_sdk="$root/plugins/sdk-python"
labels_py_build() {
    (cd "$root/examples/labels-policy/python" &&
        componentize_py -d "$root/wit" -w admission-plugin componentize -p . -p "$py_sdk" app \
            -o "$tmp" >/dev/null)
}
labels_py_hash="$(echo "componentize-py $PY_VERSION -w admission-plugin componentize -p . -p sdk app" |
    inputs_hash "$root/examples/labels-policy/python/app.py" "$py_sdk/wasm_apiserver_sdk.py" "${wit_files[@]}")"
build labels-policy-python "$labels_py_hash" labels_py_build

# unique-ingress-host in Python: a context-aware admission policy (world
# admission-plugin, its `cluster` import) on the Python SDK.
uih_py_build() {
    (cd "$root/examples/unique-ingress-host/python" &&
        componentize_py -d "$root/wit" -w admission-plugin componentize -p . -p "$py_sdk" app \
            -o "$tmp" >/dev/null)
}
uih_py_hash="$(echo "componentize-py $PY_VERSION -w admission-plugin componentize -p . -p sdk app" |
    inputs_hash "$root/examples/unique-ingress-host/python/app.py" "$py_sdk/wasm_apiserver_sdk.py" "${wit_files[@]}")"
build unique-ingress-host-python "$uih_py_hash" uih_py_build

# namespace-defaults in Python: a controller (world controller-plugin) on the
# Python controller SDK (same folder as the admission SDK, which it uses
# for configuration parsing).
nd_py_build() {
    (cd "$root/examples/namespace-defaults/python" &&
        componentize_py -d "$root/wit" -w controller-plugin componentize -p . -p "$py_sdk" app \
            -o "$tmp" >/dev/null)
}
nd_py_hash="$(echo "componentize-py $PY_VERSION -w controller-plugin componentize -p . -p sdk app" |
    inputs_hash "$root/examples/namespace-defaults/python/app.py" "$py_sdk/wasm_apiserver_sdk.py" \
        "$py_sdk/wasm_apiserver_controller_sdk.py" "${wit_files[@]}")"
build namespace-defaults-python "$nd_py_hash" nd_py_build

# node-label-score in Python: a scheduler plugin (world scheduler-plugin) on
# the Python scheduler SDK (same folder as the admission SDK, which it uses
# for configuration parsing).
nls_py_build() {
    (cd "$root/examples/node-label-score/python" &&
        componentize_py -d "$root/wit" -w scheduler-plugin componentize -p . -p "$py_sdk" app \
            -o "$tmp" >/dev/null)
}
nls_py_hash="$(echo "componentize-py $PY_VERSION -w scheduler-plugin componentize -p . -p sdk app" |
    inputs_hash "$root/examples/node-label-score/python/app.py" "$py_sdk/wasm_apiserver_sdk.py" \
        "$py_sdk/wasm_apiserver_scheduler_sdk.py" "${wit_files[@]}")"
build node-label-score-python "$nls_py_hash" nls_py_build

# --- JavaScript -------------------------------------------------------------
need node
need npm
js_dir="$root/examples/js-policy"
# True when node_modules holds every devDependency at its pinned version.
js_deps_ok() {
    (cd "$js_dir" && node -e '
        const deps = require("./package.json").devDependencies;
        for (const [name, version] of Object.entries(deps)) {
            let found;
            try { found = require(`./node_modules/${name}/package.json`).version; } catch {}
            if (found !== version) process.exit(1);
        }' 2>/dev/null)
}
# Installs them when missing (called by the builds, as py_tool).
js_tool() {
    if ! js_deps_ok; then
        local start
        start="$(now)"
        (cd "$js_dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
        echo "installed npm dependencies of examples/js-policy in $(since "$start")" >&2
    fi
}
js_build() {
    js_tool
    # -d http -d fetch-event: no wasi:http imports; the world does not need them.
    (cd "$js_dir" &&
        ./node_modules/.bin/componentize-js --wit "$root/wit" -n admission-plugin \
            -d http -d fetch-event -o "$tmp" app.js >/dev/null)
}
js_hash="$(echo "componentize-js -n admission-plugin -d http -d fetch-event" |
    inputs_hash "$js_dir/app.js" "$js_dir/package-lock.json" "${wit_files[@]}")"
build js-policy "$js_hash" js_build

# labels-policy in JavaScript: componentize-js resolves `./wasm-apiserver-sdk.js`
# from the source's folder, so the policy and the SDK are staged together.
js_sdk="$root/plugins/sdk-js/wasm-apiserver-sdk.js"
labels_js_build() {
    js_tool
    local stage="$out/.labels-policy-js"
    rm -rf "$stage" && mkdir -p "$stage"
    cp "$root/examples/labels-policy/js/app.js" "$js_sdk" "$stage/"
    (cd "$stage" &&
        "$js_dir/node_modules/.bin/componentize-js" --wit "$root/wit" -n admission-plugin \
            -d http -d fetch-event -o "$tmp" app.js >/dev/null)
    rm -rf "$stage"
}
labels_js_hash="$(echo "componentize-js -n admission-plugin -d http -d fetch-event (staged with the sdk)" |
    inputs_hash "$root/examples/labels-policy/js/app.js" "$js_sdk" "$js_dir/package-lock.json" "${wit_files[@]}")"
build labels-policy-js "$labels_js_hash" labels_js_build

# unique-ingress-host in JavaScript: a context-aware admission policy (world
# admission-plugin, its `cluster` import) on the JavaScript SDK, staged with it.
uih_js_build() {
    js_tool
    local stage="$out/.unique-ingress-host-js"
    rm -rf "$stage" && mkdir -p "$stage"
    cp "$root/examples/unique-ingress-host/js/app.js" "$root/examples/unique-ingress-host/js/logic.js" \
        "$js_sdk" "$stage/"
    (cd "$stage" &&
        "$js_dir/node_modules/.bin/componentize-js" --wit "$root/wit" -n admission-plugin \
            -d http -d fetch-event -o "$tmp" app.js >/dev/null)
    rm -rf "$stage"
}
uih_js_hash="$(echo "componentize-js -n admission-plugin -d http -d fetch-event (staged with the sdk)" |
    inputs_hash "$root/examples/unique-ingress-host/js/app.js" "$root/examples/unique-ingress-host/js/logic.js" \
        "$js_sdk" "$js_dir/package-lock.json" "${wit_files[@]}")"
build unique-ingress-host-js "$uih_js_hash" uih_js_build

# namespace-defaults in JavaScript: a controller on the JavaScript controller
# SDK, staged with both SDK modules (the controller SDK uses the admission
# SDK's configuration parsing).
js_ctl_sdk="$root/plugins/sdk-js/wasm-apiserver-controller-sdk.js"
nd_js_build() {
    js_tool
    local stage="$out/.namespace-defaults-js"
    rm -rf "$stage" && mkdir -p "$stage"
    cp "$root/examples/namespace-defaults/js/app.js" "$root/examples/namespace-defaults/js/logic.js" \
        "$js_sdk" "$js_ctl_sdk" "$stage/"
    (cd "$stage" &&
        "$js_dir/node_modules/.bin/componentize-js" --wit "$root/wit" -n controller-plugin \
            -d http -d fetch-event -o "$tmp" app.js >/dev/null)
    rm -rf "$stage"
}
nd_js_hash="$(echo "componentize-js -n controller-plugin -d http -d fetch-event (staged with the sdks)" |
    inputs_hash "$root/examples/namespace-defaults/js/app.js" "$root/examples/namespace-defaults/js/logic.js" \
        "$js_sdk" "$js_ctl_sdk" "$js_dir/package-lock.json" "${wit_files[@]}")"
build namespace-defaults-js "$nd_js_hash" nd_js_build

# node-label-score in JavaScript: a scheduler plugin on the JavaScript
# scheduler SDK, staged with both SDK modules (the scheduler SDK uses the
# admission SDK's configuration parsing).
js_sched_sdk="$root/plugins/sdk-js/wasm-apiserver-scheduler-sdk.js"
nls_js_build() {
    js_tool
    local stage="$out/.node-label-score-js"
    rm -rf "$stage" && mkdir -p "$stage"
    cp "$root/examples/node-label-score/js/app.js" "$js_sdk" "$js_sched_sdk" "$stage/"
    (cd "$stage" &&
        "$js_dir/node_modules/.bin/componentize-js" --wit "$root/wit" -n scheduler-plugin \
            -d http -d fetch-event -o "$tmp" app.js >/dev/null)
    rm -rf "$stage"
}
nls_js_hash="$(echo "componentize-js -n scheduler-plugin -d http -d fetch-event (staged with the sdks)" |
    inputs_hash "$root/examples/node-label-score/js/app.js" "$js_sdk" "$js_sched_sdk" \
        "$js_dir/package-lock.json" "${wit_files[@]}")"
build node-label-score-js "$nls_js_hash" nls_js_build

# --- Rust ---------------------------------------------------------------------
# rust_example NAME CRATE: examples/NAME/rust, a standalone crate (its own
# workspace, lock file and target dir, as a plugin repository has), into
# examples/target/NAME-rust.wasm. From the build cache when its sources, the
# SDK's and the toolchain are unchanged; otherwise cargo decides what is up
# to date.
rust_example() {
    local name="$1" crate="$2" hash start wasm="$out/$1-rust.wasm"
    hash="$(cd "$root" && rust_versions |
        tree_hash "examples/$name/rust" plugins/sdk wit rust-toolchain.toml)"
    if cache_restore "examples/$name-rust" "$hash" "$out"; then
        printf '%10d  %s (from the build cache)\n' "$(stat -c %s "$wasm")" "${wasm#"$root"/}"
        return
    fi
    if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
        rustup target add wasm32-wasip2
    fi
    start="$(now)"
    (cd "$root/examples/$name/rust" &&
        cargo build --target wasm32-wasip2 --release --quiet --locked --target-dir "$out/cargo")
    cp -f "$out/cargo/wasm32-wasip2/release/$crate.wasm" "$out/.$name-rust.wasm.tmp"
    mv -f "$out/.$name-rust.wasm.tmp" "$wasm"
    cache_store "examples/$name-rust" "$hash" "$wasm"
    printf '%10d  %s (cargo, %s)\n' "$(stat -c %s "$wasm")" "${wasm#"$root"/}" "$(since "$start")"
}

# labels-policy in Rust (an admission policy on the SDK).
rust_example labels-policy labels_policy
# node-label-score in Rust (a scheduler plugin on the SDK's scheduler module).
rust_example node-label-score node_label_score
