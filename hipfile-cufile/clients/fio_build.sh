#!/usr/bin/env bash
# fio_build.sh TARBALL BUILD_DIR: builds fio with its libcufile engine from a source tarball
# (`git archive` of github.com/axboe/fio, carried in the GPU bundle), against the CUDA headers
# and libraries of this machine; prints the path of the fio binary as its last line.
# configure's --enable-libcufile probes cufile.h and links -lcuda -lcudart -lcufile -ldl, so the
# binary names libcufile.so.0 (DT_NEEDED): a preloaded libcufile.so.0 takes its place at run time.
set -eu
tarball=$1
build=$2
cuda=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f "$cuda/include/cufile.h" ]; then
    for dir in /usr/local/cuda /usr/local/cuda-*; do
        if [ -f "$dir/include/cufile.h" ]; then
            cuda=$dir
            break
        fi
    done
fi
[ -f "$cuda/include/cufile.h" ] || { echo "fio_build: no cufile.h under $cuda" >&2; exit 1; }
libdir=$cuda/lib64
[ -d "$libdir" ] || libdir=$cuda/targets/x86_64-linux/lib
rm -rf "$build"
mkdir -p "$build"
tar -xzf "$tarball" -C "$build" --strip-components=1
cd "$build"
./configure --enable-libcufile --disable-native \
    --extra-cflags="-I$cuda/include" --extra-ldflags="-L$libdir -Wl,-rpath,$libdir" >configure.log 2>&1 || {
    tail -n 40 configure.log >&2
    exit 1
}
grep -q 'CONFIG_LIBCUFILE' config-host.h || {
    echo "fio_build: configure did not enable libcufile:" >&2
    grep -i cufile configure.log >&2
    exit 1
}
make -j"$(nproc)" fio >make.log 2>&1 || {
    tail -n 40 make.log >&2
    exit 1
}
echo "$build/fio"
