#!/usr/bin/env bash
# dashboard_test.sh - the dashboard at GET / in a real browser (headless Debian chromium): with a
# few published PSDBs and recorded traffic flushed, the page's script fills the coverage matrix,
# the missing-coverage list, the download plots and the recent events, with no console errors; a
# screenshot is saved under the build directory. Second case: where readers need a token, the
# page asks for one. Skipped (77) only when chromium is not installed.
set -euo pipefail
fail() { echo "dashboard_test: $*" >&2; tail -n 20 "$log" >&2 2>/dev/null; exit 1; }
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
    echo "dashboard_test: SKIP: chromium is not installed (apt-get install chromium)"
    exit 77
fi
. "$(dirname "${BASH_SOURCE[0]}")/stats_fixture.sh"
shots=${PSDB_BUILD_DIR:-$work}/dashboard
mkdir -p "$shots"

# chrome OUT.html ERR.log URL [more flags]: runs the page until its script is done (virtual time
# stops once nothing is pending) and writes the DOM; stderr carries the console messages.
chrome() {
    local out=$1 err=$2 page=$3 dump=--dump-dom
    shift 3
    [ "$out" = /dev/null ] && dump=
    timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
        --no-first-run --no-default-browser-check --user-data-dir="$work/profile" \
        --enable-logging=stderr --v=0 --virtual-time-budget=15000 $dump "$@" "$page" \
        >"$out" 2>"$err" || fail "chromium failed on $page (see $err)"
}
# console_clean ERR.log: no message from the page's console (errors, CSP violations, failed
# loads all land there).
console_clean() {
    if grep -E ':CONSOLE|Refused to|Uncaught|Failed to load resource' "$1" >&2; then
        fail "the browser console has messages (above)"
    fi
}

# farm: the compile farm's real data through its API (schema/HTTP.md, Farm): an SODB of Alpha
# 2.0.0.0, two jobs queued with `psdbd job add`; worker farm-w1 claims the first, publishes the
# version 2 PSDB and finishes it; worker farm-w2 fails the second three times (held), with an
# error that carries markup. farm_sign.py signs what the psdb tool cannot yet.
sign=$(dirname "${BASH_SOURCE[0]}")/farm_sign.py
farm() {
    local f=$work/farm kid comp sodb_sha sig lease serial job psdb_id i
    python3 -c 'import cryptography' 2>/dev/null || fail "python3's cryptography is not installed"
    comp=$("$psdbd" token create --data-dir "$data" "${index[@]}" --role compiler --name farm)
    kid=$(python3 "$sign" key-id "$work/key")
    "$psdb" synth --app Alpha --app-version 2.0.0.0 --pipelines 8 --seed 41 -o "$f.sodb" >/dev/null
    "$psdb" inspect --json "$f.sodb" >"$f.sodb.json"
    sig=$(python3 "$sign" sodb "$work/key" "$f.sodb" "$f.sodb.json" 1)
    curl -sf -o "$f.manifest" -H "Authorization: Bearer $pub" -H "X-Psdb-Key-Id: $kid" \
        -H "X-Psdb-Signature: $sig" -H "X-Psdb-Serial: 1" --data-binary "@$f.sodb" \
        "$url/v1/sodbs" || fail "POST /v1/sodbs"
    sodb_sha=$(json_field "$f.manifest" sha256)
    for abi in 4 5; do
        "$psdbd" job add --data-dir "$data" "${index[@]}" --app Alpha --app-version 2.0.0.0 \
            --family farm-gfx --abi "$abi" >"$f.job$abi" || fail "psdbd job add --abi $abi"
    done
    claim() { # claim WORKER ABI: the claim's answer in $f.claim
        curl -sf -o "$f.claim" -H "Authorization: Bearer $comp" --data-binary \
            "{\"worker\":\"$1\",\"target\":{\"family\":\"farm-gfx\",\"abi_version\":$2}}" \
            "$url/v1/jobs/claim" || fail "claim by $1"
        lease=$(grep -o '"lease": *"[0-9a-f]*' "$f.claim" | sed 's/.*"//')
        job=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["job"]["id"])' "$f.claim")
    }
    claim farm-w1 4
    serial=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["serial"])' "$f.claim")
    "$psdb" compile "$f.sodb" --family farm-gfx --abi 4 -o "$f.psdb" >/dev/null
    "$psdb" inspect --json "$f.psdb" >"$f.psdb.json"
    sig=$(python3 "$sign" psdb-v2 "$work/key" "$f.psdb" "$f.psdb.json" "$serial" "$sodb_sha")
    curl -sf -o "$f.psdb.manifest" -H "Authorization: Bearer $comp" -H "X-Psdb-Key-Id: $kid" \
        -H "X-Psdb-Signature: $sig" -H "X-Psdb-Serial: $serial" \
        -H "X-Psdb-Sodb-Sha256: $sodb_sha" --data-binary "@$f.psdb" "$url/v1/psdbs" ||
        fail "the version 2 publish"
    psdb_id=$(json_field "$f.psdb.manifest" id)
    curl -sf -o /dev/null -H "Authorization: Bearer $comp" \
        --data-binary "{\"lease\":\"$lease\",\"psdb_id\":\"$psdb_id\"}" \
        "$url/v1/jobs/$job/done" || fail "done"
    for i in 1 2 3; do
        claim farm-w2 5
        curl -sf -o /dev/null -H "Authorization: Bearer $comp" --data-binary \
            "{\"lease\":\"$lease\",\"error\":\"attempt $i: <b>vkCreate</b> failed\"}" \
            "$url/v1/jobs/$job/fail" || fail "fail"
    done
    farm_held_job=$job
}

setup_fixture
traffic
farm
# A miss naming a 300-byte application: over the recorded limit, counted only in the day's
# aggregate, which the page counts below the missing list and never shows by name.
long=$(printf 'L%.0s' $(seq 300))
[ "$(resolve "$long" alpha-gfx9 1 1)" = 404 ] || fail "a resolve of a 300-byte name is not a 404"
flush

# Headers: the right types, a CSP that allows no inline script, nothing cached stale.
curl -sfD "$work/h.txt" -o "$work/index.html" "$url/" || fail "GET /"
grep -qi '^content-type: text/html; charset=utf-8' "$work/h.txt" || fail "GET /: Content-Type"
grep -qi "^content-security-policy: default-src 'none'; script-src 'self';" "$work/h.txt" ||
    fail "GET /: Content-Security-Policy"
grep -qi '^x-content-type-options: nosniff' "$work/h.txt" || fail "GET /: nosniff"
curl -sfD "$work/hj.txt" -o /dev/null "$url/dashboard.js" || fail "GET /dashboard.js"
grep -qi '^content-type: text/javascript' "$work/hj.txt" || fail "dashboard.js: Content-Type"
curl -sfD "$work/hc.txt" -o /dev/null "$url/dashboard.css" || fail "GET /dashboard.css"
grep -qi '^content-type: text/css' "$work/hc.txt" || fail "dashboard.css: Content-Type"
grep -Eq '<script>|<script [^>]*>[^<]|https?://[a-z]' "$work/index.html" &&
    fail "the page has inline script or loads something from elsewhere"

chrome "$work/dom.html" "$work/chrome.log" "$url/"
dom=$work/dom.html
grep -q 'data-state="ready"' "$dom" || fail "the page did not finish loading (state: $(grep -o 'data-state="[a-z]*"' "$dom" | head -1))"
grep -q '<ul id="errors" data-count="0" hidden' "$dom" || fail "the page recorded errors: $(grep -o '<ul id="errors".*</ul>' "$dom")"
console_clean "$work/chrome.log"
for s in '<th scope="row">Alpha</th>' '<th scope="row">Beta</th>' '<th>alpha-gfx1</th>' \
    '<th>beta-gfx2</th>' '<th>beta-gfx3</th>' 'serial 3' 'retired only' 'by ci-publisher'; do
    grep -qF "$s" "$dom" || fail "coverage matrix: '$s' is not on the page"
done
# Missing coverage: the two asked-for combinations with their counts, most asked first.
rows=$(grep -o '<tr class="missing-row"[^>]*><td>[^<]*</td><td>[^<]*</td><td>[^<]*</td><td>[^<]*</td><td class="num requests">[0-9]*' "$dom" |
    sed 's/<[^>]*>/|/g; s/|\+/|/g')
[ "$(printf '%s\n' "$rows" | head -1)" = "|Alpha|alpha-gfx9|5–6|any|3" ] ||
    fail "missing coverage: first row is '$(printf '%s\n' "$rows" | head -1)'"
[ "$(printf '%s\n' "$rows" | sed -n 2p)" = "|Beta|beta-gfx2|7|2.0.0.0|2" ] ||
    fail "missing coverage: second row is '$(printf '%s\n' "$rows" | sed -n 2p)'"
# Downloads: 2 complete and 1 partial for Alpha today, and plots drawn as inline SVG.
grep -qE '<tr class="download-row" data-app="Alpha"><td>[0-9-]+</td><td>Alpha</td><td class="num complete">2</td><td class="num partial">1</td>' "$dom" ||
    fail "downloads table: Alpha's 2 complete and 1 partial"
[ "$(grep -o '<svg viewBox="0 0 360 150"' "$dom" | wc -l)" -eq 5 ] || fail "not five plots"
grep -q 'data-max="3"' "$dom" || fail "the downloads plot does not reach 3 downloads"
grep -q '<p class="note" id="missing-more">1 more unresolved requests are not listed' "$dom" ||
    fail "the missing list does not say that 1 request is not listed"
grep -q "$long" "$dom" && fail "the 300-byte name is on the page"
# Events: the retirement and the publishes, with who.
# (the fixture's five and the farm's version 2 PSDB)
[ "$(grep -o '<tr class="event-row" data-event="publish">' "$dom" | wc -l)" -eq 6 ] || fail "publish events"
grep -q '<tr class="event-row" data-event="retire"><td>[^<]*</td><td>retire</td><td>ci-publisher</td>' "$dom" ||
    fail "the retirement and who did it"

# The farm: jobs by state, the held job with its last error as text, both workers, the cell the
# farm filled and who built it.
for sn in queued:0 leased:0 done:1 held:1; do
    grep -qF "<li class=\"${sn%:*}\" data-state=\"${sn%:*}\" data-count=\"${sn#*:}\">" "$dom" ||
        fail "farm: $sn jobs is not on the page"
done
grep -qE "<tr class=\"farm-failure\" data-job=\"$farm_held_job\" data-state=\"held\"><td class=\"num\">$farm_held_job</td><td>held</td><td>Alpha</td><td>2.0.0.0</td><td>farm-gfx</td><td>5</td><td class=\"num\">3</td><td class=\"why\">attempt 3: &lt;b&gt;vkCreate&lt;/b&gt; failed</td>" "$dom" ||
    fail "farm: the held job and its last error"
grep -qE '<tr class="farm-worker" data-worker="farm-w1"><td>farm-w1</td><td>farm-gfx ABI 4</td><td>[0-9-]+ [0-9:]+ UTC</td><td class="num done">1</td><td class="num median">[0-9.]+ s</td>' "$dom" ||
    fail "farm: worker farm-w1 with 1 job done and its median"
grep -qE '<tr class="farm-worker" data-worker="farm-w2"><td>farm-w2</td><td>farm-gfx ABI 5</td><td>[^<]+</td><td class="num done">0</td><td class="num median">–</td>' "$dom" ||
    fail "farm: worker farm-w2 with none done"
grep -qE '<tr class="farm-cell" data-app="Alpha" data-family="farm-gfx"><td>Alpha</td><td>2.0.0.0</td><td>farm-gfx</td><td class="num">4</td><td class="num">1</td><td class="num">#[0-9]+</td><td>farm-w1</td>' "$dom" ||
    fail "farm: the cell Alpha 2.0.0.0 x farm-gfx/4 built by farm-w1"
[ "$(grep -o '<tr class="farm-cell"' "$dom" | wc -l)" -eq 1 ] || fail "farm: only the farm-built cell is listed"

chrome /dev/null "$work/shot.log" "$url/" --window-size=1280,2200 --screenshot="$shots/dashboard.png"
[ -s "$shots/dashboard.png" ] || fail "no screenshot"
chrome /dev/null "$work/shot-phone.log" "$url/" --window-size=390,2400 --screenshot="$shots/dashboard-phone.png"
[ -s "$shots/dashboard-phone.png" ] || fail "no phone-sized screenshot"
stop

# Readers need a token: the page asks for one and shows no data.
start --readers-need-token
chrome "$work/dom-token.html" "$work/chrome-token.log" "$url/"
grep -q 'data-state="token"' "$work/dom-token.html" || fail "token case: the page is not asking for a token"
grep -q '<form id="token-form">' "$work/dom-token.html" || fail "token case: the token form is hidden"
grep -q '<main id="dashboard" hidden' "$work/dom-token.html" || fail "token case: data is shown"
grep -q 'missing-row' "$work/dom-token.html" && fail "token case: rows were drawn without a token"
grep -q '<ul id="errors" data-count="0" hidden' "$work/dom-token.html" || fail "token case: page errors"
# The 401s the page meets are its own answers, not console errors of its script; chromium logs
# failed fetches as "Failed to load resource", which is the expected 401 here.
grep -E ':CONSOLE' "$work/chrome-token.log" | grep -v 'status of 401' >&2 && fail "token case: console messages"
stop
echo "dashboard_test: the page shows coverage, missing coverage, downloads and events; token prompt; screenshots in $shots"
