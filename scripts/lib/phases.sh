# Sourced by scripts/test: runs the steps of a run as named phases and
# prints, when the run ends (also when it fails), the seconds each one took
# and the total, so that every run shows where its time went.
#
#   phase NAME COMMAND...   runs COMMAND as the phase NAME
#   phase_note TEXT         a line printed under the table (what a phase skipped)

_phase_t0="$(date +%s.%N)"
_phase_names=()
_phase_secs=()
_phase_notes=()
_phase_current=""
_phase_started=""

_phase_since() {
    awk -v s="$1" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }'
}

phase() {
    local name="$1"
    shift
    _phase_current="$name"
    _phase_started="$(date +%s.%N)"
    echo "=== phase: $name"
    "$@"
    _phase_names+=("$name")
    _phase_secs+=("$(_phase_since "$_phase_started")")
    _phase_current=""
}

phase_note() {
    _phase_notes+=("$*")
}

_phase_report() {
    local status=$?
    {
        echo
        echo "=== timings (seconds)"
        local i
        for i in "${!_phase_names[@]}"; do
            printf '%8s  %s\n' "${_phase_secs[$i]}" "${_phase_names[$i]}"
        done
        if [[ -n "$_phase_current" ]]; then
            printf '%8s  %s (FAILED)\n' "$(_phase_since "$_phase_started")" "$_phase_current"
        fi
        printf '%8s  total\n' "$(_phase_since "$_phase_t0")"
        for i in "${!_phase_notes[@]}"; do
            echo "  ${_phase_notes[$i]}"
        done
    } >&2
    return "$status"
}
trap _phase_report EXIT
