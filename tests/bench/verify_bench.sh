#!/usr/bin/env bash
# verify_bench.sh - `psdb verify` and `psdb publish` of a realistic PSDB (many small values: `psdb
# synth` compiled with `psdb compile`) against `openssl dgst -sha256` of the same file, alternating
# over several rounds; prints the medians and two ratios: verify time / openssl time (target
# <= 1.5) and publish MiB/s / openssl MiB/s (target >= 0.7), each as the median of the rounds'
# ratios (a round's commands run seconds apart, so a ratio within a round is the steadier figure on
# a shared machine). Each publish goes to a fresh psdbd (started before the clock, 4 threads, no
# request log; its blob is synced to disk after the clock, so that its writeback does not run into
# the next command). Beside the wall times it prints the CPU seconds each took (user + system, for
# a publish the client's and psdbd's together), which other load on the machine changes little.
# With OLD_BUILD, that build's verify and publish are measured in the same rounds (before/after in
# one run). Never fails for speed.
# Usage: tests/bench/verify_bench.sh [BUILD [OLD_BUILD]]   (BUILD default build/rel; each build
#        needs psdb and psdbd: cmake --build BUILD --target psdb_tool psdbd)
#        env: PSDB_BENCH_PIPELINES=20000 (the synth corpus: 20000 give about 200 MiB and 63k
#        values, the issue's 60000 about 571 MiB and 189k), PSDB_BENCH_ROUNDS=5, PSDB_BENCH_DIR
#        (work directory; the compiled file is kept there and reused, default a new one in $TMPDIR).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
new=$(cd "${1:-$root/build/rel}" && pwd)
old=
[ $# -lt 2 ] || old=$(cd "$2" && pwd)
pipelines=${PSDB_BENCH_PIPELINES:-20000}
rounds=${PSDB_BENCH_ROUNDS:-5}
work=${PSDB_BENCH_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/psdb-verify-bench-XXXXXX")}
say() { printf 'verify-bench: %s\n' "$*" >&2; }
# shellcheck source=tests/bench/lib.sh
. "$root/tests/bench/lib.sh"

for b in "$new" $old; do
    for t in psdb psdbd; do
        [ -x "$b/$t" ] || { say "$b/$t missing (cmake --build $b --target psdb_tool psdbd)"; exit 2; }
    done
done
for t in openssl /usr/bin/time; do
    command -v "$t" >/dev/null || { say "$t missing (apt-get install openssl time)"; exit 2; }
done

pid=
cleanup() {
    [ -z "$pid" ] || { kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
    rm -rf "$work/data"
    [ -n "${PSDB_BENCH_DIR:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work"
file=$work/synth-$pipelines.psdb
if [ ! -f "$file" ]; then
    say "making the PSDB: psdb synth --pipelines $pipelines, psdb compile"
    "$new/psdb" synth --app Bench --app-version 1.0.0.0 --pipelines "$pipelines" \
        -o "$work/synth.sodb" >/dev/null
    "$new/psdb" compile "$work/synth.sodb" --family bench-gfx1 --abi 1 -o "$file.tmp" >/dev/null
    rm -f "$work/synth.sodb"
    mv "$file.tmp" "$file"
fi
[ -f "$work/key" ] || "$new/psdb" keygen -o "$work/key" >/dev/null
size=$(stat -c %s "$file")
values=$("$new/psdb" inspect "$file" | sed -n 's/^values: *//p')
tck=$(getconf CLK_TCK)
cat "$file" >/dev/null # every command reads it from the page cache

# timed NAME EXTRA_CPU COMMAND...: appends "wall cpu" of COMMAND to $work/t.NAME (cpu: its user
# and system seconds, plus EXTRA_CPU).
timed() {
    local name=$1 extra=$2
    shift 2
    /usr/bin/time -o "$work/time.out" -f '%e %U %S' "$@" >/dev/null
    awk -v x="$extra" '{ printf "%s %.3f\n", $1, $2 + $3 + x }' "$work/time.out" >>"$work/t.$name"
}

# cpu_of PID: the user + system seconds process PID has used.
cpu_of() { awk -v t="$tck" '{ printf "%.3f\n", ($14 + $15) / t }' "/proc/$1/stat"; }

# publish NAME BUILD: one publish of the file to a fresh psdbd of BUILD, timed.
publish() {
    local name=$1 bin=$2 data="$work/data" base token c0
    rm -rf "$data"
    token=$("$bin/psdbd" token create --data-dir "$data" --role publisher --name bench)
    "$bin/psdbd" key add --data-dir "$data" --name bench --public-key "$work/key.pub" >/dev/null
    bench_psdbd "$work/psdbd.out" "$work/psdbd.log" "$bin/psdbd" --data-dir "$data" --threads 4 \
        --max-upload 8G --log-requests false
    pid=$bench_pid
    base=$bench_url
    c0=$(cpu_of "$pid")
    /usr/bin/time -o "$work/time.out" -f '%e %U %S' "$bin/psdb" publish --server "$base" \
        --token "$token" --key "$work/key" "$file" >/dev/null 2>"$work/publish.err" || {
        say "publish with $bin failed: $(tail -1 "$work/publish.err"); psdbd: $(tail -3 "$work/psdbd.log")"
        exit 1
    }
    # The client's CPU and what psdbd used meanwhile.
    awk -v a="$c0" -v b="$(cpu_of "$pid")" '{ printf "%s %.3f\n", $1, $2 + $3 + b - a }' \
        "$work/time.out" >>"$work/t.$name"
    kill -TERM "$pid"
    wait "$pid" || true
    pid=
    rm -rf "$data"
    sync # the blob's writeback would otherwise compete with the next timed command
}

for f in openssl verify publish verify.old publish.old; do : >"$work/t.$f"; done
say "$rounds rounds on $(basename "$file") ($size bytes, $values values)"
last() { tail -1 "$work/t.$1" | awk '{ printf "%s s (cpu %s s)", $1, $2 }'; }
for r in $(seq "$rounds"); do
    timed openssl 0 openssl dgst -sha256 "$file"
    # The two builds in turn first, so that neither always runs right after the reference.
    if [ -n "$old" ] && [ $((r % 2)) -eq 0 ]; then
        timed verify.old 0 "$old/psdb" verify "$file"
        timed verify 0 "$new/psdb" verify "$file"
        publish publish.old "$old"
        publish publish "$new"
    else
        timed verify 0 "$new/psdb" verify "$file"
        [ -z "$old" ] || timed verify.old 0 "$old/psdb" verify "$file"
        publish publish "$new"
        [ -z "$old" ] || publish publish.old "$old"
    fi
    say "round $r: openssl $(last openssl), verify $(last verify), publish $(last publish)" \
        "${old:+| old: verify $(last verify.old), publish $(last publish.old)}"
done

# med FILE COLUMN: the median of a column.
med() { awk -v c="$2" '{ print $c }' "$1" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# ratio_med A B: the median over the rounds of A's wall time / B's.
ratio_med() {
    paste -d' ' "$work/t.$1" "$work/t.$2" | awk '{ print $1 / $3 }' | sort -g |
        awk '{ v[NR] = $1 } END { printf "%.2f", v[int((NR + 1) / 2)] }'
}
ossl=$(med "$work/t.openssl" 1)
row() { # row LABEL VERIFY PUBLISH
    local v p vc pc
    v=$(med "$work/t.$2" 1)
    vc=$(med "$work/t.$2" 2)
    p=$(med "$work/t.$3" 1)
    pc=$(med "$work/t.$3" 2)
    printf '| %s | %s (cpu %s) | %sx | %s (cpu %s) | %s | %s |\n' "$1" "$v" "$vc" \
        "$(ratio_med "$2" openssl)" "$p" "$pc" \
        "$(awk -v s="$size" -v p="$p" 'BEGIN { printf "%.0f", s / 1048576 / p }')" \
        "$(ratio_med openssl "$3")"
}
cat <<REPORT
psdb verify and publish against openssl dgst -sha256 ($(nproc) cores, medians of $rounds rounds;
$(basename "$file"): $size bytes, $values values; $(openssl version | cut -d' ' -f1-2))
openssl dgst -sha256: $ossl s (cpu $(med "$work/t.openssl" 2) s), $(awk -v s="$size" -v o="$ossl" 'BEGIN { printf "%.0f", s / 1048576 / o }') MiB/s

| build | verify, s | verify / openssl (<= 1.5) | publish, s | publish, MiB/s | publish / openssl MiB/s (>= 0.7) |
|---|---|---|---|---|---|
$(row "$new" verify publish)
REPORT
[ -z "$old" ] || row "$old" verify.old publish.old
