#!/usr/bin/env bash
# run_clients.sh - real cuFile clients, unchanged, on our libcufile.so.0 and on NVIDIA's, side by
# side, on a GPU machine. Run from a GPU bundle (`cargo xtask gpu-bundle`, which puts this folder
# at cufile/clients/) or from the repository with the paths given:
#
#   cufile/clients/run_clients.sh [OUT_DIR]
#
# Clients: kvikio_client.py (KVIKIO_COMPAT_MODE=OFF), torch_gds_client.py, cufile_bindings_client.py
# and fio_client.py (fio built here from a source tarball by fio_build.sh). Each runs twice, in
# processes of its own: "ours" with LD_PRELOAD=$CUFILE_LIB_DIR/libcufile.so.0 and that folder
# first on LD_LIBRARY_PATH, "nvidia" with nothing preloaded. Every result is a JSON line (see
# common.py); all of them go to OUT_DIR/cufile-clients.jsonl, each client's stderr to
# OUT_DIR/cufile-<client>-<lib>.err, its working folder (cufile.log, if the library writes one) is
# OUT_DIR/cufile-cwd-<client>-<lib>, and a table goes to stdout. A client that crashes or prints
# nothing is a failure on ours and a refusal recorded on NVIDIA's.
#
# Environment (defaults for a bundle): CUFILE_LIB_DIR (<bundle>/lib), CUFILE_WHEELS (KvikIO's
# wheels, <bundle>/cufile/wheels), CUFILE_FIO_TARBALL (<bundle>/cufile/fio.tar.gz), SCRATCH
# (<bundle>/scratch: a real disk, O_DIRECT), PYTHON (python3), CUFILE_CLIENT_TIMEOUT (100 s for
# each client).
# Exit status: 0 when no line says fail (refusals of NVIDIA's library are not failures).

set -u
set -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUNDLE=$(cd "$HERE/../.." && pwd)
OUT_DIR=${1:-${OUT:-$BUNDLE/logs}}
LIB_DIR=${CUFILE_LIB_DIR:-$BUNDLE/lib}
WHEELS=${CUFILE_WHEELS:-$BUNDLE/cufile/wheels}
FIO_TARBALL=${CUFILE_FIO_TARBALL:-$BUNDLE/cufile/fio.tar.gz}
SCRATCH=${SCRATCH:-$BUNDLE/scratch}
PYTHON=${PYTHON:-python3}
TIMEOUT=${CUFILE_CLIENT_TIMEOUT:-100}
BUILD=$SCRATCH/cufile-build
RESULTS=$OUT_DIR/cufile-clients.jsonl

mkdir -p "$OUT_DIR" "$SCRATCH" "$BUILD"
: >"$RESULTS"

# A line of our own, in the clients' format, for what a client could not say itself.
note() {
    local client=$1 lib=$2 check=$3 status=$4 detail=$5
    "$PYTHON" -c 'import json, sys; print(json.dumps({"client": sys.argv[1], "lib": sys.argv[2], "check": sys.argv[3], "status": sys.argv[4], "detail": sys.argv[5]}))' \
        "$client" "$lib" "$check" "$status" "$detail" | tee -a "$RESULTS"
}

if [ ! -f "$LIB_DIR/libcufile.so.0" ]; then
    note harness ours libcufile.so.0 fail "no $LIB_DIR/libcufile.so.0 (build hipfile-cufile in release)"
    exit 1
fi
echo "ours: $LIB_DIR/libcufile.so.0"
echo "nvidia: $(ldconfig -p 2>/dev/null | awk '/libcufile\.so\.0 / { print $NF; exit }')"

# KvikIO travels as wheels; it goes into a private site folder.
KVIKIO_SITE=
if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    KVIKIO_SITE=$BUILD/kvikio-site
    rm -rf "$KVIKIO_SITE"
    if ! "$PYTHON" -m pip install -q --no-index --no-deps --target "$KVIKIO_SITE" "$WHEELS"/*.whl \
        >"$OUT_DIR/cufile-kvikio-install.log" 2>&1; then
        note kvikio ours install fail "pip install of $WHEELS/*.whl failed (cufile-kvikio-install.log)"
        KVIKIO_SITE=
    fi
else
    note kvikio ours install skipped "no KvikIO wheels in $WHEELS"
fi

FIO=$BUILD/fio/fio
NO_TARBALL=()
if [ -f "$FIO_TARBALL" ]; then
    echo "building fio from $FIO_TARBALL ..."
    if ! "$HERE/fio_build.sh" "$FIO_TARBALL" "$BUILD/fio" >"$OUT_DIR/cufile-fio-build.log" 2>&1; then
        tail -n 20 "$OUT_DIR/cufile-fio-build.log"
    fi
else
    NO_TARBALL=(--no-tarball)
fi

# run_client NAME LIB COMMAND...: one process, its JSON lines kept, a crash or silence noted.
run_client() {
    local name=$1 lib=$2
    shift 2
    local err=$OUT_DIR/cufile-$name-$lib.err lines status
    local env=(KVIKIO_COMPAT_MODE=OFF)
    [ -n "$KVIKIO_SITE" ] && env+=("PYTHONPATH=$KVIKIO_SITE${PYTHONPATH:+:$PYTHONPATH}")
    if [ "$lib" = ours ]; then
        env+=("LD_PRELOAD=$LIB_DIR/libcufile.so.0${LD_PRELOAD:+:$LD_PRELOAD}"
            "LD_LIBRARY_PATH=$LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
    fi
    # Each process runs in a folder of its own under OUT_DIR: NVIDIA's library writes its
    # cufile.log into the working directory, the record of why it refused.
    local cwd=$OUT_DIR/cufile-cwd-$name-$lib
    mkdir -p "$cwd"
    lines=$(cd "$cwd" && timeout --kill-after=10 "$TIMEOUT" env "${env[@]}" "$@" 2>"$err")
    status=$?
    [ -n "$lines" ] && printf '%s\n' "$lines" | tee -a "$RESULTS"
    local verdict=fail
    [ "$lib" = nvidia ] && verdict=refused
    case $status in
        0) [ -n "$lines" ] || note "$name" "$lib" exit "$verdict" "exit 0 with no result line" ;;
        1)
            # A client exits 1 after a failing line; without one, it died of an uncaught error.
            grep -q '"status": "fail"' <<<"$lines" ||
                note "$name" "$lib" exit "$verdict" "exit 1 with no failing line: $(tail -c 600 "$err")"
            ;;
        124 | 137) note "$name" "$lib" exit "$verdict" "timed out after ${TIMEOUT}s: $(tail -c 600 "$err")" ;;
        *) note "$name" "$lib" exit "$verdict" "exit $status (crash): $(tail -c 600 "$err")" ;;
    esac
}

for lib in ours nvidia; do
    echo
    echo "==== cuFile clients on $lib ===="
    if [ -n "$KVIKIO_SITE" ]; then
        run_client kvikio "$lib" "$PYTHON" "$HERE/kvikio_client.py" --lib "$lib" --dir "$SCRATCH"
    fi
    run_client torch "$lib" "$PYTHON" "$HERE/torch_gds_client.py" --lib "$lib" --dir "$SCRATCH"
    run_client bindings "$lib" "$PYTHON" "$HERE/cufile_bindings_client.py" --lib "$lib" --dir "$SCRATCH"
    run_client fio "$lib" "$PYTHON" "$HERE/fio_client.py" --lib "$lib" --dir "$SCRATCH" --fio "$FIO" \
        ${NO_TARBALL[@]+"${NO_TARBALL[@]}"}
done

echo
"$PYTHON" - "$RESULTS" <<'EOF'
import collections, json, sys
rows = collections.OrderedDict()
for line in open(sys.argv[1]):
    r = json.loads(line)
    key = (r["client"], r["lib"])
    rows.setdefault(key, collections.Counter())[r["status"]] += 1
print(f"{'client':<22} {'lib':<7} {'pass':>5} {'fail':>5} {'refused':>8} {'skipped':>8}")
for (client, lib), c in rows.items():
    print(f"{client:<22} {lib:<7} {c['pass']:>5} {c['fail']:>5} {c['refused']:>8} {c['skipped']:>8}")
EOF
fails=$(grep -c '"status": "fail"' "$RESULTS")
echo "cuFile clients: $(grep -c '"status": "pass"' "$RESULTS") pass, $fails fail, $(grep -c '"status": "refused"' "$RESULTS") refused (NVIDIA's), $(grep -c '"status": "skipped"' "$RESULTS") skipped"
rm -rf "$BUILD"
[ "$fails" -eq 0 ]
