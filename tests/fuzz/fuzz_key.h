/* fuzz_key.h - the fixed Ed25519 key pair of the statement and manifest fuzz targets. It signs the
 * valid seeds of their corpora and nothing else: it is a test fixture, never a publisher key. */
#ifndef PSDB_FUZZ_KEY_H
#define PSDB_FUZZ_KEY_H

static const char psdb_fuzz_private_pem[] =
    "-----BEGIN PRIVATE KEY-----\n"
    "MC4CAQAwBQYDK2VwBCIEIDC6feX4WrqCIex1IeiwY5M5LL59gflUCBo20F2Htj1Z\n"
    "-----END PRIVATE KEY-----\n";

static const char psdb_fuzz_public_pem[] =
    "-----BEGIN PUBLIC KEY-----\n"
    "MCowBQYDK2VwAyEAtEspg22Zbs+qBcTJvnlgwyFr9dPZ7hkGClcbhBf//Ys=\n"
    "-----END PUBLIC KEY-----\n";

#endif
