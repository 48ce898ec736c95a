#!/usr/bin/env python3
"""Writes the seed corpora of statement_fuzz and manifest_fuzz (tests/fuzz/corpus/statement and
tests/fuzz/corpus/manifest): valid inputs signed with the fixed key of fuzz_key.h, and near-valid
ones that each break one rule of schema/STATEMENT.md or of the manifest (schema/HTTP.md).

The seeds are checked in; run this by hand only to change them (needs python3-cryptography):
    tests/fuzz/make_signed_seeds.py tests/fuzz/corpus
"""
import base64
import hashlib
import json
import os
import re
import struct
import sys

from cryptography.hazmat.primitives.serialization import load_pem_private_key

HERE = os.path.dirname(os.path.abspath(__file__))


def fuzz_key():
    # The private key is read from fuzz_key.h so the two can never disagree.
    text = open(os.path.join(HERE, "fuzz_key.h")).read()
    block = text.split("psdb_fuzz_private_pem[] =", 1)[1].split(";", 1)[0]
    pem = "".join(re.findall(r'"([^"]*)"', block)).replace("\\n", "\n")
    return load_pem_private_key(pem.encode(), None)


def s(b):
    return struct.pack("<I", len(b)) + b


def version(a, b, c, d):
    return a << 48 | b << 32 | c << 16 | d


def statement(st, domain=b"psdb-statement-v1\0", ver=1):
    return (domain + struct.pack("<I", ver) + st["sha256"] + struct.pack("<Q", st["size"]) +
            s(st["exe"]) + s(st["name"]) + struct.pack("<Q", st["version"]) + s(st["engine"]) +
            struct.pack("<Q", st["engine_version"]) + st["app_id"] + s(st["family"]) +
            struct.pack("<QQQQ", st["abi"], st["compiler"], st["profile"], st["serial"]))


def statement_v2(st, sodb_sha256):
    """The version 2 PSDB statement: version 1's fields under its own domain, then the SODB's digest."""
    return statement(st, domain=b"psdb-statement-v2\0", ver=2) + sodb_sha256


def sodb_statement(st):
    """The SODB statement: digest, size, the identity and the serial (no target)."""
    return (b"psdb-sodb-statement-v1\0" + struct.pack("<I", 1) + st["sha256"] +
            struct.pack("<Q", st["size"]) + s(st["exe"]) + s(st["name"]) +
            struct.pack("<Q", st["version"]) + s(st["engine"]) +
            struct.pack("<Q", st["engine_version"]) + st["app_id"] + struct.pack("<Q", st["serial"]))


def sign(key, data):
    return base64.b64encode(key.sign(data)).decode()


def key_id(key):
    raw = key.public_key().public_bytes_raw()
    return hashlib.sha256(raw).hexdigest()


BASE = {
    "sha256": hashlib.sha256(b"a psdb file").digest(),
    "size": 28672,
    "exe": b"game.exe",
    "name": b"Sample Game",
    "version": version(1, 0, 2, 0),
    "engine": b"Engine",
    "engine_version": version(5, 1, 0, 0),
    "app_id": bytes(range(1, 17)),
    "family": b"contoso-gfx9",
    "abi": 7,
    "compiler": version(2, 0, 0, 1),
    "profile": version(1, 2, 3, 4),
    "serial": 3,
}


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def statement_seeds(key, out):
    os.makedirs(out, exist_ok=True)
    st = statement(BASE)
    sig = sign(key, st)
    write(f"{out}/valid.bin", st + sig.encode())
    empty = dict(BASE, exe=b"", engine=b"", engine_version=0)
    write(f"{out}/valid_no_exe_no_engine.bin", statement(empty) + sign(key, statement(empty)).encode())
    raw = bytearray(base64.b64decode(sig))
    raw[10] ^= 0x01
    write(f"{out}/signature_bit_flipped.bin", st + base64.b64encode(bytes(raw)))
    # 64 bytes end in one byte: its second base64 digit carries 4 unused bits, set here.
    alias = sig[:85] + "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[
        ("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".index(sig[85]) | 1)] + "=="
    write(f"{out}/signature_other_spelling.bin", st + alias.encode())
    write(f"{out}/signature_no_padding.bin", st + sig[:86].encode())
    write(f"{out}/signature_trailing_newline.bin", st + sig.encode() + b"\n")
    write(f"{out}/signature_empty.bin", st)
    write(f"{out}/tampered_serial.bin", statement(dict(BASE, serial=4)) + sig.encode())
    write(f"{out}/tampered_family.bin", statement(dict(BASE, family=b"contoso-gfx8")) + sig.encode())
    write(f"{out}/empty_name.bin", statement(dict(BASE, name=b"")) + sig.encode())
    write(f"{out}/empty_family.bin", statement(dict(BASE, family=b"")) + sig.encode())
    write(f"{out}/family_over_4096.bin", statement(dict(BASE, family=b"f" * 4097)) + sig.encode())
    at_max = dict(BASE, exe=b"e" * 4096)
    write(f"{out}/exe_at_4096.bin", statement(at_max) + sign(key, statement(at_max)).encode())
    write(f"{out}/name_with_nul.bin", statement(dict(BASE, name=b"Sample\0Game")) + sig.encode())
    write(f"{out}/wrong_domain.bin", statement(BASE, domain=b"psdb-statement-v2\0") + sig.encode())
    write(f"{out}/wrong_version.bin", statement(BASE, ver=2) + sig.encode())
    write(f"{out}/truncated_in_string.bin", st[:70])
    write(f"{out}/truncated_before_serial.bin", st[:-8])
    long_len = bytearray(st)
    long_len[62:66] = struct.pack("<I", 0xFFFFFFF0)  # exe_filename length past the end
    write(f"{out}/string_length_past_end.bin", bytes(long_len) + sig.encode())
    # The farm's statements (schema/STATEMENT.md): version 2 and the SODB statement.
    sodb_sha = hashlib.sha256(b"an sodb file").digest()
    v2 = statement_v2(BASE, sodb_sha)
    write(f"{out}/v2_valid.bin", v2 + sign(key, v2).encode())
    write(f"{out}/v2_with_v1_signature.bin", v2 + sig.encode())
    write(f"{out}/v2_truncated_sodb.bin", v2[:-5])
    write(f"{out}/v2_empty_family.bin", statement_v2(dict(BASE, family=b""), sodb_sha) + sig.encode())
    so = sodb_statement(BASE)
    write(f"{out}/sodb_valid.bin", so + sign(key, so).encode())
    write(f"{out}/sodb_with_v1_signature.bin", so + sig.encode())
    write(f"{out}/sodb_empty_name.bin", sodb_statement(dict(BASE, name=b"")) + sign(key, so).encode())
    write(f"{out}/sodb_tampered_serial.bin", sodb_statement(dict(BASE, serial=9)) +
          sign(key, so).encode())


def manifest(key, st, **over):
    m = {
        "id": 3,
        "sha256": st["sha256"].hex(),
        "size": st["size"],
        "url": "/v1/blobs/" + st["sha256"].hex(),
        "app": {
            "name": st["name"].decode(),
            "exe_filename": st["exe"].decode(),
            "version": "1.0.2.0",
            "engine_name": st["engine"].decode(),
            "engine_version": "5.1.0.0",
            "app_id": "01020304-0506-0708-090a-0b0c0d0e0f10",
        },
        "target": {
            "family": st["family"].decode(),
            "abi_version": st["abi"],
            "compiler_version": "2.0.0.1",
            "profile_version": "1.2.3.4",
        },
        "serial": st["serial"],
        "created_at": "2026-11-29T20:13:33Z",
        "key_id": key_id(key),
        "signature": sign(key, statement(st)),
        "retired": False,
    }
    for k, v in over.items():
        if "." in k:
            outer, inner = k.split(".")
            if v is None:
                del m[outer][inner]
            else:
                m[outer][inner] = v
        elif v is None:
            del m[k]
        else:
            m[k] = v
    return json.dumps(m).encode() + b"\n"


def manifest_seeds(key, out):
    os.makedirs(out, exist_ok=True)
    write(f"{out}/valid.json", manifest(key, BASE))
    write(f"{out}/valid_numeric_versions.json",
          manifest(key, BASE, **{"app.version": BASE["version"], "target.profile_version":
                                 BASE["profile"], "id": "3"}))
    big = dict(BASE, abi=2**64 - 1, serial=2**63)
    write(f"{out}/valid_u64_as_strings.json",
          manifest(key, big, **{"target.abi_version": str(2**64 - 1), "serial": str(2**63)}))
    write(f"{out}/valid_app_id_without_dashes.json",
          manifest(key, BASE, **{"app.app_id": "0102030405060708090a0b0c0d0e0f10"}))
    write(f"{out}/valid_optional_null.json",
          manifest(key, dict(BASE, exe=b""), **{"app.exe_filename": None, "created_at": None}))
    write(f"{out}/signature_of_other_serial.json",
          manifest(key, BASE, signature=sign(key, statement(dict(BASE, serial=4)))))
    write(f"{out}/unknown_key_id.json", manifest(key, BASE, key_id="00" * 32))
    write(f"{out}/missing_sha256.json", manifest(key, BASE, sha256=None))
    write(f"{out}/short_sha256.json", manifest(key, BASE, sha256="ab" * 31))
    write(f"{out}/missing_target.json", manifest(key, BASE, target=None))
    write(f"{out}/negative_size.json", manifest(key, BASE, size=-1))
    write(f"{out}/size_as_float.json", manifest(key, BASE, size=1.5))
    write(f"{out}/version_component_65536.json", manifest(key, BASE, **{"app.version": "65536.0.2.0"}))
    write(f"{out}/version_five_components.json", manifest(key, BASE, **{"app.version": "1.0.2.0.0"}))
    write(f"{out}/version_component_wraps_at_2_32.json",
          manifest(key, BASE, **{"app.version": "4294967297.0.2.0"}))
    write(f"{out}/size_string_minus_after_space.json", manifest(key, BASE, size=" -1"))
    write(f"{out}/version_sign_and_spaces.json", manifest(key, BASE, **{"app.version": " +1. 0.2.0"}))
    write(f"{out}/version_two_parts.json", manifest(key, BASE, **{"app.version": "1.0"}))
    write(f"{out}/app_id_too_short.json", manifest(key, BASE, **{"app.app_id": "0102-0304"}))
    write(f"{out}/app_id_not_hex.json", manifest(key, BASE, **{"app.app_id": "zz" * 16}))
    write(f"{out}/duplicate_key.json",
          manifest(key, BASE).replace(b'"serial": 3', b'"serial": 3, "serial": 4'))
    write(f"{out}/not_an_object.json", b"[1, 2, 3]\n")
    write(f"{out}/truncated.json", manifest(key, BASE)[:200])
    write(f"{out}/nul_in_string.json", manifest(key, BASE, **{"app.name": "Sample\u0000Game"}))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "corpus")
    key = fuzz_key()
    statement_seeds(key, os.path.join(out, "statement"))
    manifest_seeds(key, os.path.join(out, "manifest"))


if __name__ == "__main__":
    main()
