#!/usr/bin/env bash
# delta_update_test.sh - a value-level delta update against the real psdbd: version N of a game
# installed, version N+1 (psdb synth --changed) published, psdb install rebuilds it from the
# installed PSDB plus GET /v1/blobs/<sha>/valuemap/v2 and ranges of the blob, and the result is the
# published file, fetched for a small fraction of its size. Also: both value map versions are
# immutable and cacheable under their own URL and ETag, a damaged installed file falls back to
# the full download, and a delta update interrupted by SIGINT is taken up by the next run.
# Env: PSDB = the psdb tool, PSDBD = the psdbd server.
set -euo pipefail
: "${PSDB:?set PSDB to the psdb tool}"
: "${PSDBD:?set PSDBD to the psdbd server (built with the server)}"
dir=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$dir"
}
trap cleanup EXIT
fail() {
    echo "delta_update_test: $*" >&2
    for f in "$dir"/*.log "$dir"/*.json; do
        [ -f "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }
    done
    exit 1
}
mkfifo "$dir/psdbd.fifo"
data="$dir/data"
"$PSDBD" token create --data-dir "$data" --role publisher --name pub >"$dir/token"
"$PSDB" keygen -o "$dir/key" >/dev/null
"$PSDBD" key add --data-dir "$data" --name pub --public-key "$dir/key.pub" >/dev/null
"$PSDBD" --listen 127.0.0.1:0 --data-dir "$data" >"$dir/psdbd.fifo" 2>"$dir/psdbd.log" &
pids+=($!)
exec {fd}<"$dir/psdbd.fifo"
read -r -t 30 line <&"$fd" || fail "psdbd did not start"
url=${line#psdbd: listening on }

synth() { # VERSION-FILE [ARGS]: a corpus of the game, compiled
    local out=$1
    shift
    "$PSDB" synth --app DeltaGame --app-version 1.0.0.0 --pipelines 600 "$@" -o "$dir/$out.sodb" \
        >/dev/null
    "$PSDB" compile "$dir/$out.sodb" --family gfx9 --abi 1 -o "$dir/$out.psdb" >/dev/null
}
synth v1
synth v2 --changed 0.05
"$PSDB" publish --server "$url" --token "$(cat "$dir/token")" --key "$dir/key" --serial 1 \
    "$dir/v1.psdb" >/dev/null || fail "publish v1"
install() {
    "$PSDB" install --server "$url" --exe-path /games/delta/DeltaGame.exe --app DeltaGame \
        --app-version 1.0.0.0 --target gfx9:1-1 --trust "$dir/key.pub" --registry "$dir/reg" \
        --json >"$dir/$1.json" 2>"$dir/$1.log" || fail "install $1"
}
install first
grep -q '"download":"full"' "$dir/first.json" || fail "a first install is a full download"
"$PSDB" publish --server "$url" --token "$(cat "$dir/token")" --key "$dir/key" --serial 2 \
    "$dir/v2.psdb" >/dev/null || fail "publish v2"
install update
grep -q '"download":"delta"' "$dir/update.json" || fail "the update was not a delta"
size=$(stat -c %s "$dir/v2.psdb")
got=$(sed -n 's/.*"bytes_downloaded":\([0-9]*\).*/\1/p' "$dir/update.json")
# 5% of 600 pipelines changed: their values are about 5% of the file, the version 2 map about 4%.
[ "$got" -gt 0 ] && [ $((got * 100)) -lt $((size * 12)) ] ||
    fail "the delta downloaded $got of $size bytes"
sha=$(sha256sum "$dir/v2.psdb" | cut -d' ' -f1)
cmp "$dir/v2.psdb" "$dir/reg/psdbs/$sha.psdb" || fail "the rebuilt file is not the published one"
# The missing values came in multi-range requests (a few hundred runs each), not one per run.
runs=$(grep -c "access GET /v1/blobs/$sha 206" "$dir/psdbd.log" || true)
[ "$runs" -ge 1 ] && [ "$runs" -le 2 ] || fail "the update made $runs range requests"

# Several ranges of a blob: one 206 multipart/byteranges, each part its bytes and Content-Range.
curl -sf -D "$dir/mh" -H 'Range: bytes=0-15,4096-4101,20000-20009' "$url/v1/blobs/$sha" \
    -o "$dir/mb" || fail "GET several ranges"
head -n1 "$dir/mh" | grep -q ' 206' || fail "several ranges did not answer 206"
grep -qi '^content-type: multipart/byteranges; boundary=' "$dir/mh" || fail "not multipart"
for r in 0-15 4096-4101 20000-20009; do
    grep -qa "^Content-Range: bytes $r/$size" "$dir/mb" || fail "no part for bytes $r"
done
hex() { od -An -tx1 | tr -d ' \n'; }
body=$(hex <"$dir/mb")
for r in 0:16 4096:6 20000:10; do
    part=$(dd if="$dir/v2.psdb" bs=1 skip="${r%:*}" count="${r#*:}" 2>/dev/null | hex)
    case "$body" in *"$part"*) ;; *) fail "the part at ${r%:*} is not the blob's bytes" ;; esac
done
code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Range: bytes=10-20,0-5' "$url/v1/blobs/$sha")
[ "$code" = 200 ] || fail "unordered ranges answered $code, not the whole blob"

# The value maps: immutable, cacheable, the same bytes on every request; version 1 (for launchers
# that read only it) and version 2 under their own URLs and ETags.
for v in "" /v2; do
    curl -sf -D "$dir/h" "$url/v1/blobs/$sha/valuemap$v" -o "$dir/m1" || fail "GET valuemap$v"
    grep -qi '^cache-control: public, max-age=31536000, immutable' "$dir/h" || fail "not immutable"
    grep -qi "^etag: \"$sha-valuemap${v:+-v2}\"" "$dir/h" || fail "valuemap$v: wrong ETag"
    curl -sf "$url/v1/blobs/$sha/valuemap$v" -o "$dir/m2"
    cmp "$dir/m1" "$dir/m2" || fail "the value map$v changed between requests"
    [ "$(head -c 8 "$dir/m1")" = "PSDBVMAP" ] || fail "not a value map"
    ver=$(od -An -tu4 -j8 -N4 "$dir/m1" | tr -d ' ')
    [ "/v$ver" = "${v:-/v1}" ] || fail "valuemap$v is version $ver"
    code=$(curl -s -o /dev/null -w '%{http_code}' \
        "$url/v1/blobs/$(printf '0%.0s' {1..64})/valuemap$v")
    [ "$code" = 404 ] || fail "a value map of no blob answered $code"
done
code=$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/blobs/$sha/valuemap/v3")
[ "$code" != 200 ] || fail "an unknown map version was served"

# A damaged installed file: the rebuild does not verify, the full download takes over.
synth v3 --changed 0.05 --patch 2
"$PSDB" publish --server "$url" --token "$(cat "$dir/token")" --key "$dir/key" --serial 3 \
    "$dir/v3.psdb" >/dev/null || fail "publish v3"
printf 'garbage!' | dd of="$dir/reg/psdbs/$sha.psdb" bs=1 seek=200000 conv=notrunc 2>/dev/null
install damaged
grep -q '"download":"full"' "$dir/damaged.json" || fail "a damaged old file did not fall back"
grep -q 'delta_skipped' "$dir/damaged.json" || fail "the fallback does not say why"
sha3=$(sha256sum "$dir/v3.psdb" | cut -d' ' -f1)
cmp "$dir/v3.psdb" "$dir/reg/psdbs/$sha3.psdb" || fail "v3 is not the published file"
# SIGINT in the middle of a delta update: exit 130, nothing registered, the rebuilt part and the
# map kept; the next run takes them up (no map fetched again) and installs the published file.
synth v4 --changed 0.05 --patch 3
"$PSDB" publish --server "$url" --token "$(cat "$dir/token")" --key "$dir/key" --serial 4 \
    "$dir/v4.psdb" >/dev/null || fail "publish v4"
sha4=$(sha256sum "$dir/v4.psdb" | cut -d' ' -f1)
"$PSDB" install --server "$url" --exe-path /games/delta/DeltaGame.exe --app DeltaGame \
    --app-version 1.0.0.0 --target gfx9:1-1 --trust "$dir/key.pub" --registry "$dir/reg" \
    --limit-rate 40K --json >"$dir/cut.json" 2>"$dir/cut.log" &
cut=$!
for _ in $(seq 300); do
    [ -s "$dir/reg/psdbs/$sha4.psdb.delta" ] && break
    kill -0 "$cut" 2>/dev/null || break
    sleep 0.05
done
[ -s "$dir/reg/psdbs/$sha4.psdb.delta" ] || fail "no delta output appeared before the install ended"
kill -INT "$cut"
rc=0
wait "$cut" || rc=$?
[ "$rc" = 130 ] || fail "an interrupted delta update exited $rc, not 130"
grep -q 'delta update is kept' "$dir/cut.log" || fail "the interruption does not say what is kept"
kept=$(stat -c %s "$dir/reg/psdbs/$sha4.psdb.delta" 2>/dev/null || echo 0)
[ "$kept" -gt 0 ] || fail "the interrupted delta update did not keep its output"
[ -s "$dir/reg/psdbs/$sha4.psdb.valuemap" ] || fail "the value map was not kept"
maps_before=$(grep -c "access GET /v1/blobs/$sha4/valuemap/v2 200" "$dir/psdbd.log" || true)
install resumed
grep -q '"download":"delta"' "$dir/resumed.json" || fail "the resumed update was not a delta"
resumed=$(sed -n 's/.*"delta_resumed":\([0-9]*\).*/\1/p' "$dir/resumed.json")
[ -n "$resumed" ] && [ "$resumed" -gt 0 ] && [ "$resumed" -le "$kept" ] ||
    fail "the resumed update kept ${resumed:-none} of the $kept bytes left"
maps_after=$(grep -c "access GET /v1/blobs/$sha4/valuemap/v2 200" "$dir/psdbd.log" || true)
[ "$maps_after" = "$maps_before" ] || fail "the resumed update fetched the value map again"
cmp "$dir/v4.psdb" "$dir/reg/psdbs/$sha4.psdb" || fail "the resumed file is not the published one"
[ ! -e "$dir/reg/psdbs/$sha4.psdb.delta" ] || fail "the kept output is still there"
echo "delta_update_test: ok (update downloaded $got of $size bytes; resumed after $kept bytes)"
