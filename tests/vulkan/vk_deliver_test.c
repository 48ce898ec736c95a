/* vk_deliver_test.c - what the layer hands Mesa (client/src/vulkan/vk_deliver.c): the structural
 * check of a shipped single-file cache (vkdl_foz_check) and its setup (vkdl_mesa_setup), which
 * writes nothing a check refused and never keeps a file that is not byte for byte the PSDB's. */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "testutil.h"
#include "vulkan/psdb_vulkan.h"

static const uint8_t MAGIC[16] = {0x81, 'F', 'O', 'S', 'S', 'I', 'L', 'I',
                                  'Z',  'E', 'D', 'B', 0,   0,   0,   6};

typedef struct buf {
    uint8_t data[8192];
    size_t len;
} buf;

static void put(buf *b, const void *p, size_t n)
{
    ck_assert_uint_le(b->len + n, sizeof(b->data));
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

static void put32(buf *b, uint32_t v)
{
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, x, 4);
}

static void hash_of(int i, char out[41])
{
    for (int j = 0; j < 40; j++)
        out[j] = "0123456789abcdef"[(i * 7 + j) % 16];
    out[40] = '\0';
}

/* A cache of n entries as Mesa writes it (payload i: 100 + 10 i bytes), and its index. */
static void make_cache(int n, buf *foz, buf *idx)
{
    memset(foz, 0, sizeof(*foz));
    memset(idx, 0, sizeof(*idx));
    put(foz, MAGIC, 16);
    put(idx, MAGIC, 16);
    for (int i = 0; i < n; i++) {
        char h[41];
        uint8_t payload[200];
        uint32_t size = 100u + 10u * (uint32_t)i;
        for (uint32_t j = 0; j < size; j++)
            payload[j] = (uint8_t)(i + j * 3);
        hash_of(i, h);
        put(foz, h, 40);
        uint64_t at = foz->len;
        put32(foz, size);
        put32(foz, 1);
        put32(foz, ~(uint32_t)crc32(0L, payload, size));
        put32(foz, size);
        put(foz, payload, size);
        put(idx, h, 40);
        put32(idx, 8);
        put32(idx, 1);
        put32(idx, 0);
        put32(idx, 8);
        put32(idx, (uint32_t)at);
        put32(idx, (uint32_t)(at >> 32));
    }
}

static int check(const buf *foz, const buf *idx, char *why, size_t why_size)
{
    return vkdl_foz_check(foz->data, foz->len, idx->data, idx->len, why, why_size);
}

static void set32(buf *b, size_t off, uint32_t v)
{
    b->data[off] = (uint8_t)v;
    b->data[off + 1] = (uint8_t)(v >> 8);
    b->data[off + 2] = (uint8_t)(v >> 16);
    b->data[off + 3] = (uint8_t)(v >> 24);
}

START_TEST(test_vk_deliver__foz_check_accepts_what_mesa_writes)
{
    buf foz, idx;
    char why[256];
    for (int n = 0; n < 4; n++) {
        make_cache(n, &foz, &idx);
        ck_assert_msg(check(&foz, &idx, why, sizeof(why)) == 0, "%d entries: %s", n, why);
    }
}
END_TEST

START_TEST(test_vk_deliver__foz_check_refuses_every_malformed_part)
{
    buf foz, idx, f, x;
    char why[256];
    size_t e1 = 16 + 40 + 16 + 100; /* the second cache entry */
    make_cache(3, &foz, &idx);

    struct {
        const char *what;
        int target; /* 0 cache, 1 index */
        size_t off;
        int op; /* 0 xor 0x01 at off, 1 truncate to off, 2 append a byte, 3 set u32 at off */
        uint32_t v;
    } cases[] = {
        {"magic", 0, 1, 0, 0},
        {"version", 1, 15, 0, 0},
        {"hash not hex", 0, 16, 3, 0x21212121u},
        {"hash upper case", 0, 16, 3, 0x41414141u},
        {"payload past the end", 0, 56, 3, 0x7fffffffu},
        {"empty payload", 0, 56, 3, 0},
        {"compressed", 0, 60, 3, 2},
        {"bad crc", 0, 64, 0, 0},
        {"uncompressed size", 0, 68, 3, 99},
        {"payload byte", 0, 16 + 56 + 5, 0, 0},
        {"truncated cache", 0, e1 + 20, 1, 0},
        {"trailing byte", 0, 0, 2, 0},
        {"index entry size", 1, 16 + 40, 3, 16},
        {"index format", 1, 16 + 44, 3, 2},
        {"index offset off by one", 1, 16 + 56, 3, 57},
        {"index offset at another hash", 1, 16 + 56, 3, (uint32_t)(e1 + 40)},
        {"index offset past the end", 1, 16 + 60, 3, 1},
        {"index hash", 1, 16 + 3, 0, 0},
        {"index truncated", 1, 16 + 64 + 10, 1, 0},
        {"index trailing byte", 1, 0, 2, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        f = foz;
        x = idx;
        buf *b = cases[i].target ? &x : &f;
        if (cases[i].op == 0)
            b->data[cases[i].off] ^= 0x01;
        else if (cases[i].op == 1)
            b->len = cases[i].off;
        else if (cases[i].op == 2)
            b->data[b->len++] = 0;
        else
            set32(b, cases[i].off, cases[i].v);
        why[0] = '\0';
        ck_assert_msg(check(&f, &x, why, sizeof(why)) == -1, "accepted: %s", cases[i].what);
        ck_assert_msg(why[0] != '\0', "no reason: %s", cases[i].what);
    }
    /* The same entry named twice by the index. */
    x = idx;
    memcpy(x.data + 16 + 64, x.data + 16, 64);
    ck_assert_int_eq(check(&foz, &x, why, sizeof(why)), -1);
    /* Random bytes after a valid magic, any length: refused, never a crash. */
    for (int round = 0; round < 200; round++) {
        x.len = 16 + (size_t)(rand() % 700);
        memcpy(x.data, MAGIC, 16);
        for (size_t j = 16; j < x.len; j++)
            x.data[j] = (uint8_t)rand();
        ck_assert_int_eq(check(&foz, &x, why, sizeof(why)), -1);
        f.len = 16 + (size_t)(rand() % 700);
        memcpy(f.data, MAGIC, 16);
        for (size_t j = 16; j < f.len; j++)
            f.data[j] = (uint8_t)rand();
        ck_assert_int_eq(check(&f, &idx, why, sizeof(why)), -1);
    }
}
END_TEST

/* A PSDB carrying a Mesa cache (foz, idx) recorded in folder. */
static void write_mesa_psdb(const char *path, const buf *foz, const buf *idx, const char *folder)
{
    psdb_app_identity app = {.desc = {.name = "Mesa Test", .version = PSDB_VERSION(1, 0, 0, 0)}};
    psdb_target t = {.family = "vulkan-10005-0", .abi_version = 5};
    psdb_writer *w = NULL;
    uint8_t kf[32], ki[32];
    vkid_mesa_key(0, kf);
    vkid_mesa_key(1, ki);
    ck_assert_int_eq(psdb_writer_create(path, &app, &t, &w), PSDB_S_OK);
    ck_assert_int_eq(psdb_writer_put_value(w, kf, 32, PSDB_VALUE_OBJECT_CODE, foz->data, foz->len),
                     PSDB_S_OK);
    ck_assert_int_eq(psdb_writer_put_value(w, kf, 32, PSDB_VALUE_METADATA, folder, strlen(folder)),
                     PSDB_S_OK);
    ck_assert_int_eq(psdb_writer_put_value(w, ki, 32, PSDB_VALUE_OBJECT_CODE, idx->data, idx->len),
                     PSDB_S_OK);
    ck_assert_int_eq(psdb_writer_finish(w), PSDB_S_OK);
    psdb_writer_release(w);
}

static int count_files(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

START_TEST(test_vk_deliver__mesa_setup_writes_only_checked_bytes)
{
    char *dir = tu_mkdtemp();
    char *psdb = tu_path(dir, "mesa.psdb"), *root = tu_path(dir, "cache");
    char *folder = tu_path(root, "mesa_shader_cache_sf/abc123/llvmpipe");
    char msg[512];
    buf foz, idx;
    psdb_file *f = NULL;

    setenv("MESA_SHADER_CACHE_DIR", root, 1);
    unsetenv("MESA_SHADER_CACHE_DISABLE");
    make_cache(3, &foz, &idx);

    /* A malformed index under digests that agree: refused, nothing written. */
    buf bad = idx;
    for (size_t j = 16; j < bad.len; j++)
        bad.data[j] = (uint8_t)(j * 151 + 7);
    write_mesa_psdb(psdb, &foz, &bad, "abc123/llvmpipe");
    ck_assert_int_eq(vkdl_open(psdb, NULL, NULL, &f), PSDB_S_OK);
    ck_assert_int_eq(vkdl_mesa_setup(f, msg, sizeof(msg)), PSDB_E_CACHE_CORRUPT);
    ck_assert_msg(strstr(msg, "malformed"), "%s", msg);
    ck_assert_int_eq(count_files(folder), 0);
    psdb_file_release(f);

    /* A sound one is written; a file changed since (same size, other bytes) is written again. */
    write_mesa_psdb(psdb, &foz, &idx, "abc123/llvmpipe");
    ck_assert_int_eq(vkdl_open(psdb, NULL, NULL, &f), PSDB_S_OK);
    ck_assert_int_eq(vkdl_mesa_setup(f, msg, sizeof(msg)), PSDB_S_OK);
    ck_assert_int_eq(count_files(folder), 2);
    DIR *d = opendir(folder);
    struct dirent *e;
    char *idx_path = NULL;
    while ((e = readdir(d)) != NULL)
        if (strstr(e->d_name, "_idx.foz"))
            idx_path = tu_path(folder, e->d_name);
    closedir(d);
    ck_assert_ptr_nonnull(idx_path);
    buf tampered = idx;
    tampered.data[20] ^= 1;
    chmod(idx_path, 0644);
    ck_assert_int_eq(tu_write_file(idx_path, (const char *)tampered.data, tampered.len), 0);
    ck_assert_int_eq(vkdl_mesa_setup(f, msg, sizeof(msg)), PSDB_S_OK);
    size_t n = 0;
    char *now = tu_read_file(idx_path, &n);
    ck_assert_uint_eq(n, idx.len);
    ck_assert(memcmp(now, idx.data, n) == 0);
    free(now);
    /* A link planted at the name is replaced, its target untouched. */
    char *outside = tu_path(dir, "outside");
    ck_assert_int_eq(tu_write_file(outside, "keep", 4), 0);
    unlink(idx_path);
    ck_assert_int_eq(symlink(outside, idx_path), 0);
    ck_assert_int_eq(vkdl_mesa_setup(f, msg, sizeof(msg)), PSDB_S_OK);
    now = tu_read_file(outside, &n);
    ck_assert_uint_eq(n, 4);
    free(now);
    struct stat st;
    ck_assert_int_eq(lstat(idx_path, &st), 0);
    ck_assert(S_ISREG(st.st_mode));

    /* Mesa's cache switched off: nothing to set up, said so. */
    setenv("MESA_SHADER_CACHE_DISABLE", "true", 1);
    ck_assert_int_eq(vkdl_mesa_setup(f, msg, sizeof(msg)), PSDB_E_NOT_CURRENTLY_AVAILABLE);
    setenv("MESA_SHADER_CACHE_DISABLE", "false", 1);
    ck_assert_int_eq(vkdl_mesa_setup(f, msg, sizeof(msg)), PSDB_S_OK);
    unsetenv("MESA_SHADER_CACHE_DISABLE");
    psdb_file_release(f);

    /* The cache root is a file: nothing can be written, a failure, not a claim. */
    char *file_root = tu_path(dir, "afile");
    ck_assert_int_eq(tu_write_file(file_root, "x", 1), 0);
    setenv("MESA_SHADER_CACHE_DIR", file_root, 1);
    ck_assert_int_eq(vkdl_open(psdb, NULL, NULL, &f), PSDB_S_OK);
    ck_assert_int_eq(vkdl_mesa_setup(f, msg, sizeof(msg)), PSDB_E_IO);
    psdb_file_release(f);
    unsetenv("MESA_SHADER_CACHE_DIR");

    free(file_root);
    free(outside);
    free(idx_path);
    free(folder);
    free(root);
    free(psdb);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("vk_deliver");
    TCase *tc = tcase_create("vk_deliver");
    tcase_add_test(tc, test_vk_deliver__foz_check_accepts_what_mesa_writes);
    tcase_add_test(tc, test_vk_deliver__foz_check_refuses_every_malformed_part);
    tcase_add_test(tc, test_vk_deliver__mesa_setup_writes_only_checked_bytes);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed == 0 ? 0 : 1;
}
