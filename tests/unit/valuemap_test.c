/* valuemap_test.c - the byte ranges of a PSDB that hold each value: read back, they are exactly
 * the value's bytes, whatever its size (in the cell, spilling to one or many overflow pages);
 * damaged files are refused without reading outside a page. The 32-byte key fields of every
 * b-tree, and the version 2 map built on both: decoded here independently of the client, its
 * recipe gives back the file byte for byte and it stores each key once. */
#include "testutil.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>
#include <zlib.h>

#include "common/buf.h"
#include "common/hash.h"
#include "format/valuemap.h"
#include "format/valuemap_walk.h"

static const size_t k_sizes[] = {1,    17,   400,  1000, 3000,  4061,   4062,
                                 4095, 5000, 8188, 8189, 65536, 200000, 1u << 20};
#define NUM_VALUES (sizeof(k_sizes) / sizeof(k_sizes[0]))

typedef struct seen {
    int fd;
    size_t n;
    uint8_t sha[NUM_VALUES][32];
    int matched[NUM_VALUES];
} seen;

static int on_value(const uint8_t sha256[32], uint64_t size, const psdb__byte_range *r, size_t nr,
                    void *ctx)
{
    seen *s = ctx;
    uint8_t *buf = malloc(size ? size : 1), got[32];
    uint64_t at = 0;
    ck_assert_ptr_nonnull(buf);
    for (size_t i = 0; i < nr; i++) {
        ck_assert_uint_le(at + r[i].length, size);
        ck_assert_int_eq(pread(s->fd, buf + at, r[i].length, (off_t)r[i].offset),
                         (ssize_t)r[i].length);
        at += r[i].length;
    }
    ck_assert_uint_eq(at, size);
    psdb__sha256(buf, size, got);
    free(buf);
    ck_assert_msg(memcmp(got, sha256, 32) == 0, "value of %llu bytes: ranges do not hold it",
                  (unsigned long long)size);
    for (size_t i = 0; i < NUM_VALUES; i++)
        if (memcmp(s->sha[i], sha256, 32) == 0)
            s->matched[i]++;
    s->n++;
    return 0;
}

static char *write_psdb(const char *dir, seen *s)
{
    char *path = tu_path(dir, "v.psdb");
    psdb_app_identity id = {.desc = {.name = "Map", .version = 1}};
    psdb_target t = {.family = "contoso-gfx9", .abi_version = 3};
    psdb_writer *w = NULL;
    ck_assert_hr(psdb_writer_create(path, &id, &t, &w), PSDB_S_OK);
    unsigned x = 12345;
    for (size_t i = 0; i < NUM_VALUES; i++) {
        uint8_t *buf = malloc(k_sizes[i]);
        for (size_t j = 0; j < k_sizes[i]; j++) {
            x = x * 1103515245u + 12345u;
            buf[j] = (uint8_t)(x >> 16);
        }
        psdb__sha256(buf, k_sizes[i], s->sha[i]);
        char key[32];
        snprintf(key, sizeof(key), "k%02zu", i);
        ck_assert_hr(
            psdb_writer_put_value(w, key, strlen(key), PSDB_VALUE_OBJECT_CODE, buf, k_sizes[i]),
            PSDB_S_OK);
        free(buf);
    }
    ck_assert_hr(psdb_writer_finish(w), PSDB_S_OK);
    psdb_writer_release(w);
    return path;
}

START_TEST(test_valuemap__ranges_hold_exactly_each_value_of_any_size)
{
    char *dir = tu_mkdtemp();
    seen s = {0};
    char *path = write_psdb(dir, &s);
    s.fd = open(path, O_RDONLY);
    ck_assert_int_ge(s.fd, 0);
    ck_assert_hr(psdb__value_map_foreach(path, on_value, &s), PSDB_S_OK);
    ck_assert_uint_eq(s.n, NUM_VALUES);
    for (size_t i = 0; i < NUM_VALUES; i++)
        ck_assert_msg(s.matched[i] == 1, "value of %zu bytes seen %d times", k_sizes[i],
                      s.matched[i]);
    close(s.fd);
    free(path);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

typedef struct digest_seen {
    const seen *want;
    int matched[NUM_VALUES];
    size_t n, stop_after;
} digest_seen;

static int on_digest(const uint8_t sha256[32], void *ctx)
{
    digest_seen *d = ctx;
    d->n++;
    for (size_t i = 0; i < NUM_VALUES; i++)
        if (memcmp(d->want->sha[i], sha256, 32) == 0)
            d->matched[i]++;
    return d->stop_after && d->n == d->stop_after;
}

START_TEST(test_valuemap__digest_index_names_every_value_once)
{
    char *dir = tu_mkdtemp();
    seen s = {0};
    char *path = write_psdb(dir, &s);
    digest_seen d = {.want = &s};
    ck_assert_hr(psdb__value_digests_foreach(path, on_digest, &d), PSDB_S_OK);
    ck_assert_uint_eq(d.n, NUM_VALUES);
    for (size_t i = 0; i < NUM_VALUES; i++)
        ck_assert_msg(d.matched[i] == 1, "digest of the %zu-byte value seen %d times", k_sizes[i],
                      d.matched[i]);
    digest_seen stop = {.want = &s, .stop_after = 3};
    ck_assert_hr(psdb__value_digests_foreach(path, on_digest, &stop), PSDB_S_FALSE);
    ck_assert_uint_eq(stop.n, 3);
    /* Not a PSDB: an SQLite file of another schema, and bytes that are no database at all. */
    char *other = tu_path(dir, "other.db");
    sqlite3 *db = NULL;
    ck_assert_int_eq(sqlite3_open(other, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db,
                                  "CREATE TABLE blobs(id INTEGER PRIMARY KEY, sha256 BLOB);"
                                  "INSERT INTO blobs(sha256) VALUES (x'00');",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    digest_seen none = {.want = &s};
    ck_assert(PSDB_FAILED(psdb__value_digests_foreach(other, on_digest, &none)));
    ck_assert_int_eq(tu_write_file(other, "not a database at all, just text", 32), 0);
    ck_assert(PSDB_FAILED(psdb__value_digests_foreach(other, on_digest, &none)));
    ck_assert_uint_eq(none.n, 0);
    ck_assert_hr(psdb__value_digests_foreach(NULL, on_digest, &none), PSDB_E_INVALIDARG);
    free(other);
    free(path);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

static int count_only(const uint8_t sha256[32], uint64_t size, const psdb__byte_range *r, size_t nr,
                      void *ctx)
{
    (void)sha256;
    (void)size;
    (void)r;
    (void)nr;
    (*(size_t *)ctx)++;
    return 0;
}

START_TEST(test_valuemap__damaged_files_refused_never_read_out_of_bounds)
{
    char *dir = tu_mkdtemp();
    seen s = {0};
    char *path = write_psdb(dir, &s);
    size_t len = 0;
    uint8_t *orig = (uint8_t *)tu_read_file(path, &len);
    ck_assert_ptr_nonnull(orig);
    char *bad = tu_path(dir, "bad.psdb");
    /* Every single byte of the first pages flipped, and the file cut at page boundaries: each
     * walk ends in S_OK or CACHE_CORRUPT (ASan checks the reads), never anything else. */
    size_t limit = len < 3 * 4096 ? len : 3 * 4096;
    for (size_t i = 0; i < limit; i += 29) {
        orig[i] ^= 0xff;
        ck_assert_int_eq(tu_write_file(bad, orig, len), 0);
        orig[i] ^= 0xff;
        size_t n = 0;
        psdb_hr hr = psdb__value_map_foreach(bad, count_only, &n);
        ck_assert_msg(hr == PSDB_S_OK || hr == PSDB_E_CACHE_CORRUPT, "flip at %zu: %s", i,
                      psdb_hr_str(hr));
    }
    for (size_t cut = 0; cut < len; cut += 4096 * 3) {
        ck_assert_int_eq(tu_write_file(bad, orig, cut), 0);
        size_t n = 0;
        psdb_hr hr = psdb__value_map_foreach(bad, count_only, &n);
        ck_assert_msg(hr == PSDB_E_CACHE_CORRUPT, "cut at %zu: %s", cut, psdb_hr_str(hr));
    }
    ck_assert_hr(psdb__value_map_foreach(NULL, count_only, NULL), PSDB_E_INVALIDARG);
    free(orig);
    free(bad);
    free(path);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

/* ---- 32-byte keys and the version 2 map ------------------------------------------------------ */

#define NUM_GAME 300 /* values of a game-like PSDB: 32-byte value and group keys */

/* A PSDB shaped like a compiled game: 32-byte value keys (three types each), 32-byte group keys
 * of two or three members each, values of a few sizes. variant changes every 10th value. */
static char *write_game(const char *dir, const char *name, int variant)
{
    char *path = tu_path(dir, name);
    psdb_app_identity id = {.desc = {.name = "Game", .version = 1}};
    psdb_target t = {.family = "contoso-gfx9", .abi_version = 3};
    psdb_writer *w = NULL;
    ck_assert_hr(psdb_writer_create(path, &id, &t, &w), PSDB_S_OK);
    uint8_t keys[NUM_GAME][32], buf[6000];
    for (size_t i = 0; i < NUM_GAME; i++) {
        uint8_t seed[8] = {(uint8_t)i, (uint8_t)(i >> 8), 'k'};
        psdb__sha256(seed, sizeof(seed), keys[i]);
        for (uint32_t type = 0; type < 3; type++) {
            size_t size = 40 + (i * 37 + type * 1500) % 5900;
            unsigned x = (unsigned)(i * 3 + type) * 2654435761u + (variant && i % 10 == 0);
            for (size_t j = 0; j < size; j++) {
                x = x * 1103515245u + 12345u;
                buf[j] = (uint8_t)(x >> 16);
            }
            ck_assert_hr(psdb_writer_put_value(w, keys[i], 32, type, buf, size), PSDB_S_OK);
        }
    }
    for (size_t g = 0; g + 3 <= NUM_GAME; g += 3) {
        uint8_t gkey[32], seed[8] = {(uint8_t)g, (uint8_t)(g >> 8), 'g'};
        psdb__sha256(seed, sizeof(seed), gkey);
        psdb_value_ref refs[3] = {{keys[g], 32}, {keys[g + 1], 32}, {keys[g + 2], 32}};
        ck_assert_hr(psdb_writer_put_group(w, gkey, 32, 1, 2 + (uint32_t)(g % 2), refs), PSDB_S_OK);
    }
    ck_assert_hr(psdb_writer_finish(w), PSDB_S_OK);
    psdb_writer_release(w);
    return path;
}

typedef struct key_seen {
    const uint8_t *file;
    size_t len, n;
    uint64_t last_end_in_tree;
} key_seen;

static int on_key(uint64_t offset, const uint8_t key[32], void *ctx)
{
    key_seen *k = ctx;
    ck_assert_uint_le(offset + 32, k->len);
    ck_assert_msg(memcmp(k->file + offset, key, 32) == 0, "key at %llu is not the file's bytes",
                  (unsigned long long)offset);
    k->n++;
    return 0;
}

START_TEST(test_valuemap__key_walk_finds_every_32_byte_key_of_every_tree)
{
    char *dir = tu_mkdtemp();
    char *path = write_game(dir, "g.psdb", 0);
    key_seen k = {0};
    k.file = (const uint8_t *)tu_read_file(path, &k.len);
    ck_assert_hr(psdb__value_map_keys_foreach(path, on_key, &k), PSDB_S_OK);
    /* Each blob digest twice (row, unique index), each value key once per type (value_entries),
     * each group key once (value_groups) plus once per member with each member's value key
     * (group_members), the content digest once; interior index cells repeat some. */
    size_t members = 0, groups = 0;
    for (size_t g = 0; g + 3 <= NUM_GAME; g += 3, groups++)
        members += 2 + g % 2;
    size_t at_least = 2 * 3 * NUM_GAME + 3 * NUM_GAME + groups + 2 * members + 1;
    ck_assert_msg(k.n >= at_least, "%zu keys found, %zu expected at least", k.n, at_least);
    ck_assert_hr(psdb__value_map_keys_foreach(NULL, on_key, &k), PSDB_E_INVALIDARG);
    free((void *)k.file);
    free(path);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

static uint8_t *inflate_all(const uint8_t *p, size_t n, size_t *out_len)
{
    size_t cap = 1 << 16, len = 0;
    uint8_t *out = malloc(cap);
    z_stream z = {0};
    ck_assert_int_eq(inflateInit(&z), Z_OK);
    z.next_in = (Bytef *)p;
    z.avail_in = (uInt)n;
    int zr = Z_OK;
    while (zr != Z_STREAM_END) {
        if (len == cap)
            out = realloc(out, cap *= 2);
        z.next_out = out + len;
        z.avail_out = (uInt)(cap - len);
        zr = inflate(&z, Z_NO_FLUSH);
        ck_assert_msg(zr == Z_OK || zr == Z_STREAM_END, "inflate: %d", zr);
        len = cap - z.avail_out;
    }
    ck_assert_uint_eq(z.avail_in, 0);
    inflateEnd(&z);
    *out_len = len;
    return out;
}

static uint64_t leb(const uint8_t *p, size_t n, size_t *pos)
{
    uint64_t v = 0;
    for (unsigned shift = 0;; shift += 7) {
        ck_assert_uint_lt(*pos, n);
        uint8_t b = p[(*pos)++];
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
}

static uint64_t unzz(uint64_t v)
{
    return (v >> 1) ^ (0 - (v & 1));
}

typedef struct value_bytes {
    const uint8_t *file;
    uint8_t **data;
    uint64_t *size;
    size_t n;
} value_bytes;

static int on_value_bytes(const uint8_t sha256[32], uint64_t size, const psdb__byte_range *r,
                          size_t nr, void *ctx)
{
    value_bytes *v = ctx;
    (void)sha256;
    v->data = realloc(v->data, (v->n + 1) * sizeof(*v->data));
    v->size = realloc(v->size, (v->n + 1) * sizeof(*v->size));
    v->data[v->n] = malloc(size);
    v->size[v->n] = size;
    uint64_t at = 0;
    for (size_t i = 0; i < nr; i++) {
        memcpy(v->data[v->n] + at, v->file + r[i].offset, r[i].length);
        at += r[i].length;
    }
    v->n++;
    return 0;
}

START_TEST(test_valuemap__v2_recipe_rebuilds_the_file_and_stores_each_key_once)
{
    char *dir = tu_mkdtemp();
    char *path = write_game(dir, "g.psdb", 0), *m1 = tu_path(dir, "g.vm1"),
         *m2 = tu_path(dir, "g.vm2"), *m2b = tu_path(dir, "g.vm2b");
    size_t len = 0, n1 = 0, n2 = 0, n2b = 0;
    const uint8_t *file = (const uint8_t *)tu_read_file(path, &len);
    ck_assert_hr(psdb_value_map_write_version(path, 1, m1), PSDB_S_OK);
    ck_assert_hr(psdb_value_map_write_version(path, 2, m2), PSDB_S_OK);
    ck_assert_hr(psdb_value_map_write_version(path, 2, m2b), PSDB_S_OK);
    ck_assert_hr(psdb_value_map_write_version(path, 3, m2b), PSDB_E_INVALIDARG);
    uint8_t *v1 = (uint8_t *)tu_read_file(m1, &n1), *map = (uint8_t *)tu_read_file(m2, &n2),
            *again = (uint8_t *)tu_read_file(m2b, &n2b);
    ck_assert_msg(n2 == n2b && memcmp(map, again, n2) == 0, "the same file gave another map");
    /* The keys were most of version 1's bytes: version 2 stores them once. */
    ck_assert_msg(n2 * 2 < n1, "version 2 is %zu bytes, version 1 %zu", n2, n1);
    ck_assert_int_eq(memcmp(map, PSDB__VMAP_MAGIC, 8), 0);
    ck_assert_uint_eq(psdb__le32(map + 8), 2);
    ck_assert_uint_eq(psdb__le64(map + 16), len);
    uint64_t nv = psdb__le64(map + 56), nkeys = psdb__le64(map + 64);
    uint64_t nentries = psdb__le64(map + 72), skel = psdb__le64(map + 80);
    uint64_t vst = psdb__le64(map + 88), rst = psdb__le64(map + 96), sst = psdb__le64(map + 104);
    ck_assert_uint_eq(PSDB__VMAP2_HEADER_SIZE + nkeys * 32 + vst + rst + sst, n2);
    const uint8_t *keys = map + PSDB__VMAP2_HEADER_SIZE;
    for (uint64_t i = 1; i < nkeys; i++)
        for (uint64_t j = 0; j < i; j++)
            ck_assert_msg(memcmp(keys + i * 32, keys + j * 32, 32) != 0, "key %llu stored twice",
                          (unsigned long long)i);
    /* The values: each digest a key of the table, in rowid order with the walk's sizes. */
    value_bytes vb = {.file = file};
    ck_assert_hr(psdb__value_map_foreach(path, on_value_bytes, &vb), PSDB_S_OK);
    ck_assert_uint_eq(vb.n, nv);
    size_t vlen = 0, rlen = 0, slen = 0, pos = 0;
    uint8_t *vals = inflate_all(keys + nkeys * 32, vst, &vlen);
    uint64_t id = 0;
    for (uint64_t i = 0; i < nv; i++) {
        uint8_t sha[32];
        id += unzz(leb(vals, vlen, &pos));
        ck_assert_uint_lt(id, nkeys);
        ck_assert_uint_eq(leb(vals, vlen, &pos), vb.size[i]);
        psdb__sha256(vb.data[i], vb.size[i], sha);
        ck_assert_int_eq(memcmp(keys + id * 32, sha, 32), 0);
    }
    ck_assert_uint_eq(pos, vlen);
    /* The recipe, played: the file again. */
    uint8_t *rec = inflate_all(keys + nkeys * 32 + vst, rst, &rlen);
    uint8_t *sk = inflate_all(keys + nkeys * 32 + vst + rst, sst, &slen);
    ck_assert_uint_eq(slen, skel);
    uint8_t *rebuilt = malloc(len);
    size_t at = 0, spos = 0, next_key = 0, key_bytes = 0;
    uint64_t value = 0;
    pos = 0;
    for (uint64_t i = 0; i < nentries; i++) {
        uint64_t x = leb(rec, rlen, &pos), arg = x >> 2;
        switch (x & 3) {
        case PSDB__VMAP2_TAG_SKELETON:
            ck_assert_uint_le(at + arg, len);
            ck_assert_uint_le(spos + arg, slen);
            memcpy(rebuilt + at, sk + spos, arg);
            spos += arg;
            at += arg;
            break;
        case PSDB__VMAP2_TAG_KEY: {
            uint64_t k = arg == 0 ? next_key++ : arg - 1;
            ck_assert_uint_lt(k, next_key);
            ck_assert_uint_le(at + 32, len);
            memcpy(rebuilt + at, keys + k * 32, 32);
            at += 32;
            key_bytes += 32;
            break;
        }
        case PSDB__VMAP2_TAG_VALUE: {
            value += unzz(arg);
            uint64_t in = leb(rec, rlen, &pos), n = leb(rec, rlen, &pos);
            ck_assert_uint_lt(value, nv);
            ck_assert_uint_le(in + n, vb.size[value]);
            ck_assert_uint_le(at + n, len);
            memcpy(rebuilt + at, vb.data[value] + in, n);
            at += n;
            break;
        }
        default:
            ck_abort_msg("recipe entry %llu has tag 3", (unsigned long long)i);
        }
    }
    ck_assert_uint_eq(pos, rlen);
    ck_assert_uint_eq(at, len);
    ck_assert_uint_eq(spos, slen);
    ck_assert_uint_eq(next_key, nkeys);
    ck_assert_msg(memcmp(rebuilt, file, len) == 0, "the recipe does not give the file back");
    /* Every key reference replaced 32 bytes of the skeleton: far more than the distinct keys. */
    ck_assert_uint_ge(key_bytes, 2 * nkeys * 32);
    for (size_t i = 0; i < vb.n; i++)
        free(vb.data[i]);
    free(vb.data);
    free(vb.size);
    free(rebuilt);
    free(rec);
    free(sk);
    free(vals);
    free(v1);
    free(map);
    free(again);
    free((void *)file);
    free(m1);
    free(m2);
    free(m2b);
    free(path);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

/* psdb_value_map_read_info reads the header every version has, as its writers put it, and refuses
 * what is not a map's header: too short, another magic, a reserved field not zero. */
START_TEST(test_valuemap__read_info_reads_every_version_and_refuses_other_headers)
{
    char *dir = tu_mkdtemp();
    char *path = write_game(dir, "g.psdb", 0), *map = tu_path(dir, "g.vm"),
         *bad = tu_path(dir, "bad.vm");
    size_t len = 0, n = 0;
    uint8_t *file = (uint8_t *)tu_read_file(path, &len), sha[32];
    psdb__sha256(file, len, sha);
    psdb_value_map_info info;
    for (uint32_t v = 1; v <= 2; v++) {
        ck_assert_hr(psdb_value_map_write_version(path, v, map), PSDB_S_OK);
        ck_assert_hr(psdb_value_map_read_info(map, &info), PSDB_S_OK);
        ck_assert_uint_eq(info.version, v);
        ck_assert_uint_eq(info.psdb_size, len);
        ck_assert_mem_eq(info.psdb_sha256, sha, 32);
    }
    uint8_t *m = (uint8_t *)tu_read_file(map, &n);
    static const struct {
        size_t at, cut; /* a byte flipped at `at` (cut 0), or the map cut to `cut` bytes */
        const char *says;
    } cases[] = {{0, 0, "no PSDBVMAP magic"},
                 {13, 0, "reserved field not zero"},
                 {0, 55, "shorter than its header"},
                 {0, 1, "shorter than its header"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (!cases[i].cut)
            m[cases[i].at] ^= 0x40;
        ck_assert_int_eq(tu_write_file(bad, m, cases[i].cut ? cases[i].cut : n), 0);
        if (!cases[i].cut)
            m[cases[i].at] ^= 0x40;
        ck_assert_hr(psdb_value_map_read_info(bad, &info), PSDB_E_CACHE_CORRUPT);
        ck_assert_msg(strstr(psdb_error_last(), cases[i].says) && strstr(psdb_error_last(), bad),
                      "case %zu: %s", i, psdb_error_last());
        ck_assert_uint_eq(info.version, 0);
        ck_assert_uint_eq(info.psdb_size, 0);
    }
    ck_assert_hr(psdb_value_map_read_info(dir, &info), PSDB_E_ACCESS); /* not a regular file */
    tu_rmtree(dir);
    free(path);
    free(map);
    free(bad);
    free(m);
    free(file);
    free(dir);
}
END_TEST

START_TEST(test_valuemap__v2_refuses_damaged_files)
{
    char *dir = tu_mkdtemp();
    char *path = write_game(dir, "g.psdb", 0), *bad = tu_path(dir, "bad.psdb"),
         *map = tu_path(dir, "bad.vm");
    size_t len = 0;
    uint8_t *orig = (uint8_t *)tu_read_file(path, &len);
    /* Flips in the first pages (the schema and the top of the trees) and cuts: a map or
     * CACHE_CORRUPT, never a crash or a read outside the file (ASan). */
    size_t limit = len < 4 * 4096 ? len : 4 * 4096;
    for (size_t i = 0; i < limit; i += 151) {
        orig[i] ^= 0xff;
        ck_assert_int_eq(tu_write_file(bad, orig, len), 0);
        orig[i] ^= 0xff;
        psdb_hr hr = psdb_value_map_write_version(bad, 2, map);
        ck_assert_msg(hr == PSDB_S_OK || hr == PSDB_E_CACHE_CORRUPT, "flip at %zu: %s", i,
                      psdb_hr_str(hr));
    }
    for (size_t cut = 0; cut < len; cut += 4096 * 9) {
        ck_assert_int_eq(tu_write_file(bad, orig, cut), 0);
        psdb_hr hr = psdb_value_map_write_version(bad, 2, map);
        ck_assert_msg(hr == PSDB_E_CACHE_CORRUPT, "cut at %zu: %s", cut, psdb_hr_str(hr));
    }
    free(orig);
    free(bad);
    free(map);
    free(path);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

/* What a stale attempt or someone else left at <out>.tmp, and a FIFO or a directory given as the
 * PSDB: a link is removed, never written through (its target stays as it was, a dangling one is
 * not created), a FIFO refused at once, another user's file refused and left alone. */
START_TEST(test_valuemap__write_never_follows_or_blocks_on_what_is_planted)
{
    char *dir = tu_mkdtemp();
    seen sn = {0};
    char *path = write_psdb(dir, &sn), *out = tu_path(dir, "v.map"),
         *tmp = tu_path(dir, "v.map.tmp");
    char *outside = tu_path(dir, "outside"), *dangling = tu_path(dir, "dangling");
    char *clean = tu_path(dir, "clean.map");
    for (uint32_t version = 1; version <= 2; version++) {
        size_t want_len = 0, got_len = 0;
        ck_assert_hr(psdb_value_map_write_version(path, version, clean), PSDB_S_OK);
        char *want = tu_read_file(clean, &want_len);
        /* A link to a file, then a dangling one: the map is written, the targets left alone. */
        ck_assert_int_eq(tu_write_file(outside, "outside", 7), 0);
        ck_assert_int_eq(symlink(outside, tmp), 0);
        ck_assert_hr(psdb_value_map_write_version(path, version, out), PSDB_S_OK);
        char *kept = tu_read_file(outside, &got_len);
        ck_assert(kept && got_len == 7 && memcmp(kept, "outside", 7) == 0);
        free(kept);
        unlink(out);
        ck_assert_int_eq(symlink(dangling, tmp), 0);
        ck_assert_hr(psdb_value_map_write_version(path, version, out), PSDB_S_OK);
        ck_assert_int_ne(access(dangling, F_OK), 0);
        char *got = tu_read_file(out, &got_len);
        ck_assert(got && got_len == want_len && memcmp(got, want, want_len) == 0);
        free(got);
        struct stat st;
        ck_assert_int_eq(lstat(out, &st), 0);
        ck_assert(S_ISREG(st.st_mode));
        ck_assert_int_ne(lstat(tmp, &st), 0);
        /* A FIFO at the .tmp: refused, not waited on, left there. */
        ck_assert_int_eq(mkfifo(tmp, 0644), 0);
        ck_assert_hr(psdb_value_map_write_version(path, version, out), PSDB_E_ACCESS);
        ck_assert_ptr_nonnull(strstr(psdb_error_last(), "FIFO"));
        ck_assert_int_eq(lstat(tmp, &st), 0);
        ck_assert(S_ISFIFO(st.st_mode));
        unlink(tmp);
        /* Another user's file there (root only: CI runs as root). */
        if (geteuid() == 0) {
            ck_assert_int_eq(tu_write_file(tmp, "theirs", 6), 0);
            ck_assert_int_eq(chown(tmp, 54321, 54321), 0);
            ck_assert_hr(psdb_value_map_write_version(path, version, out), PSDB_E_ACCESS);
            ck_assert_ptr_nonnull(strstr(psdb_error_last(), "owned by uid 54321"));
            got = tu_read_file(tmp, &got_len);
            ck_assert(got && got_len == 6 && memcmp(got, "theirs", 6) == 0);
            free(got);
            unlink(tmp);
        }
        /* The PSDB path a FIFO or a directory: refused at once. */
        char *fifo = tu_path(dir, "fifo.psdb");
        ck_assert_int_eq(mkfifo(fifo, 0644), 0);
        ck_assert_hr(psdb_value_map_write_version(fifo, version, out), PSDB_E_ACCESS);
        ck_assert_ptr_nonnull(strstr(psdb_error_last(), "FIFO"));
        ck_assert_hr(psdb_value_map_write_version(dir, version, out), PSDB_E_ACCESS);
        unlink(fifo);
        free(fifo);
        free(want);
        unlink(outside);
    }
    free(clean);
    free(outside);
    free(dangling);
    free(tmp);
    free(out);
    free(path);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

/* A write the file system refuses for want of room is PSDB_E_DISK_FULL, as everywhere in psdb:
 * a file-size limit (EFBIG; ENOSPC and EDQUOT map the same way, common/status_map.h), with the
 * last error naming the file that could not be written. In a child, whose limit and SIGXFSZ
 * stay its own. */
START_TEST(test_valuemap__a_write_over_the_size_limit_is_disk_full_and_names_the_file)
{
    char *dir = tu_mkdtemp();
    seen sn = {0};
    char *path = write_psdb(dir, &sn), *out = tu_path(dir, "v.map");
    for (uint32_t version = 1; version <= 2; version++) {
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            struct rlimit rl = {512, 512};
            signal(SIGXFSZ, SIG_IGN);
            if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
                _exit(2);
            psdb_hr hr = psdb_value_map_write_version(path, version, out);
            if (hr != PSDB_E_DISK_FULL)
                _exit(3);
            if (!strstr(psdb_error_last(), "v.map.tmp") || !strstr(psdb_error_last(), "large"))
                _exit(4);
            _exit(0);
        }
        int status = 0;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                      "version %u: exit %d (3: not PSDB_E_DISK_FULL, 4: the file not named)",
                      version, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        struct stat st;
        ck_assert_int_ne(lstat(out, &st), 0); /* nothing half-written is left as the map */
    }
    free(out);
    free(path);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("valuemap");
    TCase *tc = tcase_create("valuemap");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_valuemap__ranges_hold_exactly_each_value_of_any_size);
    tcase_add_test(tc, test_valuemap__damaged_files_refused_never_read_out_of_bounds);
    tcase_add_test(tc, test_valuemap__digest_index_names_every_value_once);
    tcase_add_test(tc, test_valuemap__key_walk_finds_every_32_byte_key_of_every_tree);
    tcase_add_test(tc, test_valuemap__read_info_reads_every_version_and_refuses_other_headers);
    tcase_add_test(tc, test_valuemap__v2_recipe_rebuilds_the_file_and_stores_each_key_once);
    tcase_add_test(tc, test_valuemap__v2_refuses_damaged_files);
    tcase_add_test(tc, test_valuemap__write_never_follows_or_blocks_on_what_is_planted);
    tcase_add_test(tc, test_valuemap__a_write_over_the_size_limit_is_disk_full_and_names_the_file);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
