#!/usr/bin/env bash
# farm_vulkan_test.sh - the compile farm on the machine's Vulkan device (lavapipe in CI): a worker
# with --backend vulkan announces the target `psdb install --target auto` asks for, compiles a
# job's SODB on the driver and publishes it; the launcher installs it with --target auto and
# replays it to a 100% hit rate. The next version's job names the first PSDB as its base and the
# worker compiles incrementally from it. psdb install --compile-missing builds a version without a
# PSDB on the device itself, and keeps that build when run again. Env: PSDB, PSDBD. Exit 77 without a Vulkan device or without
# `psdb synth --api vulkan` (glslang).
set -euo pipefail
: "${PSDB:?set PSDB to the psdb tool}"
: "${PSDBD:?set PSDBD to the psdbd server (built with the server)}"
dir=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do
        kill -KILL "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$dir"
}
trap cleanup EXIT
name=farm_vulkan_test
. "$(dirname "$0")/lib.sh" # fail, farm_credentials, farm_start_psdbd
skip() { echo "farm_vulkan_test: skipped: $*"; exit 77; }

lvp=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json
if [ -z "${VK_ICD_FILENAMES:-}${VK_DRIVER_FILES:-}" ] && [ -f "$lvp" ]; then
    export VK_ICD_FILENAMES=$lvp VK_DRIVER_FILES=$lvp
fi
export XDG_CACHE_HOME="$dir/cache"
unset MESA_SHADER_CACHE_DIR MESA_DISK_CACHE_READ_ONLY_FOZ_DBS MESA_DISK_CACHE_SINGLE_FILE
unset MESA_SHADER_CACHE_DISABLE PSDB_VULKAN_STRATEGY

"$PSDB" synth --api vulkan --app VkFarm --app-version 1.0.0.0 --pipelines 40 \
    -o "$dir/v1.sodb" >/dev/null 2>"$dir/synth.err" ||
    skip "psdb synth --api vulkan: $(head -n 1 "$dir/synth.err")"
"$PSDB" compile "$dir/v1.sodb" --backend vulkan -o "$dir/probe.psdb" >/dev/null 2>"$dir/probe.err" ||
    skip "no Vulkan device to compile on: $(tail -n 1 "$dir/probe.err")"
"$PSDB" synth --api vulkan --app VkFarm --app-version 1.1.0.0 --pipelines 40 --changed 0.25 \
    -o "$dir/v2.sodb" >/dev/null
"$PSDB" synth --api vulkan --app VkFarm --app-version 1.2.0.0 --pipelines 40 --changed 0.5 \
    -o "$dir/v3.sodb" >/dev/null

data="$dir/data"
farm_credentials "$data"
farm_start_psdbd "$data"

publish_sodb() { # FILE SERIAL
    "$PSDB" publish --server "$url" --token "$studio" --key "$dir/studio.key" --serial "$2" "$1" \
        >/dev/null || fail "publish $1"
}
install() { # VERSION [ARGS]
    local v=$1
    shift
    "$PSDB" install --server "$url" --exe-path /games/vkfarm/VkFarm.exe --app VkFarm \
        --app-version "$v" --target auto --trust "$dir/studio.key.pub" --trust "$dir/farm.key.pub" \
        --registry "$dir/reg" --json "$@" >"$dir/install-$v.json" 2>"$dir/install-$v.err"
}
work() { # NAME: one job, then exit
    "$PSDB" worker --server "$url" --token "$farm" --key "$dir/farm.key" \
        --trust "$dir/studio.key.pub" --trust "$dir/farm.key.pub" --backend vulkan --once \
        --json >"$dir/$1.out" 2>"$dir/$1.err" || fail "vulkan worker $1: $(cat "$dir/$1.err")"
}
replay_full() { # SODB
    "$PSDB" replay --backend vulkan "$1" --exe-path /games/vkfarm/VkFarm.exe --registry "$dir/reg" \
        --min-hit-rate 1 >"$dir/replay.out" 2>"$dir/replay.err" ||
        fail "replay below 100%: $(cat "$dir/replay.out" "$dir/replay.err")"
}

# Version 1: the launcher's miss (--target auto) queues the job; the lavapipe worker compiles it.
publish_sodb "$dir/v1.sodb" 1
t0=$(date +%s%N)
install 1.0.0.0 && fail "installed before anything was compiled"
work w1
grep -q '"outcome":"done"' "$dir/w1.out" || fail "v1 job: $(cat "$dir/w1.out")"
grep -q '"base":false' "$dir/w1.out" || fail "v1 had a base: $(cat "$dir/w1.out")"
install 1.0.0.0 || fail "install v1: $(cat "$dir/install-1.0.0.0.err")"
grep -q '"status":"installed"' "$dir/install-1.0.0.0.json" || fail "v1: $(cat "$dir/install-1.0.0.0.json")"
t1=$(date +%s%N)
replay_full "$dir/v1.sodb"
# The figure a platform team asks for: from a player's miss to the PSDB the next install gets.
echo "farm_vulkan_test: version 1: first miss to installed PSDB $(((t1 - t0) / 1000000)) ms;" \
    "$(grep -m 1 "^psdb " "$dir/replay.out" || true)"

# Version 2: its job names version 1's PSDB as the base; compiled incrementally.
publish_sodb "$dir/v2.sodb" 2
install 1.1.0.0 && fail "installed v2 before it was compiled"
work w2
grep -q '"outcome":"done".*"base":true' "$dir/w2.out" || fail "v2 job without base: $(cat "$dir/w2.out")"
install 1.1.0.0 || fail "install v2: $(cat "$dir/install-1.1.0.0.err")"
replay_full "$dir/v2.sodb"

# Version 3 with no worker: psdb install --compile-missing compiles it on this device.
publish_sodb "$dir/v3.sodb" 3
install 1.2.0.0 --compile-missing || fail "install --compile-missing: $(cat "$dir/install-1.2.0.0.err")"
grep -q '"built_here":true' "$dir/install-1.2.0.0.json" || fail "v3: $(cat "$dir/install-1.2.0.0.json")"
replay_full "$dir/v3.sodb"
# Again: the device's build is kept, not compiled again (the driver's data differs from compile
# to compile, so a second compile would install another digest).
cp "$dir/install-1.2.0.0.json" "$dir/built.json"
install 1.2.0.0 --compile-missing || fail "install --compile-missing again: $(cat "$dir/install-1.2.0.0.err")"
built_sha=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["targets"][0]["sha256"])' \
    "$dir/built.json")
grep -q '"status":"unchanged"' "$dir/install-1.2.0.0.json" &&
    grep -q "\"sha256\":\"$built_sha\"" "$dir/install-1.2.0.0.json" ||
    fail "v3 compiled again: $(cat "$dir/install-1.2.0.0.json")"
[ "$(grep -c 'access POST /v1/psdbs 201' "$dir/psdbd.log")" = 2 ] || fail "want 2 publishes"

echo "farm_vulkan_test: ok"
