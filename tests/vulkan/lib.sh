# lib.sh - what the Vulkan test scripts share, sourced after each sets `dir` (its scratch folder,
# removed by its EXIT trap through vk_cleanup) and `name` (its name in messages):
#   fail MSG             one line on stderr, exit 1 (unless the script has its own)
#   vk_use_lavapipe      lavapipe as the driver unless the environment names one
#   vk_fresh_caches      an empty XDG cache home and registry under $dir, no Mesa cache overrides
#   vk_start_psdbd DATA  psdbd on a free port over DATA (a publisher token in $dir/token, a key
#                        pair $dir/key(.pub) registered); sets `url`; stopped by vk_cleanup
#   vk_cleanup           stops what vk_start_psdbd started and removes $dir
# shellcheck shell=bash
vk_pids=()
declare -F fail >/dev/null || fail() { echo "$name: $*" >&2; exit 1; }
vk_cleanup() {
    for p in "${vk_pids[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$dir"
}
vk_use_lavapipe() {
    local lvp=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json
    if [ -z "${VK_ICD_FILENAMES:-}${VK_DRIVER_FILES:-}" ] && [ -f "$lvp" ]; then
        export VK_ICD_FILENAMES=$lvp VK_DRIVER_FILES=$lvp
    fi
    if [ -n "${PSDB_SANITIZE:-}" ]; then
        export LSAN_OPTIONS=exitcode=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}
    fi
}
vk_fresh_caches() {
    export XDG_CACHE_HOME="$dir/cache" PSDB_REGISTRY_DIR="$dir/registry"
    unset MESA_SHADER_CACHE_DIR MESA_DISK_CACHE_READ_ONLY_FOZ_DBS MESA_DISK_CACHE_SINGLE_FILE
}
vk_start_psdbd() {
    local data=$1 line="" fd
    "$PSDBD" token create --data-dir "$data" --role publisher --name pub >"$dir/token"
    "$PSDB" keygen -o "$dir/key" >/dev/null
    "$PSDBD" key add --data-dir "$data" --name pub --public-key "$dir/key.pub" >/dev/null
    mkfifo "$dir/psdbd.fifo"
    "$PSDBD" --listen 127.0.0.1:0 --data-dir "$data" >"$dir/psdbd.fifo" 2>"$dir/psdbd.log" &
    vk_pids+=($!)
    exec {fd}<"$dir/psdbd.fifo"
    read -r -t 30 line <&"$fd" || fail "psdbd did not start: $(cat "$dir/psdbd.log")"
    url=${line#psdbd: listening on }
}
