/* testutil.c - helpers shared by the Check suites. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

char *tu_mkdtemp(void)
{
    const char *base = getenv("TMPDIR");
    char *t = tu_path(base && *base ? base : "/tmp", "psdb-test-XXXXXX");
    ck_assert_ptr_nonnull(t);
    ck_assert_ptr_nonnull(mkdtemp(t));
    return t;
}

void tu_rmtree(const char *path)
{
    if (!path || !*path || strcmp(path, "/") == 0)
        return;
    char *cmd = NULL;
    if (asprintf(&cmd, "rm -rf '%s'", path) > 0) {
        int rc = system(cmd);
        (void)rc;
    }
    free(cmd);
}

char *tu_path(const char *dir, const char *name)
{
    char *p = NULL;
    if (asprintf(&p, "%s/%s", dir, name) < 0)
        return NULL;
    return p;
}

int tu_run(const char *cmdline, const char *out_file)
{
    char *cmd = NULL;
    if (asprintf(&cmd, "%s >%s 2>&1", cmdline, out_file ? out_file : "/dev/null") < 0)
        return -1;
    int rc = system(cmd);
    free(cmd);
    if (rc == -1 || !WIFEXITED(rc))
        return -1;
    return WEXITSTATUS(rc);
}

char *tu_read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0, n;
    char chunk[65536];
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (len + n + 1 > cap) {
            cap = (len + n + 1) * 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        memcpy(buf + len, chunk, n);
        len += n;
    }
    fclose(f);
    if (!buf)
        buf = calloc(1, 1);
    else
        buf[len] = '\0';
    if (size)
        *size = len;
    return buf;
}

int tu_write_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t n = fwrite(data, 1, size, f);
    return (fclose(f) == 0 && n == size) ? 0 : -1;
}

int tu_wait_file(const char *path, int seconds)
{
    for (int i = 0; i < seconds * 100; i++) {
        if (access(path, F_OK) == 0)
            return 1;
        usleep(10000);
    }
    return 0;
}

size_t tu_recv_all(int s, char *out, size_t out_size)
{
    size_t got = 0;
    while (got + 1 < out_size) {
        ssize_t n = recv(s, out + got, out_size - 1 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    out[got] = '\0';
    return got;
}

int tu_run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
