/* version_spellings.h - every example of schema/HTTP.md "Version spellings": the spellings the
 * one version parser (client/src/common/parse.c) accepts, with their values, and those it refuses.
 * Shared by the suites that check a parser against that grammar. */
#ifndef PSDB_TEST_VERSION_SPELLINGS_H
#define PSDB_TEST_VERSION_SPELLINGS_H

#include <stdint.h>

#include "psdb/status.h"

static const struct {
    const char *text;
    uint64_t value;
} version_accepted[] = {
    {"1.2.3.4", PSDB_VERSION(1, 2, 3, 4)},
    {"65535.65535.65535.65535", UINT64_MAX},
    {"1.2", PSDB_VERSION(1, 2, 0, 0)},
    {"1.2.3", PSDB_VERSION(1, 2, 3, 0)},
    {"01.002.0003.00004", PSDB_VERSION(1, 2, 3, 4)},
    {"00000000000000000001.0.0.0", PSDB_VERSION(1, 0, 0, 0)},
    {"7", 7},
    {"007", 7},
    {"0x0001000200030004", PSDB_VERSION(1, 2, 3, 4)},
    {"0XfFfF", 0xFFFF},
    {"18446744073709551615", UINT64_MAX},
    {"0.0.0.0", 0},
    {"281474976710656", PSDB_VERSION(1, 0, 0, 0)},
};
static const char *const version_refused[] = {
    "",
    "1.",
    ".1",
    "1..2",
    "1.2.3.",
    "1.2.3.4.",
    "1.2.3.4.5",
    "65536.0.0.0",
    "1.65536",
    "99999999999999999999.0.0.0",
    "4294967297.0.0.0",
    "4294967297.0.2.0",
    "-1.2.3.4",
    "+1.2.3.4",
    "1.-2.3.4",
    "1.+2.3.4",
    "-0.1.2.3",
    " 1.2.3.4",
    "1.2.3.4 ",
    "1 .2.3.4",
    "1. 2.3.4",
    "1.2.3.4\n",
    "0x1.2.3.4",
    "1.0x2.3.4",
    "1.2.3.4a",
    "a.b.c.d",
    "1,2,3,4",
    "-1",
    "+1",
    "+7",
    " 1",
    "1 ",
    "0x",
    "0x-1",
    "0x 1",
    "0x1g",
    "18446744073709551616",
    "0x10000000000000000",
    "1e3",
    " -1",
    "v1.2.3.4",
};

#endif
