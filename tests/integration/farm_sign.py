#!/usr/bin/env python3
"""farm_sign.py - signs the statements of schema/STATEMENT.md for shell tests that publish what the
psdb tool cannot yet (SODBs, version 2 PSDBs): prints the key id, or a statement's signature.

    farm_sign.py key-id KEY
    farm_sign.py sodb KEY FILE.sodb INSPECT.json SERIAL
    farm_sign.py psdb-v2 KEY FILE.psdb INSPECT.json SERIAL SODB_SHA256

INSPECT.json is `psdb inspect --json FILE`'s answer (the identity and target). Needs Python's
cryptography package."""
import base64
import hashlib
import json
import struct
import sys
import uuid

from cryptography.hazmat.primitives import serialization


def version(v):
    parts = [int(p) for p in str(v).split(".")]
    if len(parts) == 1:
        return parts[0]
    parts += [0] * (4 - len(parts))
    return sum(p << (48 - 16 * i) for i, p in enumerate(parts))


def text(s):
    b = s.encode()
    return struct.pack("<I", len(b)) + b


def identity(app):
    return (text(app["exe_filename"]) + text(app["name"]) + struct.pack("<Q", version(app["version"]))
            + text(app["engine_name"]) + struct.pack("<Q", version(app["engine_version"]))
            + uuid.UUID(app["app_id"]).bytes)


def digest(path):
    data = open(path, "rb").read()
    return hashlib.sha256(data).digest(), len(data)


def main(argv):
    key = serialization.load_pem_private_key(open(argv[2], "rb").read(), None)
    if argv[1] == "key-id":
        raw = key.public_key().public_bytes(serialization.Encoding.Raw,
                                            serialization.PublicFormat.Raw)
        print(hashlib.sha256(raw).hexdigest())
        return 0
    sha, size = digest(argv[3])
    info = json.load(open(argv[4]))
    serial = struct.pack("<Q", int(argv[5]))
    if argv[1] == "sodb":
        msg = (b"psdb-sodb-statement-v1\0" + struct.pack("<I", 1) + sha + struct.pack("<Q", size)
               + identity(info["app"]) + serial)
    elif argv[1] == "psdb-v2":
        t = info["target"]
        msg = (b"psdb-statement-v2\0" + struct.pack("<I", 2) + sha + struct.pack("<Q", size)
               + identity(info["app"]) + text(t["family"])
               + struct.pack("<QQQ", int(t["abi_version"]), version(t["compiler_version"]),
                             version(t["profile_version"]))
               + serial + bytes.fromhex(argv[6]))
    else:
        print("farm_sign.py: unknown kind %r" % argv[1], file=sys.stderr)
        return 2
    print(base64.b64encode(key.sign(msg)).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
