# lib.sh - what the farm test scripts share, sourced after each sets `name` (its name in
# messages) and `dir` (its scratch folder):
#   fail MSG             one line on stderr, then the end of every *.log and *.err in $dir; exit 1
#   farm_credentials D   over data directory D (and PSDBD_INDEX when set): a publisher token
#                        for the studio and a compiler token for the farm ($studio, $farm), and
#                        the key pairs $dir/studio.key(.pub) and $dir/farm.key(.pub), registered
#   farm_start_psdbd D   psdbd on a free port over data directory D, its log $dir/psdbd.log; its
#                        pid is added to `pids` and its address set in `url`
# shellcheck shell=bash
fail() {
    echo "$name: $*" >&2
    for f in "$dir"/*.log "$dir"/*.err; do
        [ -s "$f" ] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }
    done
    exit 1
}
farm_credentials() {
    local data=$1 who
    "$PSDBD" token create --data-dir "$data" --role publisher --name studio >"$dir/studio.token"
    "$PSDBD" token create --data-dir "$data" --role compiler --name farm >"$dir/farm.token"
    for who in studio farm; do
        "$PSDB" keygen -o "$dir/$who.key" >/dev/null
        "$PSDBD" key add --data-dir "$data" --name "$who" --public-key "$dir/$who.key.pub" >/dev/null
    done
    studio=$(cat "$dir/studio.token")
    farm=$(cat "$dir/farm.token")
}
farm_start_psdbd() {
    local line fd
    mkfifo "$dir/psdbd.fifo"
    "$PSDBD" --listen 127.0.0.1:0 --data-dir "$1" >"$dir/psdbd.fifo" 2>"$dir/psdbd.log" &
    pids+=($!)
    exec {fd}<"$dir/psdbd.fifo"
    read -r -t 30 line <&"$fd" || fail "psdbd did not start"
    url=${line#psdbd: listening on }
}
