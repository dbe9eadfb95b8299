# What the callgrind harnesses (`scripts/callgrind-*.sh`) share, sourced by them: the wrapper
# that runs rank 0 under callgrind inside gaspirun, and the count per call of a profile.

# Builds example `$1` of gaspi-coll and gaspirun in profile $CG_PROFILE (default ci; `release`,
# fat LTO, is what the bench runs, and the ci profile overstates call overhead), sets `bin` to
# the directory of that profile's binaries, and makes the directory of the profiles, $CG_DIR
# (default target/callgrind), into `dir`.
cg_prepare() {
    local profile=${CG_PROFILE:-ci}
    dir=${CG_DIR:-target/callgrind}
    mkdir -p "$dir"
    cargo build --profile "$profile" -p gaspi-coll --example "$1" -p gaspi-launcher \
        --bin gaspirun >&2
    case $profile in
        dev) bin=target/debug ;;
        *) bin=target/$profile ;;
    esac
}

# Writes the wrapper script `$1`: rank 0 runs under callgrind into "$CG_OUT", collecting only
# inside the functions named by the rest of the arguments (each a --toggle-collect pattern),
# which toggle, so a waiting loop named inside a collected call is left out; the other ranks
# run natively.
cg_rank0_wrapper() {
    local wrapper=$1 toggles="" pattern
    shift
    for pattern in "$@"; do
        toggles="$toggles --toggle-collect='$pattern'"
    done
    cat >"$wrapper" <<SH
#!/bin/sh
if [ "\$PMI_RANK" = "0" ]; then
    exec valgrind --tool=callgrind --callgrind-out-file="\$CG_OUT"$toggles "\$@"
fi
exec "\$@"
SH
    chmod +x "$wrapper"
}

# The instructions collected inside the counted calls (the patterns given to cg_setup) of
# callgrind profile `$1`, divided by `$2`, the calls it collected. Not the profile's total: a
# toggle that leaves out the waiting loop inside a counted call turns collection on in a
# waiting loop entered outside one (a warm-up's or a barrier's wait), which the total would
# count.
cg_per_call() {
    local total=0 cost name pattern
    while read -r cost name; do
        for pattern in "${cg_counted[@]}"; do
            # shellcheck disable=SC2053 # the pattern is a glob, as callgrind takes it
            if [[ $name == $pattern ]]; then
                total=$((total + cost))
                break
            fi
        done
    done < <(callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
        sed -nE 's/^ *([0-9,]+) \( *[0-9.]+%\) +[^ :]*:([^ ]+) \[.*$/\1 \2/p' | tr -d ,)
    echo $((total / $2))
}

# cg_prepare `$1`, then writes the wrapper "$dir/$1-rank0.sh" (its path into `wrapper`) that
# collects inside the functions named by the rest of the arguments and leaves out the waiting
# loop (`gaspi_notifications::wait::wait_until` and what it calls), whose instructions grow with
# the time waited. The counted patterns stay in `cg_counted` for cg_per_call.
cg_setup() {
    local example=$1
    shift
    cg_prepare "$example"
    cg_counted=("$@")
    wrapper="$dir/$example-rank0.sh"
    cg_rank0_wrapper "$wrapper" "$@" 'gaspi_notifications::wait::wait_until*'
}
