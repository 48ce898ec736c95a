# lib.sh - what the farm test scripts share, sourced after each sets `name` (its name in
# messages) and `dir` (its scratch folder):
#   fail MSG             one line on stderr, then the end of every *.log and *.err in $dir; exit 1
#   farm_credentials D   over data directory D (and PSDBD_INDEX when set): a publisher token
#                        for the studio and a compiler token for the farm ($studio, $farm), and
#                        the key pairs $dir/studio.key(.pub) and $dir/farm.key(.pub), registered
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
