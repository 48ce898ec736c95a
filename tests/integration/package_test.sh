#!/usr/bin/env bash
# package_test.sh - installs libpsdb into a temporary prefix and builds a consumer against it, once
# with pkg-config and once with CMake's find_package(psdb): the installed headers, library,
# psdb.pc and CMake package (shared and static targets) must be usable as they are.
set -euo pipefail
build=${PSDB_BUILD_DIR:?PSDB_BUILD_DIR is the build directory}
work=$(mktemp -d "${TMPDIR:-/tmp}/psdb-package-XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "package_test: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$work/prefix" >"$work/install.log" 2>&1 ||
    { cat "$work/install.log"; fail "cmake --install failed"; }
for f in include/psdb/psdb.h include/psdb/client.h; do
    [ -f "$work/prefix/$f" ] || fail "$f not installed"
done
libdir=$(dirname "$(find "$work/prefix" -name psdb.pc | head -1)")/..
[ -f "$libdir/libpsdb.a" ] || fail "static library not installed"
ls "$libdir"/libpsdb.so* >/dev/null 2>&1 || fail "shared library not installed"

cat >"$work/consumer.c" <<'C'
#include <psdb/psdb.h>
#include <stdio.h>
#include <string.h>
int main(void)
{
    psdb_file *f = NULL;
    /* A missing file is an I/O error, not a crash: the library is really linked. */
    psdb_hr hr = psdb_file_open("/nonexistent.psdb", NULL, &f);
    printf("%s %s\n", psdb_version(), psdb_hr_str(hr));
    return strcmp(psdb_version(), PSDB_VERSION_STRING) != 0 || PSDB_SUCCEEDED(hr);
}
C

# pkg-config, shared library.
export PKG_CONFIG_PATH=$libdir/pkgconfig
cc -std=c11 -Wall -Werror "$work/consumer.c" -o "$work/consumer-pc" $(pkg-config --cflags --libs psdb)
LD_LIBRARY_PATH=$libdir "$work/consumer-pc" || fail "pkg-config consumer failed"

# CMake package.
mkdir -p "$work/cmake-consumer"
cp "$work/consumer.c" "$work/cmake-consumer/"
cat >"$work/cmake-consumer/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(psdb REQUIRED)
add_executable(consumer consumer.c)
target_link_libraries(consumer PRIVATE psdb::psdb)
add_executable(consumer_static consumer.c)
target_link_libraries(consumer_static PRIVATE psdb::psdb_static)
CM
cmake -S "$work/cmake-consumer" -B "$work/cmake-consumer/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
    >"$work/cmake.log" 2>&1 || { cat "$work/cmake.log"; fail "find_package(psdb) failed"; }
cmake --build "$work/cmake-consumer/build" >"$work/cmake-build.log" 2>&1 ||
    { cat "$work/cmake-build.log"; fail "CMake consumer did not build"; }
LD_LIBRARY_PATH=$libdir "$work/cmake-consumer/build/consumer" || fail "CMake consumer failed"
"$work/cmake-consumer/build/consumer_static" || fail "CMake consumer of the static library failed"
echo "package_test: pkg-config and find_package(psdb) consumers build and run"
