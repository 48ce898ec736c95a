/* admin.c - psdbd's administrative commands: token create, key add, gc, check. */
#include "admin.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "psdb/psdb.h"

#include "auth.h"
#include "common.h"
#include "config.h"
#include "index.h"
#include "store.h"

static int fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "psdbd %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

/* Names and scopes reach the access log and `list` output (JSON): UTF-8 without control
 * characters. Returns 0, or 1 after the message. */
static int bad_text(const char *cmd, const char *option, const char *s)
{
    json_t *probe = json_string(s);
    long cc = probe ? psdbd_control_char_in(s) : -1;
    int rc = 0;
    if (!probe)
        rc = fail(cmd, "%s is not UTF-8", option);
    else if (cc >= 0)
        rc = fail(cmd, "%s contains the control character U+%04lX", option, (unsigned long)cc);
    json_decref(probe);
    return rc;
}

int psdbd_lock_data_dir(const char *dir, char *err, size_t err_size)
{
    char *path = xasprintf("%s/psdbd.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0) {
        snprintf(err, err_size, "open %s: %s", path, strerror(errno));
    } else if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        snprintf(err, err_size, "%s is in use by another psdbd (%s)", dir,
                 errno == EWOULDBLOCK ? "locked" : strerror(errno));
        close(fd);
        fd = -1;
    }
    free(path);
    return fd;
}

static int first_blob(const char *sha, uint64_t size, int64_t mtime, void *ctx)
{
    (void)sha;
    (void)size;
    (void)mtime;
    (*(uint64_t *)ctx)++;
    return 1;
}

static int count_blob(const char *sha, uint64_t size, int64_t mtime, void *ctx)
{
    (void)sha;
    (void)size;
    (void)mtime;
    (*(uint64_t *)ctx)++;
    return 0;
}

int psdbd_data_open_index(const psdbd_store *store, int may_init, psdbd_index **out, char *err,
                          size_t err_size)
{
    char *path = xasprintf("%s/index.sqlite", store->dir);
    struct stat sb;
    uint64_t blobs = 0;
    int rc = -1;
    *out = NULL;
    if (lstat(path, &sb) == 0 || errno != ENOENT) {
        rc = psdbd_index_open(path, out, err, err_size);
        goto cleanup;
    }
    if (!may_init) {
        snprintf(err, err_size,
                 "index %s is missing: restore it from a backup (psdbd restore --from BACKUPDIR "
                 "--data-dir NEWDIR)",
                 path);
        goto cleanup;
    }
    /* Blobs without an index are a data directory that lost its index, not a new one: starting
     * with an empty index would serve nothing and let gc delete every blob. */
    psdbd_store_walk(store, first_blob, NULL, &blobs);
    if (blobs > 0) {
        snprintf(err, err_size,
                 "index %s is missing but %s holds blobs: restore the index from a backup "
                 "(psdbd restore --from BACKUPDIR --data-dir NEWDIR, then serve NEWDIR), or, to "
                 "rebuild from nothing, move %s away and publish the PSDBs again",
                 path, store->blob_dir, store->blob_dir);
        goto cleanup;
    }
    rc = psdbd_index_create(path, out, err, err_size);
cleanup:
    free(path);
    return rc;
}

/* Opens the data directory's store (without touching tmp/) and index for a command; `may_init`:
 * the command may set up a new data directory (psdbd_data_open_index). */
static int open_data(const char *cmd, const char *dir, int may_init, psdbd_store *store,
                     psdbd_index **ix)
{
    char err[1024];
    if (psdbd_store_open(store, dir, 0, err, sizeof(err)) != 0)
        return fail(cmd, "%s", err);
    int rc = psdbd_data_open_index(store, may_init, ix, err, sizeof(err));
    if (rc != 0) {
        psdbd_store_close(store);
        return fail(cmd, "%s", err);
    }
    return 0;
}

/* ---- token/key list and revoke --------------------------------------------------------------- */

/* `psdbd token|key list|revoke`: lists the rows (never a secret) or revokes one by name. */
static int list_or_revoke(const char *what, int argc, char **argv)
{
    static const struct option opts[] = {{"data-dir", required_argument, NULL, 'd'},
                                         {"name", required_argument, NULL, 'n'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    int tokens = strcmp(what, "token") == 0, revoke = strcmp(argv[0], "revoke") == 0;
    char *dir = psdbd_default_data_dir(), cmd[32];
    const char *name = NULL;
    int json = 0, c, rc = 1;
    psdbd_store store = {0};
    psdbd_index *ix = NULL;
    sqlite3_stmt *st = NULL;
    json_t *list = NULL;
    snprintf(cmd, sizeof(cmd), "%s %s", what, argv[0]);
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            free(dir);
            dir = xstrdup(optarg);
            break;
        case 'n':
            name = optarg;
            break;
        case 'j':
            json = 1;
            break;
        case 'h':
            printf("usage: psdbd %s list --data-dir DIR [--json]\n"
                   "       psdbd %s revoke --data-dir DIR --name NAME\n\n"
                   "Lists the %ss (names, scopes, dates; never a secret), or revokes one: it is\n"
                   "refused from then on, and its row is kept for the record.\n",
                   what, what, what);
            rc = 0;
            goto cleanup;
        default:
            rc = fail(cmd, "bad arguments (see --help)");
            goto cleanup;
        }
    }
    if (optind != argc || (revoke && !name)) {
        rc = fail(cmd, revoke ? "--name is required" : "unexpected argument (see --help)");
        goto cleanup;
    }
    if (open_data(cmd, dir, 0, &store, &ix) != 0)
        goto cleanup;
    sqlite3 *db = psdbd_index_db(ix);
    if (revoke) {
        const char *sql = tokens ? "UPDATE tokens SET revoked_at = ?2 WHERE name = ?1"
                                 : "UPDATE keys SET revoked_at = ?2 WHERE name = ?1";
        if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
            rc = fail(cmd, "index: %s", sqlite3_errmsg(db));
            goto cleanup;
        }
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, (int64_t)time(NULL));
        if (sqlite3_step(st) != SQLITE_DONE) {
            rc = fail(cmd, "index: %s", sqlite3_errmsg(db));
            goto cleanup;
        }
        if (sqlite3_changes(db) == 0) {
            rc = fail(cmd, "no %s named '%s'", what, name);
            goto cleanup;
        }
        printf("revoked %s %s\n", what, name);
        rc = 0;
        goto cleanup;
    }
    const char *sql = tokens ? "SELECT name, role, scope, created_at, expires_at, revoked_at "
                               "FROM tokens ORDER BY name"
                             : "SELECT name, key_id, scope, created_at, NULL, revoked_at "
                               "FROM keys ORDER BY name";
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        rc = fail(cmd, "index: %s", sqlite3_errmsg(db));
        goto cleanup;
    }
    list = json_array();
    while (sqlite3_step(st) == SQLITE_ROW) {
        char when[40];
        json_t *o = json_pack("{s:s, s:s, s:s, s:s}", "name", sqlite3_column_text(st, 0),
                              tokens ? "role" : "key_id", sqlite3_column_text(st, 1), "scope",
                              sqlite3_column_text(st, 2), "created_at",
                              psdbd_format_time(sqlite3_column_int64(st, 3), when, sizeof(when)));
        if (sqlite3_column_type(st, 4) != SQLITE_NULL)
            json_object_set_new(
                o, "expires_at",
                json_string(psdbd_format_time(sqlite3_column_int64(st, 4), when, sizeof(when))));
        json_object_set_new(o, "revoked", json_boolean(sqlite3_column_type(st, 5) != SQLITE_NULL));
        json_array_append_new(list, o);
    }
    if (json) {
        json_dumpf(list, stdout, JSON_COMPACT);
        fputc('\n', stdout);
    } else {
        size_t i;
        json_t *o;
        json_array_foreach(list, i, o)
        {
            printf("%-24s %-10.64s %-16s %s%s\n", json_string_value(json_object_get(o, "name")),
                   json_string_value(json_object_get(o, tokens ? "role" : "key_id")),
                   json_string_value(json_object_get(o, "scope")),
                   json_string_value(json_object_get(o, "created_at")),
                   json_is_true(json_object_get(o, "revoked")) ? " revoked" : "");
        }
    }
    rc = 0;
cleanup:
    json_decref(list);
    sqlite3_finalize(st);
    psdbd_index_close(ix);
    psdbd_store_close(&store);
    free(dir);
    return rc;
}

/* ---- token create ---------------------------------------------------------------------------- */

static void token_usage(void)
{
    printf("usage: psdbd token create --data-dir DIR --role admin|publisher|reader\n"
           "                          [--scope APP_PATTERN] [--name NAME]\n"
           "                          [--expires-in SECONDS | --expires-at UNIX_TIME] [--json]\n\n"
           "Creates a bearer token and prints it once (only its SHA-256 is stored).\n"
           "--scope is a shell pattern over application names (default '*').\n"
           "Also: psdbd token list|revoke (see psdbd token list --help).\n");
}

int psdbd_cmd_token(int argc, char **argv)
{
    static const struct option opts[] = {{"data-dir", required_argument, NULL, 'd'},
                                         {"role", required_argument, NULL, 'r'},
                                         {"scope", required_argument, NULL, 's'},
                                         {"name", required_argument, NULL, 'n'},
                                         {"expires-in", required_argument, NULL, 'i'},
                                         {"expires-at", required_argument, NULL, 'a'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    char *dir = psdbd_default_data_dir(), *name = NULL, *tok = NULL;
    const char *role = NULL, *scope = "*";
    uint64_t expires = 0, v = 0;
    int json = 0, c, rc = 1;
    psdbd_store store = {0};
    psdbd_index *ix = NULL;
    char selector[17];
    uint8_t hash[32];
    if (argc >= 2 && (strcmp(argv[1], "list") == 0 || strcmp(argv[1], "revoke") == 0)) {
        rc = list_or_revoke("token", argc - 1, argv + 1);
        goto cleanup;
    }
    if (argc < 2 || strcmp(argv[1], "create") != 0) {
        if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
            token_usage();
            rc = 0;
        } else {
            rc = fail("token", "expected 'token create|list|revoke' (see --help)");
        }
        goto cleanup;
    }
    argc--;
    argv++;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            free(dir);
            dir = xstrdup(optarg);
            break;
        case 'r':
            role = optarg;
            break;
        case 's':
            scope = optarg;
            break;
        case 'n':
            free(name);
            name = xstrdup(optarg);
            break;
        case 'i':
            if (psdbd_parse_u64(optarg, &v) != 0 || v > INT32_MAX) {
                rc = fail("token create", "bad --expires-in '%s'", optarg);
                goto cleanup;
            }
            expires = (uint64_t)time(NULL) + v;
            break;
        case 'a':
            if (psdbd_parse_u64(optarg, &expires) != 0 || expires == 0 || expires > INT64_MAX) {
                rc = fail("token create", "bad --expires-at '%s'", optarg);
                goto cleanup;
            }
            break;
        case 'j':
            json = 1;
            break;
        case 'h':
            token_usage();
            rc = 0;
            goto cleanup;
        default:
            rc = fail("token create", "bad arguments (see --help)");
            goto cleanup;
        }
    }
    if (optind != argc) {
        rc = fail("token create", "unexpected argument '%s'", argv[optind]);
        goto cleanup;
    }
    if (psdbd_role_parse(role) == PSDBD_ROLE_NONE) {
        rc = fail("token create", "--role must be admin, publisher or reader");
        goto cleanup;
    }
    if (!*scope) {
        rc = fail("token create", "--scope must not be empty");
        goto cleanup;
    }
    if ((name && bad_text("token create", "--name", name)) ||
        bad_text("token create", "--scope", scope))
        goto cleanup;
    if (open_data("token create", dir, 1, &store, &ix) != 0)
        goto cleanup;
    tok = psdbd_token_new(selector, hash);
    if (!tok) {
        rc = fail("token create", "the random generator failed");
        goto cleanup;
    }
    if (!name)
        name = xasprintf("%s-%s", role, selector);
    switch (psdbd_index_token_add(ix, name, selector, hash, role, scope, (int64_t)expires)) {
    case PSDBD_OK:
        break;
    case PSDBD_EXISTS:
        rc = fail("token create", "a token named '%s' exists", name);
        goto cleanup;
    default:
        rc = fail("token create", "the index cannot be written");
        goto cleanup;
    }
    if (json) {
        json_t *o = json_pack("{s:s, s:s, s:s, s:s}", "token", tok, "name", name, "role", role,
                              "scope", scope);
        if (expires)
            json_object_set_new(o, "expires_at", json_integer((json_int_t)expires));
        json_dumpf(o, stdout, JSON_COMPACT);
        fputc('\n', stdout);
        json_decref(o);
    } else {
        printf("%s\n", tok);
    }
    rc = fflush(stdout) == 0 ? 0 : 1;
cleanup:
    if (tok) {
        memset(tok, 0, strlen(tok));
        free(tok);
    }
    psdbd_index_close(ix);
    psdbd_store_close(&store);
    free(dir);
    free(name);
    return rc;
}

/* ---- key add --------------------------------------------------------------------------------- */

static void key_usage(void)
{
    printf("usage: psdbd key add --data-dir DIR --name NAME --public-key FILE.pub\n"
           "                     [--scope APP_PATTERN] [--json]\n\n"
           "Registers a publisher's Ed25519 public key (as written by 'psdb keygen'). Publishes\n"
           "signed by it are accepted for applications matching --scope (default '*').\n");
}

int psdbd_cmd_key(int argc, char **argv)
{
    static const struct option opts[] = {{"data-dir", required_argument, NULL, 'd'},
                                         {"name", required_argument, NULL, 'n'},
                                         {"public-key", required_argument, NULL, 'k'},
                                         {"scope", required_argument, NULL, 's'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    char *dir = psdbd_default_data_dir(), *pem = NULL;
    const char *name = NULL, *file = NULL, *scope = "*";
    int json = 0, c, rc = 1;
    psdbd_store store = {0};
    psdbd_index *ix = NULL;
    psdb_key *key = NULL;
    char id[PSDB_KEY_ID_SIZE];
    size_t pem_size = 0;
    psdb_hr hr;
    if (argc >= 2 && (strcmp(argv[1], "list") == 0 || strcmp(argv[1], "revoke") == 0)) {
        rc = list_or_revoke("key", argc - 1, argv + 1);
        goto cleanup;
    }
    if (argc < 2 || strcmp(argv[1], "add") != 0) {
        if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
            key_usage();
            rc = 0;
        } else {
            rc = fail("key", "expected 'key add|list|revoke' (see --help)");
        }
        goto cleanup;
    }
    argc--;
    argv++;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            free(dir);
            dir = xstrdup(optarg);
            break;
        case 'n':
            name = optarg;
            break;
        case 'k':
            file = optarg;
            break;
        case 's':
            scope = optarg;
            break;
        case 'j':
            json = 1;
            break;
        case 'h':
            key_usage();
            rc = 0;
            goto cleanup;
        default:
            rc = fail("key add", "bad arguments (see --help)");
            goto cleanup;
        }
    }
    if (optind != argc || !name || !*name || !file || !*scope) {
        rc = fail("key add", "--name and --public-key are required (see --help)");
        goto cleanup;
    }
    if (bad_text("key add", "--name", name) || bad_text("key add", "--scope", scope))
        goto cleanup;
    if ((hr = psdb_key_load(file, &key)) != PSDB_S_OK) {
        rc = fail("key add", "%s: not an Ed25519 PEM key (%s)", file, psdb_hr_str(hr));
        goto cleanup;
    }
    if (psdb_key_is_private(key))
        fprintf(stderr,
                "psdbd key add: warning: %s is a private key; only its public half is "
                "stored\n",
                file);
    psdb_key_id(key, id);
    psdb_key_public_pem(key, NULL, &pem_size);
    pem = xmalloc(pem_size + 1);
    pem_size++;
    if (psdb_key_public_pem(key, pem, &pem_size) != PSDB_S_OK) {
        rc = fail("key add", "cannot encode the public key");
        goto cleanup;
    }
    if (open_data("key add", dir, 1, &store, &ix) != 0)
        goto cleanup;
    switch (psdbd_index_key_add(ix, name, id, pem, scope)) {
    case PSDBD_OK:
        break;
    case PSDBD_EXISTS:
        rc = fail("key add", "a key named '%s' or with id %s is already registered", name, id);
        goto cleanup;
    default:
        rc = fail("key add", "the index cannot be written");
        goto cleanup;
    }
    if (json) {
        json_t *o = json_pack("{s:s, s:s, s:s}", "name", name, "key_id", id, "scope", scope);
        json_dumpf(o, stdout, JSON_COMPACT);
        fputc('\n', stdout);
        json_decref(o);
    } else
        printf("%s\n", id);
    rc = 0;
cleanup:
    psdb_key_release(key);
    psdbd_index_close(ix);
    psdbd_store_close(&store);
    free(dir);
    free(pem);
    return rc;
}

/* ---- gc and check ---------------------------------------------------------------------------- */

struct walk {
    psdbd_index *ix;
    const psdbd_store *store;
    sqlite3_stmt *ref; /* is this digest referenced? */
    sqlite3_stmt *row; /* blobs row of this digest */
    int64_t cutoff;    /* gc: files newer than this are left alone */
    int dry_run, deep, json;
    uint64_t files, orphans, orphan_bytes, removed, errors, strays;
};

static int gc_one(const char *sha, uint64_t size, int64_t mtime, void *ctx)
{
    struct walk *w = ctx;
    int referenced;
    sqlite3_reset(w->ref);
    sqlite3_bind_text(w->ref, 1, sha, -1, SQLITE_TRANSIENT);
    referenced = sqlite3_step(w->ref) == SQLITE_ROW;
    sqlite3_reset(w->ref);
    w->files++;
    if (referenced || mtime > w->cutoff)
        return 0;
    w->orphans++;
    w->orphan_bytes += size;
    if (!w->json)
        printf("%s %s (%llu bytes)\n", w->dry_run ? "would remove" : "remove", sha,
               (unsigned long long)size);
    if (!w->dry_run) {
        char *p = psdbd_store_path(w->store, sha);
        if (unlink(p) == 0)
            w->removed++;
        else
            w->errors++;
        free(p);
    }
    return 0;
}

static void stray_one(const char *path, void *ctx)
{
    struct walk *w = ctx;
    w->strays++;
    fprintf(w->json ? stderr : stdout, "stray %s (not a blob; left alone)\n", path);
}

static void gc_usage(void)
{
    printf("usage: psdbd gc --data-dir DIR [--dry-run] [--grace SECONDS] [--json]\n"
           "                [--force-empty-index]\n\n"
           "Removes blob files that no index row references (left by a crash between storing a\n"
           "blob and indexing it, or by a refused publish), and leftover uploads in tmp/. Files\n"
           "younger than --grace (default 3600) are kept: a running server may be about to\n"
           "index them. Safe while psdbd serves.\n\n"
           "gc removes nothing while the index looks lost: no PSDB indexed but blob files\n"
           "present, or a failed SQLite integrity check (restore the index with psdbd restore).\n"
           "--force-empty-index removes every unreferenced blob even then. A missing index or\n"
           "one that is not a psdbd index is always refused.\n");
}

/* Why the index cannot be trusted to say which blobs are garbage, or NULL. `why` receives the
 * details. */
static const char *gc_index_doubt(sqlite3 *db, const psdbd_store *store, char *why, size_t why_size)
{
    sqlite3_stmt *st = NULL;
    const char *doubt = NULL;
    int64_t psdbs = -1;
    uint64_t files = 0;
    if (sqlite3_prepare_v2(db, "PRAGMA quick_check", -1, &st, NULL) != SQLITE_OK) {
        snprintf(why, why_size, "%s", sqlite3_errmsg(db));
        doubt = "the index cannot be checked";
        goto cleanup;
    }
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *msg = (const char *)sqlite3_column_text(st, 0);
        if (!msg || strcmp(msg, "ok") != 0) {
            snprintf(why, why_size, "%s", msg ? msg : "no answer");
            doubt = "the index fails its integrity check";
            goto cleanup;
        }
    }
    sqlite3_finalize(st);
    st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM psdbs", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        psdbs = sqlite3_column_int64(st, 0);
    if (psdbs < 0) {
        snprintf(why, why_size, "%s", sqlite3_errmsg(db));
        doubt = "the index cannot be read";
        goto cleanup;
    }
    if (psdbs == 0) {
        psdbd_store_walk(store, count_blob, NULL, &files);
        if (files > 0) {
            snprintf(why, why_size, "0 psdbs indexed, %llu blob files in %s",
                     (unsigned long long)files, store->blob_dir);
            doubt = "the index is empty but blobs are present";
        }
    }
cleanup:
    sqlite3_finalize(st);
    return doubt;
}

int psdbd_cmd_gc(int argc, char **argv)
{
    static const struct option opts[] = {{"data-dir", required_argument, NULL, 'd'},
                                         {"dry-run", no_argument, NULL, 'n'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"grace", required_argument, NULL, 'g'},
                                         {"force-empty-index", no_argument, NULL, 'F'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    static const char ref_sql[] = "SELECT 1 FROM psdbs WHERE sha256 = ?1 LIMIT 1";
    static const char orphan_rows_sql[] =
        "DELETE FROM blobs WHERE sha256 NOT IN (SELECT sha256 FROM psdbs) AND created_at < ?1";
    char *dir = psdbd_default_data_dir();
    uint64_t grace = 3600;
    int c, rc = 1, force = 0;
    const char *doubt;
    char why[512];
    psdbd_store store = {0};
    psdbd_index *ix = NULL;
    struct walk w = {0};
    sqlite3 *db;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            free(dir);
            dir = xstrdup(optarg);
            break;
        case 'n':
            w.dry_run = 1;
            break;
        case 'j':
            w.json = 1;
            break;
        case 'F':
            force = 1;
            break;
        case 'g':
            if (psdbd_parse_u64(optarg, &grace) != 0 || grace > INT32_MAX) {
                rc = fail("gc", "bad --grace '%s'", optarg);
                goto cleanup;
            }
            break;
        case 'h':
            gc_usage();
            rc = 0;
            goto cleanup;
        default:
            rc = fail("gc", "bad arguments (see --help)");
            goto cleanup;
        }
    }
    if (optind != argc) {
        rc = fail("gc", "unexpected argument '%s'", argv[optind]);
        goto cleanup;
    }
    if (open_data("gc", dir, 0, &store, &ix) != 0)
        goto cleanup;
    db = psdbd_index_db(ix);
    /* An index that lost its rows would make every blob look unreferenced. */
    if ((doubt = gc_index_doubt(db, &store, why, sizeof(why))) != NULL) {
        if (!force) {
            rc = fail("gc",
                      "%s (%s): removing nothing; restore the index (psdbd restore), or "
                      "pass --force-empty-index to remove every unreferenced blob anyway",
                      doubt, why);
            goto cleanup;
        }
        fprintf(stderr, "psdbd gc: warning: %s (%s); going on (--force-empty-index)\n", doubt, why);
    }
    w.ix = ix;
    w.store = &store;
    w.cutoff = (int64_t)time(NULL) - (int64_t)grace;
    if (sqlite3_prepare_v2(db, ref_sql, -1, &w.ref, NULL) != SQLITE_OK) {
        rc = fail("gc", "index: %s", sqlite3_errmsg(db));
        goto cleanup;
    }
    /* Rows first: a blobs row whose PSDB never committed is as orphaned as its file. */
    if (!w.dry_run) {
        sqlite3_stmt *del = NULL;
        if (sqlite3_prepare_v2(db, orphan_rows_sql, -1, &del, NULL) == SQLITE_OK) {
            sqlite3_bind_int64(del, 1, w.cutoff);
            sqlite3_step(del);
        }
        sqlite3_finalize(del);
    }
    psdbd_store_walk(&store, gc_one, stray_one, &w);
    /* Leftover uploads older than the grace period belong to no running request. */
    {
        DIR *d = opendir(store.tmp_dir);
        struct dirent *e;
        struct stat sb;
        while (d && (e = readdir(d)) != NULL) {
            if (strncmp(e->d_name, "upload-", 7) != 0 ||
                fstatat(dirfd(d), e->d_name, &sb, 0) != 0 || sb.st_mtime > w.cutoff)
                continue;
            if (!w.json)
                printf("%s tmp/%s (%lld bytes)\n", w.dry_run ? "would remove" : "remove", e->d_name,
                       (long long)sb.st_size);
            if (!w.dry_run)
                unlinkat(dirfd(d), e->d_name, 0);
        }
        if (d)
            closedir(d);
    }
    if (w.json) {
        json_t *o = json_pack("{s:I, s:I, s:I, s:I, s:b}", "blob_files", (json_int_t)w.files,
                              "unreferenced", (json_int_t)w.orphans, "unreferenced_bytes",
                              (json_int_t)w.orphan_bytes, "removed", (json_int_t)w.removed,
                              "dry_run", w.dry_run);
        json_dumpf(o, stdout, JSON_COMPACT);
        fputc('\n', stdout);
        json_decref(o);
    } else {
        printf("gc: %llu blob files, %llu unreferenced (%llu bytes), %llu removed%s\n",
               (unsigned long long)w.files, (unsigned long long)w.orphans,
               (unsigned long long)w.orphan_bytes, (unsigned long long)w.removed,
               w.dry_run ? " (dry run)" : "");
    }
    rc = w.errors ? 1 : 0;
cleanup:
    sqlite3_finalize(w.ref);
    psdbd_index_close(ix);
    psdbd_store_close(&store);
    free(dir);
    return rc;
}

static int check_orphan(const char *sha, uint64_t size, int64_t mtime, void *ctx)
{
    struct walk *w = ctx;
    (void)mtime;
    (void)size;
    w->files++;
    sqlite3_reset(w->row);
    sqlite3_bind_text(w->row, 1, sha, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(w->row) != SQLITE_ROW) {
        w->orphans++;
        fprintf(w->json ? stderr : stdout, "note: blob %s is not indexed (psdbd gc removes it)\n",
                sha);
    }
    sqlite3_reset(w->row);
    return 0;
}

static void check_usage(void)
{
    printf("usage: psdbd check --data-dir DIR [--deep] [--json]\n\n"
           "Checks that the index and the blob store agree: SQLite integrity, every indexed blob\n"
           "present with its size, every PSDB's blob indexed. --deep also recomputes every\n"
           "blob's SHA-256 and runs a full SQLite integrity check. A missing index, a file that\n"
           "is not a psdbd index, and an index with no PSDB beside blob files (it looks lost)\n"
           "are problems too. Exit status 1 on a problem.\n");
}

int psdbd_cmd_check(int argc, char **argv)
{
    static const struct option opts[] = {{"data-dir", required_argument, NULL, 'd'},
                                         {"deep", no_argument, NULL, 'D'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    char *dir = psdbd_default_data_dir();
    int c, rc = 1, json = 0;
    psdbd_store store = {0};
    psdbd_index *ix = NULL;
    struct walk w = {0};
    sqlite3 *db;
    sqlite3_stmt *st = NULL;
    uint64_t problems = 0, blobs = 0, psdbs = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            free(dir);
            dir = xstrdup(optarg);
            break;
        case 'D':
            w.deep = 1;
            break;
        case 'j':
            json = w.json = 1;
            break;
        case 'h':
            check_usage();
            rc = 0;
            goto cleanup;
        default:
            rc = fail("check", "bad arguments (see --help)");
            goto cleanup;
        }
    }
    if (optind != argc) {
        rc = fail("check", "unexpected argument '%s'", argv[optind]);
        goto cleanup;
    }
    {
        char err[1024];
        if (psdbd_store_open(&store, dir, 0, err, sizeof(err)) != 0) {
            rc = fail("check", "%s", err);
            goto cleanup;
        }
        /* A missing or foreign index is the worst finding, reported like the others. */
        if (psdbd_data_open_index(&store, 0, &ix, err, sizeof(err)) != 0) {
            fprintf(json ? stderr : stdout, "problem: %s\n", err);
            if (json) {
                json_t *o =
                    json_pack("{s:b, s:I, s:s}", "ok", 0, "problems", (json_int_t)1, "index", err);
                json_dumpf(o, stdout, JSON_COMPACT);
                fputc('\n', stdout);
                json_decref(o);
            } else {
                printf("check: FAILED: the index cannot be opened, 1 problem\n");
            }
            goto cleanup;
        }
    }
    db = psdbd_index_db(ix);
    /* One read transaction: a consistent snapshot even while a server publishes. */
    sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
    if (sqlite3_prepare_v2(db, w.deep ? "PRAGMA integrity_check" : "PRAGMA quick_check", -1, &st,
                           NULL) == SQLITE_OK) {
        while (sqlite3_step(st) == SQLITE_ROW) {
            const char *msg = (const char *)sqlite3_column_text(st, 0);
            if (msg && strcmp(msg, "ok") != 0) {
                fprintf(w.json ? stderr : stdout, "problem: index: %s\n", msg);
                problems++;
            }
        }
    } else {
        fprintf(w.json ? stderr : stdout, "problem: index: %s\n", sqlite3_errmsg(db));
        problems++;
    }
    sqlite3_finalize(st);
    st = NULL;
    /* Every PSDB names an indexed blob (foreign keys are enforced, checked here anyway). */
    if (sqlite3_prepare_v2(db,
                           "SELECT p.id, p.sha256 FROM psdbs p LEFT JOIN blobs b ON b.sha256 = "
                           "p.sha256 WHERE b.sha256 IS NULL OR b.size != p.size",
                           -1, &st, NULL) == SQLITE_OK) {
        while (sqlite3_step(st) == SQLITE_ROW) {
            fprintf(w.json ? stderr : stdout,
                    "problem: psdb %lld names blob %s, which is not indexed with its size\n",
                    (long long)sqlite3_column_int64(st, 0), sqlite3_column_text(st, 1));
            problems++;
        }
    }
    sqlite3_finalize(st);
    st = NULL;
    sqlite3_prepare_v2(db, "SELECT count(*) FROM psdbs", -1, &st, NULL);
    if (st && sqlite3_step(st) == SQLITE_ROW)
        psdbs = (uint64_t)sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    st = NULL;
    /* Every indexed blob is present, whole, and (deep) has the bytes its name says. */
    if (sqlite3_prepare_v2(db, "SELECT sha256, size FROM blobs", -1, &st, NULL) == SQLITE_OK) {
        while (sqlite3_step(st) == SQLITE_ROW) {
            const char *sha = (const char *)sqlite3_column_text(st, 0);
            uint64_t want = (uint64_t)sqlite3_column_int64(st, 1), got = 0;
            int fd = -1, e;
            char actual[65];
            blobs++;
            if (!sha || !psdbd_is_digest(sha)) {
                fprintf(w.json ? stderr : stdout, "problem: blobs row with a malformed digest\n");
                problems++;
                continue;
            }
            if ((e = psdbd_store_open_blob(&store, sha, &fd, &got)) != 0) {
                fprintf(w.json ? stderr : stdout, "problem: blob %s is indexed but %s\n", sha,
                        e == ENOENT ? "missing" : strerror(e));
                problems++;
                continue;
            }
            close(fd);
            if (got != want) {
                fprintf(w.json ? stderr : stdout,
                        "problem: blob %s has %llu bytes, the index says %llu\n", sha,
                        (unsigned long long)got, (unsigned long long)want);
                problems++;
                continue;
            }
            if (w.deep) {
                char *p = psdbd_store_path(&store, sha);
                e = psdbd_sha256_file(p, actual, NULL);
                free(p);
                if (e != 0 || strcmp(actual, sha) != 0) {
                    fprintf(w.json ? stderr : stdout, "problem: blob %s: %s\n", sha,
                            e ? strerror(e) : "its bytes do not hash to its name");
                    problems++;
                }
            }
        }
    }
    sqlite3_finalize(st);
    st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT 1 FROM blobs WHERE sha256 = ?1", -1, &w.row, NULL) ==
        SQLITE_OK)
        psdbd_store_walk(&store, check_orphan, stray_one, &w);
    sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    /* An index that lost its rows reads as "every blob unindexed": that is a problem, not a
     * note, since gc would then delete them all. */
    if (psdbs == 0 && w.orphans > 0) {
        fprintf(w.json ? stderr : stdout,
                "problem: the index has no PSDBs but blobs/ holds %llu blob files: it looks "
                "lost; restore it (psdbd restore) before running psdbd gc\n",
                (unsigned long long)w.orphans);
        problems++;
    }
    if (json) {
        json_t *o = json_pack("{s:b, s:I, s:I, s:I, s:I, s:I, s:b}", "ok", problems == 0,
                              "problems", (json_int_t)problems, "psdbs", (json_int_t)psdbs, "blobs",
                              (json_int_t)blobs, "unindexed_files", (json_int_t)w.orphans, "strays",
                              (json_int_t)w.strays, "deep", w.deep);
        json_dumpf(o, stdout, JSON_COMPACT);
        fputc('\n', stdout);
        json_decref(o);
    } else {
        printf("check: %s: %llu psdbs, %llu blobs, %llu unindexed files, %llu problems\n",
               problems ? "FAILED" : "ok", (unsigned long long)psdbs, (unsigned long long)blobs,
               (unsigned long long)w.orphans, (unsigned long long)problems);
    }
    rc = problems ? 1 : 0;
cleanup:
    sqlite3_finalize(w.row);
    psdbd_index_close(ix);
    psdbd_store_close(&store);
    free(dir);
    return rc;
}
