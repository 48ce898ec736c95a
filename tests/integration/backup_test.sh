#!/usr/bin/env bash
# backup_test.sh - psdbd backup while psdbd serves and publishes, restore into a new data directory,
# which passes `psdbd check --deep` and resolves the same manifests; refusals and damaged backups.
# Env: PSDB = the psdb tool, PSDBD = the psdbd server.
set -euo pipefail
: "${PSDB:?set PSDB to the psdb tool}"
: "${PSDBD:?set PSDBD to the psdbd server (built with the server)}"
dir=$(mktemp -d)
pids=()
shm=""
cleanup() {
    for p in "${pids[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$dir"
    [ -z "$shm" ] || rm -rf "$shm"
}
trap cleanup EXIT
fail() {
    echo "backup_test: $*" >&2
    for f in "$dir"/*.log; do
        [ -f "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }
    done
    exit 1
}

# start_psdbd NAME DATA_DIR: starts psdbd on a free loopback port; sets $url. The first stdout
# line is read through a FIFO, so the test waits exactly until psdbd listens.
start_psdbd() {
    local name=$1 data=$2 line=""
    mkfifo "$dir/$name.fifo"
    "$PSDBD" --listen 127.0.0.1:0 --data-dir "$data" >"$dir/$name.fifo" 2>"$dir/$name.log" &
    pids+=($!)
    exec {fd}<"$dir/$name.fifo"
    read -r -t 30 line <&"$fd" || fail "$name: psdbd did not start"
    url=${line#psdbd: listening on }
    [ "$url" != "$line" ] || fail "$name: unexpected first line '$line'"
}

# The PSDBs: two targets of one application, and a third published during the backup.
for f in 1 2 3; do
    "$PSDB" synth --app BackupGame --app-version 1.0.0.0 --pipelines 40 --seed "$f" \
        -o "$dir/g$f.sodb" >/dev/null
    "$PSDB" compile "$dir/g$f.sodb" --family "gfx$f" --abi 1 -o "$dir/g$f.psdb" >/dev/null
done

data="$dir/data"
"$PSDBD" token create --data-dir "$data" --role publisher --name pub >"$dir/token"
"$PSDB" keygen -o "$dir/key" >/dev/null
"$PSDBD" key add --data-dir "$data" --name pub --public-key "$dir/key.pub" >/dev/null
token=$(cat "$dir/token")
start_psdbd a "$data"
url_a=$url
for f in 1 2; do
    "$PSDB" publish --server "$url_a" --token "$token" --key "$dir/key" "$dir/g$f.psdb" >/dev/null ||
        fail "publish g$f"
done

# Backup while the server runs and a publish is in flight: the copy is one snapshot either way.
"$PSDB" publish --server "$url_a" --token "$token" --key "$dir/key" "$dir/g3.psdb" \
    >"$dir/publish3.out" 2>&1 &
publisher=$!
"$PSDBD" backup --data-dir "$data" --out "$dir/bk" >"$dir/backup.out" 2>&1 ||
    fail "backup: $(cat "$dir/backup.out")"
wait "$publisher" || fail "publish during backup: $(cat "$dir/publish3.out")"
grep -q '^backup: ok: .* psdbs, [0-9]* blobs' "$dir/backup.out" ||
    fail "backup summary: $(cat "$dir/backup.out")"
[ -f "$dir/bk/backup.json" ] || fail "no backup.json"
grep -q '"format": "psdbd-backup"' "$dir/bk/backup.json" || fail "backup.json: format"
[ ! -e "$dir/bk/index.sqlite.partial" ] || fail "a partial index was left"
# Same filesystem: blobs are hard links (no bytes copied), each as large as indexed.
sha1=$(sha256sum "$dir/g1.psdb" | cut -d' ' -f1)
blob1="$dir/bk/blobs/${sha1:0:2}/$sha1"
[ -f "$blob1" ] || fail "blob $sha1 is not in the backup"
[ "$(stat -c %h "$blob1")" -ge 2 ] || fail "same filesystem, yet the blob was copied, not linked"
grep -q ' 0 copied' "$dir/backup.out" || fail "same filesystem: $(cat "$dir/backup.out")"

# Targets that are not empty are refused, and left alone.
mkdir "$dir/full"
echo keep >"$dir/full/file"
if "$PSDBD" backup --data-dir "$data" --out "$dir/full" 2>"$dir/err"; then
    fail "backup wrote into a non-empty directory"
fi
grep -q 'not an empty directory' "$dir/err" || fail "backup refusal message: $(cat "$dir/err")"
before=$(ls -R "$data" | sha256sum)
if "$PSDBD" restore --from "$dir/bk" --data-dir "$data" 2>"$dir/err"; then
    fail "restore wrote into a live data directory"
fi
grep -q 'not an empty directory' "$dir/err" || fail "restore refusal message: $(cat "$dir/err")"
[ "$(ls -R "$data" | sha256sum)" = "$before" ] || fail "a refused restore changed the target"
[ "$(cat "$dir/full/file")" = keep ] || fail "a refused backup changed the target"

# Restore into a new directory: a deep check passes, and a server there answers as the original.
"$PSDBD" restore --from "$dir/bk" --data-dir "$dir/restored" >"$dir/restore.out" 2>&1 ||
    fail "restore: $(cat "$dir/restore.out")"
grep -q '^restore: ok: ' "$dir/restore.out" || fail "restore summary: $(cat "$dir/restore.out")"
"$PSDBD" check --data-dir "$dir/restored" --deep >"$dir/check.out" 2>&1 ||
    fail "check --deep on the restored directory: $(cat "$dir/check.out")"
grep -q '^check: ok: ' "$dir/check.out" || fail "check output: $(cat "$dir/check.out")"
start_psdbd b "$dir/restored"
url_b=$url
for f in 1 2; do
    q="/v1/resolve?app=BackupGame&app_version=1.0.0.0&family=gfx$f&abi_min=1&abi_max=1"
    curl -fsS "$url_a$q" -o "$dir/resolve_a$f.json" || fail "resolve gfx$f on the original"
    curl -fsS "$url_b$q" -o "$dir/resolve_b$f.json" || fail "resolve gfx$f on the restored copy"
    cmp -s "$dir/resolve_a$f.json" "$dir/resolve_b$f.json" ||
        fail "manifests differ: $(cat "$dir/resolve_a$f.json") / $(cat "$dir/resolve_b$f.json")"
    sha=$(sha256sum "$dir/g$f.psdb" | cut -d' ' -f1)
    grep -q "\"sha256\": *\"$sha\"" "$dir/resolve_b$f.json" || fail "resolve gfx$f: wrong PSDB"
    curl -fsS "$url_b/v1/blobs/$sha" -o "$dir/dl$f" || fail "download gfx$f from the restored copy"
    [ "$(sha256sum <"$dir/dl$f" | cut -d' ' -f1)" = "$sha" ] || fail "downloaded bytes differ"
done
# The restored server takes publishes (its index is writable and migrated).
"$PSDB" publish --server "$url_b" --token "$token" --key "$dir/key" --serial 9 "$dir/g1.psdb" \
    >/dev/null || fail "publish to the restored server"

# Another filesystem (tmpfs when /dev/shm is one) or --copy: real copies, same result.
copy_flag=(--copy)
if [ -d /dev/shm ] && [ -w /dev/shm ] && [ "$(stat -c %d /dev/shm)" != "$(stat -c %d "$dir")" ]; then
    shm=$(mktemp -d /dev/shm/psdb-backup-test.XXXXXX)
    copy_flag=()
    copy_target="$shm/bk"
else
    copy_target="$dir/bk-copy"
fi
"$PSDBD" backup --data-dir "$data" --out "$copy_target" "${copy_flag[@]}" >"$dir/backup2.out" 2>&1 ||
    fail "backup with copies: $(cat "$dir/backup2.out")"
grep -q ' 0 linked' "$dir/backup2.out" || fail "expected copies: $(cat "$dir/backup2.out")"
"$PSDBD" restore --from "$copy_target" --data-dir "$dir/restored2" --copy >"$dir/restore2.out" 2>&1 ||
    fail "restore from copies: $(cat "$dir/restore2.out")"
"$PSDBD" check --data-dir "$dir/restored2" --deep >/dev/null || fail "check --deep after copies"

# A damaged backup (a blob one byte short) is refused, and leaves no index behind.
cp -r "$dir/bk" "$dir/bad"
bad_blob="$dir/bad/blobs/${sha1:0:2}/$sha1"
truncate -s -1 "$bad_blob"
if "$PSDBD" restore --from "$dir/bad" --data-dir "$dir/restored3" 2>"$dir/err"; then
    fail "restored a backup with a short blob"
fi
grep -q "$sha1 has" "$dir/err" || fail "short blob message: $(cat "$dir/err")"
[ ! -e "$dir/restored3/index.sqlite" ] || fail "a failed restore left an index"
# An incomplete backup (no backup.json) is refused.
rm "$dir/bad/backup.json"
if "$PSDBD" restore --from "$dir/bad" --data-dir "$dir/restored4" 2>"$dir/err"; then
    fail "restored a backup without backup.json"
fi
grep -q 'not a complete psdbd backup' "$dir/err" || fail "incomplete message: $(cat "$dir/err")"
echo "backup_test: ok"
