#!/usr/bin/env bash
# key_files_test.sh - a --trust file (psdb install) or --key file (psdb publish) that is missing,
# empty, truncated, garbage, damaged, of another key type, or the wrong half of a key pair is
# refused with one line naming the file and what is wrong with it, before anything is fetched.
# Env: PSDB = the psdb tool.
set -euo pipefail
: "${PSDB:?set PSDB to the psdb tool}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "key_files_test: $*" >&2; exit 1; }

"$PSDB" keygen -o "$dir/k" >/dev/null
: >"$dir/empty.pub"
head -c 60 "$dir/k.pub" >"$dir/truncated.pub"
echo "not a key at all" >"$dir/garbage.pub"
sed 's/A/!/g' "$dir/k.pub" >"$dir/damaged.pub"
head -c 20000 /dev/zero | tr '\0' 'x' >"$dir/huge.pub"
# Fixed keys of other types (no openssl command line needed).
cat >"$dir/rsa.pub" <<'PEM'
-----BEGIN PUBLIC KEY-----
MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQC1axVfMff24VRG1qTYJlSlRyTF
s/DPwK17YGJjrM71uKQG+ug6YMAhoOfC0QPjB6qExW8E4Qjf8Un5YVxS3raakwzw
znT2gNiG3rdqZApFxtDcM8s4bib0HqYW2suuCMTjWuK149n6wWhwknQaDqp8Zq5G
FvD36tVvFsZiMi1piwIDAQAB
-----END PUBLIC KEY-----
PEM
cat >"$dir/x25519.pub" <<'PEM'
-----BEGIN PUBLIC KEY-----
MCowBQYDK2VuAyEA/Hv+Oo/rJqVuHFJFLA7NnbyZphqROFw+7s/mgaEkSEE=
-----END PUBLIC KEY-----
PEM
cat >"$dir/x25519.key" <<'PEM'
-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VuBCIEIDDCJse/YsZA4kvTCSnif++hiHV4UF0l+OnMEUNYaqtQ
-----END PRIVATE KEY-----
PEM

# Nothing listens on port 9: a key refusal must come before any connection is tried.
install_with() {
    "$PSDB" install --server http://127.0.0.1:9 --exe-path /games/demo/demo.exe --app Demo \
        --app-version 1.0.0.0 --target contoso-gfx9:1-10 --trust "$1" --registry "$dir/reg" 2>&1
}
expect_install() { # FILE TEXT
    local out rc=0
    out=$(install_with "$1") || rc=$?
    [ "$rc" -ne 0 ] || fail "install accepted --trust $1"
    [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || fail "--trust $1: not one line: $out"
    case "$out" in
    *"--trust $1: $2"*) ;;
    *) fail "--trust $1: expected '$2', got: $out" ;;
    esac
    case "$out" in *signature* | *resolve:*) fail "--trust $1: reported late: $out" ;; esac
}
expect_install "$dir/missing.pub" "cannot open: No such file or directory"
expect_install "$dir/empty.pub" "empty, not a key"
expect_install "$dir/truncated.pub" "truncated"
expect_install "$dir/garbage.pub" "not a PEM key"
expect_install "$dir/damaged.pub" "damaged"
expect_install "$dir/huge.pub" "larger than"
expect_install "$dir/rsa.pub" "a public RSA key; psdb keys are Ed25519"
expect_install "$dir/x25519.pub" "a public X25519 key; psdb keys are Ed25519"
expect_install "$dir/x25519.key" "a private X25519 key"
expect_install "$dir/k" "a private key where a public key is expected"
expect_install "$dir" "cannot read: Is a directory"
# The keygen .pub read back is accepted: the failure is then the unreachable server.
out=$(install_with "$dir/k.pub") && fail "install succeeded without a server"
case "$out" in *"resolve:"*) ;; *) fail "a good --trust was refused: $out" ;; esac

# publish --key: the private half is needed.
echo x >"$dir/some.psdb"
expect_publish() { # FILE TEXT
    local out rc=0
    out=$("$PSDB" publish --server http://127.0.0.1:9 --token t --key "$1" "$dir/some.psdb" 2>&1) ||
        rc=$?
    [ "$rc" -ne 0 ] || fail "publish accepted --key $1"
    case "$out" in
    *"$1: $2"*) ;;
    *) fail "--key $1: expected '$2', got: $out" ;;
    esac
}
expect_publish "$dir/k.pub" "a public key where the private key is expected"
expect_publish "$dir/missing.key" "cannot open: No such file or directory"
expect_publish "$dir/empty.pub" "empty, not a key"
expect_publish "$dir/truncated.pub" "truncated"
expect_publish "$dir/x25519.key" "a private X25519 key; psdb keys are Ed25519"
expect_publish "$dir/rsa.pub" "a public RSA key"
echo "key_files_test: ok"
