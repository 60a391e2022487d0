#!/usr/bin/env bash
# run.sh - test hipfile-rs on an NVIDIA GPU machine, from a bundle made by `cargo xtask gpu-bundle`.
#
# The machine needs the CUDA runtime and driver, a C/C++ compiler and CUDA headers; it needs no
# cargo and no network. Run from anywhere:  ./run.sh [--no-bench] [--no-c] [--no-tests]
# or, for the cuFile door (libcufile.so.0) alone:  ./run.sh --cufile | --cufile-figures
# or, for remote reads over HTTP alone:  ./run.sh --remote-figures
#
#   1. every test binary in tests/ (HIPFILE_PLATFORM=nvidia, HIPFILE_GPU_TESTS=1); extra libtest
#      arguments come from $HIPFILE_TEST_ARGS (e.g. "--test-threads=1")
#   2. every C program in c/, compiled as C11 and as C++17 against include/ (hipfile.h, tap.h) and
#      the CUDA runtime, with harness/line_buffered.c linked in (stdout line-buffered, so a killed
#      program's log keeps every line), run with a scratch directory; it prints `ok - ...` /
#      `not ok - ...` lines (a `*_cases.c` program runs once per case, each in its own process)
#   3. py/frameworks.py: the C ABI from Python on CuPy and PyTorch memory (with the C programs)
#   4. bin/hipfile bench --size 1G (one check; --no-bench skips it)
#   5. python/: the hipfile wheel installed with `pip install --no-index --no-deps --target`, its
#      pytest suite (python/tests) with PYTHONPATH pointing there, on the GPU (pytest's passes
#      count on the GPU, its skips as skipped), then python/bench/bench.py --size 8G (one check:
#      it ran and every line says verified; --no-bench skips it)
#   --cufile: only cufile/clients/run_clients.sh: KvikIO, torch.cuda.gds, cuda.bindings.cufile and
#      fio's libcufile engine, unchanged, on lib/libcufile.so.0 (preloaded) and on NVIDIA's; each
#      JSON line of theirs counts: pass on the GPU, fail failed, NVIDIA's refusals as skipped
#   --cufile-figures: only cufile/clients/figures.py: the cuFile door's figures on an 8 GiB file
#      (KvikIO over ours / KvikIO POSIX, torch.cuda.gds / torch.load, cuFile door / hipFile door)
#   --remote-figures: only remote/figures.py: a 4 GiB object served over loopback by the carried
#      nginx (remote/nginx), read by `bin/hipfile bench --remote`, by KvikIO's RemoteFile at its
#      best thread count, and by curl into /dev/null (the server's ceiling)
#
# Scratch files live in ./scratch (TMPDIR points there: /tmp may be a tmpfs without O_DIRECT).
# Logs go to $OUT when it is set (the device tool brings $OUT back), else ./logs:
# run.log (this output), summary.txt (one line per check group) and logs.tar.gz (every full log).
# The last line is `G passed on the GPU, M on the sim, S skipped, F failed`. Test-binary tests are
# told apart by the test ledger (HIPFILE_TEST_LEDGER, see hipfile_testkit::ledger): a test handed
# the real GPU counts on the GPU, one that recorded a skip as skipped, any other one (it built
# its own simulated GPU, or needs no GPU) on the sim. C checks, the Python checks and the bench
# run on the GPU. A precondition this bundle promises (CUDA headers, libcudart, CuPy, PyTorch)
# that is missing is a failure.
# Exit status: 0 when nothing failed.
#
# CUDA headers: $CUDA_INCLUDE, $CUDA_HOME/include, $CUDA_PATH/include, /usr/local/cuda/include,
# nvcc's dir/../include, /usr/local/cuda-*/include, /usr/include. libcudart: next to those headers
# (lib64, lib, targets/*/lib), else wherever the dynamic loader finds libcudart.so[.N].

set -u
set -o pipefail

BUNDLE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$BUNDLE" || exit 1

RUN_BENCH=1
RUN_C=1
RUN_TESTS=1
RUN_CUFILE=0
RUN_CUFILE_FIGURES=0
RUN_REMOTE_FIGURES=0
for arg in "$@"; do
    case $arg in
        --no-bench) RUN_BENCH=0 ;;
        --no-c) RUN_C=0 ;;
        --no-tests) RUN_TESTS=0 ;;
        --cufile) RUN_CUFILE=1 ;;
        --cufile-figures) RUN_CUFILE_FIGURES=1 ;;
        --remote-figures) RUN_REMOTE_FIGURES=1 ;;
        -h | --help)
            sed -n '2,43p' "$0"
            exit 0
            ;;
        *)
            echo "run.sh: unknown argument $arg (try --help)" >&2
            exit 2
            ;;
    esac
done

LOG_DIR=${OUT:-$BUNDLE/logs}
FULL_LOGS=$BUNDLE/logs-full # one file per step; packed into logs.tar.gz at the end
SCRATCH=$BUNDLE/scratch
BUILD=$BUNDLE/build
TEST_TIMEOUT=${HIPFILE_TEST_TIMEOUT:-900}
C_TIMEOUT=${HIPFILE_C_TIMEOUT:-300}
# The device tool returns files under 16 MiB only.
MAX_LOG_BYTES=$((15 * 1024 * 1024))

PASSED=0 # on the GPU
SIM_PASSED=0
SKIPPED=0
FAILED=0
FAILURES=()

note_pass() { PASSED=$((PASSED + 1)); }

note_fail() {
    FAILED=$((FAILED + 1))
    FAILURES+=("$1")
    echo "FAIL: $1"
}

summary() { echo "$*" >>"$LOG_DIR/summary.txt"; }

# timeout(1) when the machine has it, so one hung program cannot eat the whole lease.
with_timeout() {
    local limit=$1
    shift
    if command -v timeout >/dev/null 2>&1; then
        timeout --kill-after=10 "$limit" "$@"
    else
        "$@"
    fi
}

find_cuda_include() {
    local candidates=()
    [ -n "${CUDA_INCLUDE:-}" ] && candidates+=("$CUDA_INCLUDE")
    [ -n "${CUDA_HOME:-}" ] && candidates+=("$CUDA_HOME/include")
    [ -n "${CUDA_PATH:-}" ] && candidates+=("$CUDA_PATH/include")
    candidates+=(/usr/local/cuda/include)
    local nvcc
    if nvcc=$(command -v nvcc 2>/dev/null); then
        candidates+=("$(dirname "$(readlink -f "$nvcc")")/../include")
    fi
    candidates+=(/usr/local/cuda-*/include /usr/local/cuda/targets/*/include /usr/include)
    local dir
    for dir in "${candidates[@]}"; do
        if [ -f "$dir/cuda_runtime_api.h" ]; then
            (cd "$dir" && pwd)
            return 0
        fi
    done
    return 1
}

# The libcudart to link: next to the headers, else what the loader knows.
find_cudart() {
    local include=$1 dir lib
    for dir in "$include/../lib64" "$include/../lib" "$include"/../targets/*/lib \
        "$include/../lib/x86_64-linux-gnu"; do
        for lib in "$dir/libcudart.so" "$dir"/libcudart.so.[0-9]*; do
            if [ -f "$lib" ]; then
                readlink -f "$lib"
                return 0
            fi
        done
    done
    lib=$(ldconfig -p 2>/dev/null | awk '/libcudart\.so/ { print $NF; exit }')
    if [ -n "$lib" ] && [ -f "$lib" ]; then
        readlink -f "$lib"
        return 0
    fi
    return 1
}

# Prints "GPU SIM SKIPPED" for the `test NAME ... ok` lines of a libtest log, by the ledger.
classify_passes() {
    local ledger=$1 log=$2
    [ -f "$ledger" ] || : >"$ledger"
    awk -F'\t' -v ledger="$ledger" '
        FILENAME == ledger { if ($1 == "skip") skip[$2] = 1; else if ($1 == "gpu") gpu[$2] = 1; next }
        /^test .* \.\.\. ok$/ {
            name = substr($0, 6, length($0) - 12)
            if (name in skip) s++; else if (name in gpu) g++; else m++
        }
        END { print g + 0, m + 0, s + 0 }
    ' "$ledger" "$log"
}

# Runs one libtest binary; counts its tests one by one, by where they ran (the ledger).
run_test_binary() {
    local binary=$1 name log status passed failed ledger gpu sim skipped
    name=$(basename "$binary")
    log=$FULL_LOGS/test-$name.log
    ledger=$FULL_LOGS/ledger-$name.tsv
    rm -f "$ledger"
    echo
    echo "==== test binary $name ===="
    # HIPFILE_TEST_ARGS is split on spaces on purpose: it holds libtest arguments.
    # shellcheck disable=SC2086
    (cd "$SCRATCH" && HIPFILE_TEST_LEDGER=$ledger with_timeout "$TEST_TIMEOUT" "$binary" ${HIPFILE_TEST_ARGS:-}) >"$log" 2>&1
    status=$?
    local result
    result=$(grep -E '^test result: ' "$log" | tail -n 1)
    read -r gpu sim skipped <<<"$(classify_passes "$ledger" "$log")"
    passed=$((gpu + sim + skipped))
    failed=$(grep -cE '^test .* \.\.\. FAILED$' "$log")
    if [ -z "$result" ]; then
        # No summary: it crashed or hung. What finished is counted; the crash is one failure.
        echo "no libtest summary line"
    fi
    PASSED=$((PASSED + gpu))
    SIM_PASSED=$((SIM_PASSED + sim))
    SKIPPED=$((SKIPPED + skipped))
    FAILED=$((FAILED + failed))
    grep -E '^test .* \.\.\. FAILED$|^test .* \.\.\. ignored' "$log"
    awk -F'\t' '$1 == "skip" { print "skipped: " $2 ": " $3 }' "$ledger"
    echo "${result:-no libtest summary line} (exit $status)"
    echo "$name: $gpu passed on the GPU, $sim on the sim, $skipped skipped, $failed failed"
    if [ "$failed" -gt 0 ]; then
        FAILURES+=("$name: $failed test(s) failed")
        echo "--- last 150 lines of $name ---"
        tail -n 150 "$log"
    fi
    if [ "$status" -ne 0 ] && { [ "$failed" -eq 0 ] || [ -z "$result" ]; }; then
        case $status in
            124 | 137) note_fail "$name: timed out after ${TEST_TIMEOUT}s (exit $status)" ;;
            *) note_fail "$name: exit $status with ${failed} failing test(s) reported" ;;
        esac
        tail -n 60 "$log"
    fi
    summary "tests/$name: $gpu passed on the GPU, $sim on the sim, $skipped skipped, $failed failed, exit $status"
}

# Compiles one C program as C (lang c) or C++ (lang cxx); prints the binary's path.
compile_c() {
    local source=$1 lang=$2 binary=$3 log=$4
    local compiler=(cc -std=c11)
    [ "$lang" = cxx ] && compiler=(c++ -std=c++17 -x c++)
    local extra=()
    # The C ABI tests and the examples speak HIP; on CUDA they go through the name map. It is
    # included before the program's own lines, so the program's _GNU_SOURCE (for O_DIRECT) comes
    # too late for the system headers: define it on the command line instead.
    case $source in
        c/hip/* | c/examples/*) extra=(-D_GNU_SOURCE -include "$BUNDLE/include/hip_on_cuda.h") ;;
    esac
    # -isystem: warnings inside CUDA's own headers are not ours to fail on; ours still are.
    # shellcheck disable=SC2054 # the commas belong to -Wl,-rpath
    # `-x none` after the sources: a versioned libcudart path must not be read as C++ source.
    # harness/line_buffered.c makes stdout line-buffered: a program killed by its time limit
    # leaves every line it printed in its log, not the last full 4 KiB block.
    local cmd=("${compiler[@]}" -Wall -Wextra -Werror -DHIPFILE_NO_HIP_HEADERS
        ${extra[@]+"${extra[@]}"} -I "$BUNDLE/include" -isystem "$CUDA_INC"
        "$source" "$BUNDLE/harness/line_buffered.c" -x none
        -o "$binary"
        -L "$BUNDLE/lib" -lhipfile "${CUDART_LINK[@]}" -lpthread
        -Wl,-rpath,"$BUNDLE/lib" -Wl,-rpath,"$CUDART_DIR")
    echo "\$ ${cmd[*]}" >"$log"
    "${cmd[@]}" >>"$log" 2>&1
}

# Runs every case of a `*_cases` program (`prog --list`) in its own process: `prog SCRATCH CASE`
# prints one `ok - CASE` / `not ok - CASE: why` line and the plan `1..1`, and exits 0 / 1; anything
# else (a signal, another exit, a timeout, no result line or plan, "panicked" on stderr) is a
# crash. Counts all three.
run_c_cases() {
    local binary=$1 name=$2 log=$3 one status out verdict ok=0 not_ok=0 crashed=0
    local case_log=$FULL_LOGS/cases-$name
    mkdir -p "$case_log"
    : >"$log"
    local cases
    if ! cases=$("$binary" --list 2>>"$log"); then
        note_fail "$name: --list failed"
        summary "c/$name: --list failed"
        return
    fi
    for one in $cases; do
        local slug=${one//[^A-Za-z0-9-]/_}
        local scratch=$SCRATCH/c-$name/$slug
        rm -rf "$scratch"
        mkdir -p "$scratch"
        with_timeout 120 "$binary" "$scratch" "$one" >"$case_log/$slug.out" 2>"$case_log/$slug.err"
        status=$?
        out=$(cat "$case_log/$slug.out")
        if grep -q panicked "$case_log/$slug.err"; then
            verdict="CRASH $one: panicked"
        elif ! grep -qx '1\.\.1' <<<"$out"; then
            verdict="CRASH $one: exit $status, no plan 1..1"
        elif [ "$status" -eq 0 ] && grep -qxF "ok - $one" <<<"$out"; then
            verdict=ok
        elif [ "$status" -eq 1 ] && grep -qF "not ok - $one" <<<"$out"; then
            verdict=not_ok
        else
            verdict="CRASH $one: exit $status"
        fi
        case $verdict in
            ok) ok=$((ok + 1)) ;;
            not_ok)
                not_ok=$((not_ok + 1))
                grep "^not ok" <<<"$out" | tee -a "$log" | sed "s|^|  $name: |"
                ;;
            *)
                crashed=$((crashed + 1))
                echo "$verdict" | tee -a "$log" | sed "s|^|  $name: |"
                tail -n 20 "$case_log/$slug.err" | tee -a "$log"
                ;;
        esac
        rm -rf "$scratch"
    done
    PASSED=$((PASSED + ok))
    FAILED=$((FAILED + not_ok + crashed))
    if [ $((not_ok + crashed)) -gt 0 ]; then
        FAILURES+=("$name: $not_ok case(s) not ok, $crashed crashed")
    fi
    echo "$name: $ok ok, $not_ok not ok, $crashed crashed (one process per case)"
    summary "c/$name: $ok ok, $not_ok not ok, $crashed crashed"
}

# Runs one compiled C program; counts its ok / not ok lines (and a panic on its stderr).
run_c_program() {
    local binary=$1 name=$2 log=$3 status ok not_ok scratch
    scratch=$SCRATCH/c-$name
    rm -rf "$scratch"
    mkdir -p "$scratch"
    with_timeout "$C_TIMEOUT" "$binary" "$scratch" >"$log" 2>&1
    status=$?
    ok=$(grep -cE '^ok( |$)' "$log")
    not_ok=$(grep -cE '^not ok' "$log")
    PASSED=$((PASSED + ok))
    FAILED=$((FAILED + not_ok))
    grep -E '^not ok' "$log" | sed "s|^|  $name: |"
    if [ "$not_ok" -gt 0 ]; then
        FAILURES+=("$name: $not_ok check(s) not ok")
    fi
    # The plan `1..N` (printed last) must match the results: a program that stopped early, or
    # printed a lone `ok`, fails here.
    local plan
    plan=$(sed -n 's/^1\.\.\([0-9][0-9]*\)$/\1/p' "$log" | tail -n 1)
    if [ "$status" -ne 0 ] && [ "$not_ok" -eq 0 ]; then
        note_fail "$name: exit $status with no not-ok line"
        tail -n 40 "$log"
    elif [ "$ok" -eq 0 ] && [ "$not_ok" -eq 0 ]; then
        note_fail "$name: printed no ok / not ok line"
        tail -n 40 "$log"
    elif [ -z "$plan" ]; then
        note_fail "$name: printed no plan (1..N): it stopped before its end"
    elif [ "$plan" -ne $((ok + not_ok)) ]; then
        note_fail "$name: plan 1..$plan, but $((ok + not_ok)) results"
    fi
    # A panic the library caught on one of its own threads still prints its message: a bug even
    # when every check passed.
    if grep -q panicked "$log"; then
        note_fail "$name: printed a panic"
        grep -A 3 panicked "$log" | head -n 20
    fi
    echo "$name: $ok ok, $not_ok not ok (exit $status)"
    summary "c/$name: $ok ok, $not_ok not ok, exit $status"
    rm -rf "$scratch"
}

run_c_programs() {
    echo
    echo "==== C programs ===="
    if ! CUDA_INC=$(find_cuda_include); then
        note_fail "C programs: no cuda_runtime_api.h found (set CUDA_INCLUDE or CUDA_HOME)"
        summary "c: no CUDA headers"
        return
    fi
    local cudart
    if ! cudart=$(find_cudart "$CUDA_INC"); then
        note_fail "C programs: no libcudart found (set CUDA_HOME)"
        summary "c: no libcudart"
        return
    fi
    CUDART_DIR=$(dirname "$cudart")
    if [ -f "$CUDART_DIR/libcudart.so" ]; then
        CUDART_LINK=(-L "$CUDART_DIR" -lcudart)
    else
        CUDART_LINK=("$cudart") # only a versioned runtime: link the file itself
    fi
    echo "CUDA headers: $CUDA_INC"
    echo "CUDA runtime: $cudart"
    echo "compilers: $(cc --version 2>&1 | head -n 1) / $(c++ --version 2>&1 | head -n 1)"
    mkdir -p "$BUILD"
    local source lang name binary
    for source in c/*/*.c; do
        [ -f "$source" ] || continue
        for lang in c cxx; do
            name=$(basename "$(dirname "$source")")-$(basename "$source" .c)-$lang
            binary=$BUILD/$name
            if ! compile_c "$source" "$lang" "$binary" "$FULL_LOGS/compile-$name.log"; then
                note_fail "$name: compile failed"
                tail -n 40 "$FULL_LOGS/compile-$name.log"
                summary "c/$name: compile failed"
                continue
            fi
            case $source in
                *_cases.c) run_c_cases "$binary" "$name" "$FULL_LOGS/c-$name.log" ;;
                *) run_c_program "$binary" "$name" "$FULL_LOGS/c-$name.log" ;;
            esac
        done
    done
}

# The C ABI from Python on CuPy and PyTorch device memory (allocations of another library on the
# primary context), when python3 has both.
run_frameworks() {
    echo
    echo "==== py/frameworks.py (CuPy, PyTorch) ===="
    if ! python3 -c 'import cupy, torch' >/dev/null 2>&1; then
        # The GPU machine this bundle is for has both: their absence is a failure, not a skip.
        note_fail "py/frameworks: python3 here cannot import cupy and torch"
        summary "py/frameworks: no cupy/torch"
        return
    fi
    local log=$FULL_LOGS/py-frameworks.log
    with_timeout "$C_TIMEOUT" python3 py/frameworks.py "$BUNDLE/lib/libhipfile.so" "$SCRATCH/frameworks.dat" >"$log" 2>&1
    local status=$? ok bad
    cat "$log"
    rm -f "$SCRATCH/frameworks.dat"
    ok=$(grep -c '^ok - ' "$log")
    bad=$(grep -c '^not ok - ' "$log")
    PASSED=$((PASSED + ok))
    FAILED=$((FAILED + bad))
    if [ "$bad" -gt 0 ]; then
        FAILURES+=("py/frameworks: $bad check(s) not ok")
    elif [ "$status" -ne 0 ] || [ "$ok" -eq 0 ]; then
        note_fail "py/frameworks: exit $status, $ok ok"
    fi
    summary "py/frameworks: $ok ok, $bad not ok, exit $status"
}

run_bench() {
    echo
    echo "==== bin/hipfile bench --size 1G ===="
    local log=$FULL_LOGS/bench.log
    with_timeout 600 bin/hipfile bench --size 1G --platform nvidia --file "$SCRATCH/bench.bin" \
        >"$log" 2>&1
    local status=$?
    cat "$log"
    rm -f "$SCRATCH/bench.bin"
    if [ "$status" -eq 0 ]; then
        note_pass
        summary "bench: ok"
    else
        note_fail "bench: exit $status"
        summary "bench: exit $status"
    fi
}

# The Python package: the wheel into a private site folder, pytest on the GPU, then the benchmark.
run_python() {
    echo
    echo "==== python/ (the hipfile wheel and its pytest suite) ===="
    local site=$BUILD/python-site log=$FULL_LOGS/python-pytest.log status last passed skipped failed
    rm -rf "$site"
    mkdir -p "$site"
    if ! python3 -m pip install -q --no-index --no-deps --target "$site" python/*.whl \
        >"$FULL_LOGS/python-install.log" 2>&1; then
        cat "$FULL_LOGS/python-install.log"
        note_fail "python: the wheel did not install"
        summary "python: the wheel did not install"
        return
    fi
    (cd python && export PYTHONPATH="$site" &&
        with_timeout "$TEST_TIMEOUT" python3 -m pytest -q -rs -p no:cacheprovider tests) >"$log" 2>&1
    status=$?
    tail -n 60 "$log"
    last=$(grep -E '[0-9]+ (passed|failed|skipped|error)' "$log" | tail -n 1)
    passed=$(echo "$last" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+')
    skipped=$(echo "$last" | grep -oE '[0-9]+ skipped' | grep -oE '[0-9]+')
    failed=$(($(echo "$last" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+' || echo 0) + \
        $(echo "$last" | grep -oE '[0-9]+ errors?' | grep -oE '[0-9]+' || echo 0)))
    PASSED=$((PASSED + ${passed:-0}))
    SKIPPED=$((SKIPPED + ${skipped:-0}))
    FAILED=$((FAILED + failed))
    if [ "$failed" -gt 0 ]; then
        FAILURES+=("python/tests: $failed test(s) failed")
    elif [ "$status" -ne 0 ] || [ "${passed:-0}" -eq 0 ]; then
        note_fail "python/tests: exit $status, ${passed:-0} passed"
    fi
    summary "python/tests: ${passed:-0} passed on the GPU, ${skipped:-0} skipped, $failed failed, exit $status"

    [ "$RUN_BENCH" = 1 ] || return 0
    echo
    echo "==== python/bench/bench.py --size 8G ===="
    log=$FULL_LOGS/python-bench.log
    (export PYTHONPATH="$site" &&
        with_timeout 900 python3 python/bench/bench.py "$SCRATCH/pybench.bin" --size 8G) >"$log" 2>&1
    status=$?
    cat "$log"
    rm -f "$SCRATCH/pybench.bin"
    if [ "$status" -eq 0 ] && grep -q '"verified": true' "$log" && ! grep -q '"verified": false' "$log"; then
        note_pass
        summary "python/bench: ok"
    else
        note_fail "python/bench: exit $status or unverified reads"
        summary "python/bench: exit $status"
    fi
}

# Counts the JSON lines of the cuFile clients: pass on the GPU, fail failed, refused (NVIDIA's
# library saying no) and skipped as skipped.
count_cufile_lines() {
    local results=$1 pass fail other
    pass=$(grep -c '"status": "pass"' "$results")
    fail=$(grep -c '"status": "fail"' "$results")
    other=$(grep -cE '"status": "(refused|skipped)"' "$results")
    PASSED=$((PASSED + pass))
    FAILED=$((FAILED + fail))
    SKIPPED=$((SKIPPED + other))
    if [ "$fail" -gt 0 ]; then
        FAILURES+=("cufile: $fail client check(s) failed")
        grep '"status": "fail"' "$results" | head -n 20
    fi
    echo "cufile: $pass pass, $fail fail, $other refused or skipped"
}

# The cuFile door: real clients on lib/libcufile.so.0 and on NVIDIA's (see run_clients.sh).
run_cufile() {
    echo
    echo "==== cuFile door: clients on ours and on NVIDIA's ===="
    local log=$FULL_LOGS/cufile-clients.log results=$LOG_DIR/cufile-clients.jsonl status
    rm -f "$results"
    with_timeout 560 "$BUNDLE/cufile/clients/run_clients.sh" "$LOG_DIR" >"$log" 2>&1
    status=$?
    cat "$log"
    if [ ! -s "$results" ]; then
        note_fail "cufile: run_clients.sh exit $status with no result line"
        summary "cufile: no results, exit $status"
        return
    fi
    count_cufile_lines "$results"
    if [ "$status" -ne 0 ] && ! grep -q '"status": "fail"' "$results"; then
        note_fail "cufile: run_clients.sh exit $status"
    fi
    summary "cufile: exit $status ($results)"
}

# The cuFile door's figures (see figures.py); its own check: it ran and every byte it timed
# was verified.
run_cufile_figures() {
    echo
    echo "==== cuFile door: figures ===="
    local log=$FULL_LOGS/cufile-figures.log status
    (cd "$BUNDLE/cufile/clients" && with_timeout 570 python3 "$BUNDLE/cufile/clients/figures.py" \
        --bundle "$BUNDLE" --dir "$SCRATCH" --out "$LOG_DIR") >"$log" 2>&1
    status=$?
    cat "$log"
    if [ "$status" -eq 0 ]; then
        note_pass
    else
        note_fail "cufile figures: exit $status"
    fi
    summary "cufile figures: exit $status ($LOG_DIR/cufile-figures.jsonl)"
}

# Remote reads over HTTP (see remote/figures.py); its own check: it ran and every byte it timed
# was verified.
run_remote_figures() {
    echo
    echo "==== remote reads: figures ===="
    local log=$FULL_LOGS/remote-figures.log status
    with_timeout 570 python3 "$BUNDLE/remote/figures.py" --bundle "$BUNDLE" --dir "$SCRATCH" \
        --out "$LOG_DIR" >"$log" 2>&1
    status=$?
    cat "$log"
    if [ "$status" -eq 0 ]; then
        note_pass
    else
        note_fail "remote figures: exit $status"
    fi
    summary "remote figures: exit $status ($LOG_DIR/remote-figures.jsonl)"
}

# Test binaries know hipfile.h by the build machine's path (env!("CARGO_MANIFEST_DIR")); where
# that path is missing here, point it at the bundle's copy.
link_build_include() {
    local root
    root=$(sed -n 's/^source root: //p' MANIFEST.txt 2>/dev/null)
    [ -n "$root" ] || return 0
    [ -e "$root/hipfile/include" ] && return 0
    if mkdir -p "$root/hipfile" 2>/dev/null && ln -s "$BUNDLE/include" "$root/hipfile/include"; then
        echo "note: linked $root/hipfile/include -> $BUNDLE/include (the tests' header path)"
    fi
}

# Everything but the pack-up; its output is tee'd into run.log.
main() {
    echo "hipfile-rs GPU bundle: $BUNDLE"
    sed -n 2p MANIFEST.txt 2>/dev/null
    echo "host: $(uname -srm); $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
    fi
    echo "scratch: $SCRATCH ($(df -hT "$SCRATCH" 2>/dev/null | awk 'NR == 2 { print $2 ", " $5 " free" }'))"

    if [ "$RUN_CUFILE" = 1 ] || [ "$RUN_CUFILE_FIGURES" = 1 ] || [ "$RUN_REMOTE_FIGURES" = 1 ]; then
        # The cuFile and remote stages alone: each takes most of one device call.
        [ "$RUN_CUFILE" = 1 ] && run_cufile
        [ "$RUN_CUFILE_FIGURES" = 1 ] && run_cufile_figures
        [ "$RUN_REMOTE_FIGURES" = 1 ] && run_remote_figures
    else
        run_stages
    fi
    echo
    if [ "${#FAILURES[@]}" -gt 0 ]; then
        echo "failures:"
        printf '  %s\n' "${FAILURES[@]}"
    fi
    summary "$PASSED passed on the GPU, $SIM_PASSED on the sim, $SKIPPED skipped, $FAILED failed"
    echo "$PASSED passed on the GPU, $SIM_PASSED on the sim, $SKIPPED skipped, $FAILED failed"
    [ "$FAILED" -eq 0 ]
}

# The stages of a plain run, in order.
run_stages() {
    if [ "$RUN_TESTS" = 1 ]; then
        link_build_include
        local binary
        # The test binaries travel packed (the device tool carries 64 MiB at most).
        if [ -f "$BUNDLE/tests.tar.gz" ] && [ ! -d "$BUNDLE/tests" ]; then
            tar -C "$BUNDLE" -xzf "$BUNDLE/tests.tar.gz" || note_fail "unpacking tests.tar.gz"
        fi
        for binary in "$BUNDLE"/tests/*; do
            [ -x "$binary" ] && run_test_binary "$binary"
        done
    fi
    [ "$RUN_C" = 1 ] && run_c_programs
    [ "$RUN_C" = 1 ] && run_frameworks
    [ "$RUN_BENCH" = 1 ] && run_bench
    run_python
}

# Keeps a log under the size the device tool returns.
cap_log() {
    local file=$1 size
    [ -f "$file" ] || return 0
    size=$(wc -c <"$file")
    if [ "$size" -gt "$MAX_LOG_BYTES" ]; then
        tail -c "$MAX_LOG_BYTES" "$file" >"$file.tail" && mv "$file.tail" "$file"
    fi
}

export HIPFILE_PLATFORM=nvidia
export HIPFILE_GPU_TESTS=1
export RUST_BACKTRACE=1
export TMPDIR=$SCRATCH
rm -rf "$SCRATCH" "$FULL_LOGS" "$BUILD"
mkdir -p "$LOG_DIR" "$SCRATCH" "$FULL_LOGS"
rm -f "$LOG_DIR/run.log" "$LOG_DIR/summary.txt" "$LOG_DIR/logs.tar.gz"

main 2>&1 | tee "$LOG_DIR/run.log"
status=${PIPESTATUS[0]}

if command -v tar >/dev/null 2>&1; then
    tar -czf "$LOG_DIR/logs.tar.gz" -C "$BUNDLE" logs-full 2>/dev/null
    size=$(wc -c <"$LOG_DIR/logs.tar.gz")
    # Too big to come back: keep run.log, which holds every failure's tail.
    [ "$size" -gt "$MAX_LOG_BYTES" ] && rm -f "$LOG_DIR/logs.tar.gz"
fi
cap_log "$LOG_DIR/run.log"
rm -rf "$SCRATCH"
exit "$status"
