/* psdb_reader.c - opening a PSDB (header, schema and compatibility checks), its read connections
 * and lookups. */
#include "format/psdbfile_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <sqlite3.h>

#include "common/buf.h"
#include "common/error.h"
#include "common/hash.h"
#include "common/status_map.h"

/* Every type of one key in one index range scan: a runtime asks for the size, then the object
 * code, then the metadata of the same key, and the last two then cost one blob seek each. */
static const char key_sql[] = "SELECT type, blob_id, size FROM value_entries WHERE key = ?1";
static const char blob_sql[] = "SELECT sha256, data FROM blobs WHERE id = ?1";

void psdb__pf_conn_close(conn *c)
{
    if (!c)
        return;
    sqlite3_blob_close(c->blob);
    sqlite3_finalize(c->key_st);
    sqlite3_finalize(c->blob_st);
    sqlite3_close(c->db);
    EVP_MD_CTX_free(c->md);
    free(c);
}

psdb_hr psdb__pf_db_open(psdb_file *f, sqlite3 **db, char *msg, size_t msg_size)
{
    int rc =
        sqlite3_open_v2(f->uri, db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX,
                        f->pages ? f->pages->name : NULL);
    if (rc != SQLITE_OK) {
        psdb__pf_set_msg(msg, msg_size, "sqlite3_open_v2: %s",
                         *db ? sqlite3_errmsg(*db) : "out of memory");
        return *db ? psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT) : PSDB_E_OUTOFMEMORY;
    }
    /* The file is untrusted input: no functions with side effects from its schema, and neither
     * views nor triggers, which a PSDB never has (psdb__pf_check_schema refuses them; this holds
     * even for a statement that would run before it). */
    sqlite3_db_config(*db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
    sqlite3_db_config(*db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
    sqlite3_db_config(*db, SQLITE_DBCONFIG_ENABLE_VIEW, 0, NULL);
    sqlite3_db_config(*db, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, NULL);
    /* Loading the schema parses every statement stored in the file: keep a crafted statement
     * small and shallow. The longest of psdb.sql is under 1 KiB, our queries under 512 bytes. */
    sqlite3_limit(*db, SQLITE_LIMIT_SQL_LENGTH, SCHEMA_SQL_MAX);
    sqlite3_limit(*db, SQLITE_LIMIT_EXPR_DEPTH, 64);
    sqlite3_limit(*db, SQLITE_LIMIT_COLUMN, 64);
    sqlite3_limit(*db, SQLITE_LIMIT_COMPOUND_SELECT, 4);
    sqlite3_limit(*db, SQLITE_LIMIT_ATTACHED, 0);
    return PSDB_S_OK;
}

/* check: compare the file's schema with psdb.sql before the first statement on it (the first
 * connection of psdb_file_open); later connections read a file already checked. */
psdb_hr psdb__pf_conn_open(psdb_file *f, int check, conn **out, char *msg, size_t msg_size)
{
    psdb_hr hr = PSDB_S_OK;
    conn *c = NULL;
    int rc = SQLITE_OK;

    c = calloc(1, sizeof(*c));
    if (!c || !(c->md = EVP_MD_CTX_new())) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if ((hr = psdb__pf_db_open(f, &c->db, msg, msg_size)) < 0)
        goto cleanup;
    if (check && (hr = psdb__pf_check_schema(c->db, msg, msg_size)) < 0)
        goto cleanup;
    /* Small: interior pages come from the file's page cache (pc_read), and leaf pages are
     * seldom read twice; a large LRU only costs memory and cache misses (measured). */
    sqlite3_exec(c->db, "PRAGMA cache_size = -256", NULL, NULL, NULL);
    rc = sqlite3_prepare_v3(c->db, key_sql, -1, SQLITE_PREPARE_PERSISTENT, &c->key_st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v3(c->db, blob_sql, -1, SQLITE_PREPARE_PERSISTENT, &c->blob_st, NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
        psdb__pf_set_msg(msg, msg_size, "prepare lookup: %s", sqlite3_errmsg(c->db));
        goto cleanup;
    }
    *out = c;
    c = NULL;
cleanup:
    psdb__pf_conn_close(c);
    return hr;
}

psdb_hr psdb__pf_conn_get(psdb_file *f, conn **out)
{
    conn *c = NULL;

    pthread_mutex_lock(&f->lock);
    c = f->idle;
    if (c)
        f->idle = c->next;
    pthread_mutex_unlock(&f->lock);
    if (c) {
        *out = c;
        return PSDB_S_OK;
    }
    return psdb__pf_conn_open(f, 0, out, NULL, 0);
}

void psdb__pf_conn_put(psdb_file *f, conn *c)
{
    pthread_mutex_lock(&f->lock);
    c->next = f->idle;
    f->idle = c;
    pthread_mutex_unlock(&f->lock);
}

static char *make_uri(const char *path)
{
    static const char suffix[] = "?immutable=1";
    size_t n = strlen(path);
    char *uri = NULL, *p = NULL;

    if (n > (SIZE_MAX - sizeof(suffix) - 8) / 3)
        return NULL;
    uri = malloc(5 + 3 * n + sizeof(suffix));
    if (!uri)
        return NULL;
    memcpy(uri, "file:", 5);
    p = uri + 5;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)path[i];
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            ch == '/' || ch == '-' || ch == '.' || ch == '_' || ch == '~') {
            *p++ = (char)ch;
        } else {
            static const char hex[] = "0123456789ABCDEF";
            *p++ = '%';
            *p++ = hex[ch >> 4];
            *p++ = hex[ch & 15];
        }
    }
    memcpy(p, suffix, sizeof(suffix));
    return uri;
}

/* Checks the raw SQLite header (the first 100 bytes) and the file size before SQLite sees it. */
static psdb_hr check_raw_header(const char *path, uint64_t *file_size, char *msg, size_t msg_size)
{
    psdb_hr hr = PSDB_E_CACHE_CORRUPT;
    uint8_t h[SQLITE_HEADER_SIZE];
    struct stat sb;
    int fd = -1;
    ssize_t n = 0;
    uint32_t page_size = 0, pages = 0;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        hr = psdb__errno_hr(errno);
        psdb__pf_set_msg(msg, msg_size, "open %s: %s", path, strerror(errno));
        goto cleanup;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        hr = PSDB_E_IO;
        psdb__pf_set_msg(msg, msg_size, "%s: not a regular file", path);
        goto cleanup;
    }
    n = pread(fd, h, sizeof(h), 0);
    if (n < 0) {
        hr = PSDB_E_IO;
        psdb__pf_set_msg(msg, msg_size, "read %s: %s", path, strerror(errno));
        goto cleanup;
    }
    if (n < (ssize_t)sizeof(h) || memcmp(h, "SQLite format 3", 16) != 0) {
        psdb__pf_set_msg(msg, msg_size, "not a SQLite file");
        goto cleanup;
    }
    if (psdb__pf_be32(h + 68) != PSDB__PSDB_APPLICATION_ID) {
        psdb__pf_set_msg(msg, msg_size, "not a PSDB (application_id 0x%08x)",
                         (unsigned)psdb__pf_be32(h + 68));
        goto cleanup;
    }
    if (psdb__pf_be32(h + 60) != PSDB__PSDB_SCHEMA_VERSION) {
        psdb__pf_set_msg(msg, msg_size,
                         "unsupported PSDB schema version %u (this library reads %u)",
                         (unsigned)psdb__pf_be32(h + 60), PSDB__PSDB_SCHEMA_VERSION);
        goto cleanup;
    }
    page_size = (uint32_t)h[16] << 8 | h[17];
    if (page_size == 1)
        page_size = 65536;
    pages = psdb__pf_be32(h + 28);
    if (page_size < 512 || (page_size & (page_size - 1)) != 0 || pages == 0 ||
        psdb__pf_be32(h + 24) != psdb__pf_be32(h + 92)) {
        psdb__pf_set_msg(msg, msg_size, "malformed SQLite header");
        goto cleanup;
    }
    /* Header fields that change how SQLite reads the file, each fixed by how the writer makes it
     * (schema/PSDB.md): rollback journal (18-19), no reserved bytes per page (20), the payload
     * fractions SQLite requires (21-23), schema format 4 (44), no auto_vacuum or incremental
     * vacuum (52, 64), UTF-8 text (56), and the reserved expansion bytes zero (72-91). */
    if (h[18] != 1 || h[19] != 1) {
        psdb__pf_set_msg(msg, msg_size,
                         "SQLite header: not in rollback-journal mode (versions %u/%u)",
                         (unsigned)h[18], (unsigned)h[19]);
        goto cleanup;
    }
    if (h[20] != 0 || h[21] != 64 || h[22] != 32 || h[23] != 32 || psdb__pf_be32(h + 44) != 4) {
        psdb__pf_set_msg(msg, msg_size, "SQLite header: unexpected page layout or schema format %u",
                         (unsigned)psdb__pf_be32(h + 44));
        goto cleanup;
    }
    if (psdb__pf_be32(h + 52) != 0 || psdb__pf_be32(h + 64) != 0) {
        psdb__pf_set_msg(msg, msg_size, "SQLite header: auto_vacuum is on (a PSDB never has it)");
        goto cleanup;
    }
    if (psdb__pf_be32(h + 56) != 1) {
        psdb__pf_set_msg(msg, msg_size, "SQLite header: text encoding %u is not UTF-8",
                         (unsigned)psdb__pf_be32(h + 56));
        goto cleanup;
    }
    for (size_t i = 72; i < 92; i++) {
        if (h[i] != 0) {
            psdb__pf_set_msg(msg, msg_size, "SQLite header: reserved byte %zu is not zero", i);
            goto cleanup;
        }
    }
    if ((uint64_t)sb.st_size != (uint64_t)page_size * pages) {
        psdb__pf_set_msg(msg, msg_size, "%s (%llu bytes, header says %llu)",
                         (uint64_t)sb.st_size < (uint64_t)page_size * pages ? "truncated"
                                                                            : "trailing bytes",
                         (unsigned long long)sb.st_size, (unsigned long long)page_size * pages);
        goto cleanup;
    }
    *file_size = (uint64_t)sb.st_size;
    hr = PSDB_S_OK;
cleanup:
    if (fd >= 0)
        close(fd);
    return hr;
}

/* One token of SQL text (sql_next). */
typedef struct sql_tok {
    const char *p;
    size_t n;
    int word; /* a keyword or bare identifier: compared without ASCII case */
} sql_tok;

static int sql_word_byte(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '$' || ch >= 0x80;
}

/* Reads the next token of [*p, end) into t, skipping white space and comments; 0 at the end. A
 * quoted token ('', "", ``, []) is kept whole with its quotes, any other character that is not
 * part of a word is a token of its own. */
static int sql_next(const char **p, const char *end, sql_tok *t)
{
    const char *s = *p;

    for (;;) {
        while (s < end && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == '\f'))
            s++;
        if (end - s >= 2 && s[0] == '-' && s[1] == '-') {
            while (s < end && *s != '\n')
                s++;
        } else if (end - s >= 2 && s[0] == '/' && s[1] == '*') {
            s += 2;
            while (s < end && !(end - s >= 2 && s[0] == '*' && s[1] == '/'))
                s++;
            s = s < end ? s + 2 : end;
        } else {
            break;
        }
    }
    if (s >= end) {
        *p = end;
        return 0;
    }
    t->p = s;
    t->word = 0;
    if (*s == '\'' || *s == '"' || *s == '`' || *s == '[') {
        char close = *s == '[' ? ']' : *s;
        s++;
        while (s < end) {
            if (*s++ == close) {
                if (close == ']' || s >= end || *s != close)
                    break;
                s++; /* a doubled quote stands for one */
            }
        }
    } else if (sql_word_byte((unsigned char)*s)) {
        t->word = 1;
        while (s < end && sql_word_byte((unsigned char)*s))
            s++;
    } else {
        s++;
    }
    t->n = (size_t)(s - t->p);
    *p = s;
    return 1;
}

/* Whether two statements are the same sequence of tokens: they then mean the same (white space,
 * comments and the case of keywords and bare identifiers are all SQLite ignores). Cost linear in
 * the shorter text plus the white space skipped. */
static int sql_same(const char *a, size_t an, const char *b, size_t bn)
{
    const char *ae = a + an, *be = b + bn;
    sql_tok x, y;

    for (;;) {
        int ha = sql_next(&a, ae, &x), hb = sql_next(&b, be, &y);
        if (!ha || !hb)
            return ha == hb;
        if (x.n != y.n || x.word != y.word)
            return 0;
        for (size_t i = 0; i < x.n; i++) {
            unsigned char ca = (unsigned char)x.p[i], cb = (unsigned char)y.p[i];
            if (x.word && ca >= 'A' && ca <= 'Z')
                ca = (unsigned char)(ca - 'A' + 'a');
            if (x.word && cb >= 'A' && cb <= 'Z')
                cb = (unsigned char)(cb - 'A' + 'a');
            if (ca != cb)
                return 0;
        }
    }
}

/* A name read from a file, fit for a one-line message: at most 63 bytes, printable ASCII (other
 * bytes become '?'). */
const char *psdb__pf_msg_name(const char *s, char out[64])
{
    size_t i = 0;
    for (; s && s[i] && i < 63; i++)
        out[i] = (unsigned char)s[i] >= 0x20 && (unsigned char)s[i] < 0x7f ? s[i] : '?';
    out[i] = '\0';
    return s ? out : "(null)";
}

/* One row of sqlite_schema as psdb.sql creates it. */
typedef struct schema_row {
    char *type, *name, *tbl_name, *sql; /* sql NULL for an automatic index */
    size_t sql_len;
    int seen;
} schema_row;

#define SCHEMA_ROWS_MAX 16

/* Tables first, so that a missing table is named before its automatic index. */
static const char schema_want_sql[] =
    "SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY type = 'table' DESC, type, name";
/* In stored order: the check stops at the first row that differs, before reading the rest. */
static const char schema_got_sql[] = "SELECT type, name, tbl_name, sql FROM sqlite_schema";

static char *dup_column(sqlite3_stmt *st, int i, size_t *len)
{
    const unsigned char *s = sqlite3_column_text(st, i);
    size_t n = (size_t)sqlite3_column_bytes(st, i);
    char *d = NULL;

    if (!s)
        return NULL;
    if ((d = malloc(n + 1)) != NULL) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    if (len)
        *len = n;
    return d;
}

/* The schema of db must be exactly the one schema/psdb.sql creates: every row of sqlite_schema
 * (tables, indexes including the automatic ones, views, triggers) with the same type, name, table
 * and statement, and nothing else. The statement text decides everything SQLite will evaluate:
 * columns (generated or hidden ones included), types, constraints, defaults, collations, index
 * expressions, WITHOUT ROWID. Only sqlite_schema is read, so nothing stored in the file is
 * evaluated before it passes. */
psdb_hr psdb__pf_check_schema(sqlite3 *db, char *msg, size_t msg_size)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3 *ref = NULL;
    sqlite3_stmt *want = NULL, *got = NULL;
    schema_row rows[SCHEMA_ROWS_MAX];
    size_t nrows = 0;
    int rc = SQLITE_OK;

    memset(rows, 0, sizeof(rows));
    rc = sqlite3_open_v2(":memory:", &ref, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(ref, psdb__psdb_schema_sql, NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(ref, schema_want_sql, -1, &want, NULL);
    while (rc == SQLITE_OK && (rc = sqlite3_step(want)) == SQLITE_ROW) {
        schema_row *w = &rows[nrows];
        if (nrows == SCHEMA_ROWS_MAX) {
            rc = SQLITE_ERROR; /* psdb.sql grew past SCHEMA_ROWS_MAX: a bug here, not in a file */
            break;
        }
        w->type = dup_column(want, 0, NULL);
        w->name = dup_column(want, 1, NULL);
        w->tbl_name = dup_column(want, 2, NULL);
        w->sql = dup_column(want, 3, &w->sql_len);
        nrows++;
        if (!w->type || !w->name || !w->tbl_name ||
            (!w->sql && sqlite3_column_type(want, 3) != SQLITE_NULL)) {
            rc = SQLITE_NOMEM;
            break;
        }
        rc = SQLITE_OK;
    }
    if (rc != SQLITE_DONE) {
        hr = rc == SQLITE_NOMEM || !ref ? PSDB_E_OUTOFMEMORY : PSDB_E_FAIL;
        psdb__pf_set_msg(msg, msg_size, "reference schema: %s",
                         ref ? sqlite3_errmsg(ref) : "no memory");
        goto cleanup;
    }
    rc = sqlite3_prepare_v2(db, schema_got_sql, -1, &got, NULL);
    if (rc != SQLITE_OK) {
        char e[64];
        hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
        /* SQLite's message quotes names from the file. */
        psdb__pf_set_msg(msg, msg_size, "schema: %s", psdb__pf_msg_name(sqlite3_errmsg(db), e));
        goto cleanup;
    }
    /* At most nrows + 1 rows are read: the first unexpected or differing one ends the check. */
    while ((rc = sqlite3_step(got)) == SQLITE_ROW) {
        const char *type = (const char *)sqlite3_column_text(got, 0);
        const char *name = (const char *)sqlite3_column_text(got, 1);
        const char *tbl = (const char *)sqlite3_column_text(got, 2);
        const char *sql = (const char *)sqlite3_column_text(got, 3);
        size_t sql_len = (size_t)sqlite3_column_bytes(got, 3);
        schema_row *w = NULL;

        for (size_t i = 0; name && i < nrows && !w; i++)
            if (!rows[i].seen && strcmp(rows[i].name, name) == 0 &&
                (size_t)sqlite3_column_bytes(got, 1) == strlen(name))
                w = &rows[i];
        hr = PSDB_E_CACHE_CORRUPT;
        if (!w || !type || strcmp(w->type, type) != 0) {
            char t[64], n[64];
            psdb__pf_set_msg(msg, msg_size, "schema differs: %s %s unexpected",
                             psdb__pf_msg_name(type, t), psdb__pf_msg_name(name, n));
            goto cleanup;
        }
        if (!tbl || strcmp(w->tbl_name, tbl) != 0 || !w->sql != !sql ||
            (sql && !sql_same(w->sql, w->sql_len, sql, sql_len))) {
            psdb__pf_set_msg(msg, msg_size,
                             "schema differs: %s %s is not defined as psdb.sql defines it", w->type,
                             w->name);
            goto cleanup;
        }
        hr = PSDB_S_OK;
        w->seen = 1;
    }
    if (rc != SQLITE_DONE) {
        char e[64];
        hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
        psdb__pf_set_msg(msg, msg_size, "schema: %s", psdb__pf_msg_name(sqlite3_errmsg(db), e));
        goto cleanup;
    }
    for (size_t i = 0; i < nrows; i++) {
        if (!rows[i].seen) {
            hr = PSDB_E_CACHE_CORRUPT;
            psdb__pf_set_msg(msg, msg_size, "schema differs: %s %s missing", rows[i].type,
                             rows[i].name);
            goto cleanup;
        }
    }
cleanup:
    for (size_t i = 0; i < nrows; i++) {
        free(rows[i].type);
        free(rows[i].name);
        free(rows[i].tbl_name);
        free(rows[i].sql);
    }
    sqlite3_finalize(want);
    sqlite3_finalize(got);
    sqlite3_close(ref);
    return hr;
}

/* Copies a TEXT column (NULL allowed when nullable) that holds no NUL byte. 0 ok, -1 malformed,
 * -2 out of memory. */
static int column_text(sqlite3_stmt *st, int i, int nullable, char **out)
{
    int type = sqlite3_column_type(st, i);
    const unsigned char *s = NULL;
    int n = 0;

    *out = NULL;
    if (type == SQLITE_NULL)
        return nullable ? 0 : -1;
    if (type != SQLITE_TEXT)
        return -1;
    s = sqlite3_column_text(st, i);
    n = sqlite3_column_bytes(st, i);
    if (!s || memchr(s, '\0', (size_t)n))
        return -1;
    *out = malloc((size_t)n + 1);
    if (!*out)
        return -2;
    memcpy(*out, s, (size_t)n + 1);
    return 0;
}

static psdb_hr read_header(psdb_file *f, sqlite3 *db, uint64_t file_size, char *msg,
                           size_t msg_size)
{
    static const char *sql =
        "SELECT exe_filename, app_name, app_version, engine_name, engine_version, app_id, family, "
        "abi_version, compiler_version, profile_version, num_values, num_groups, num_blobs, "
        "blob_bytes, content_digest FROM header";
    psdb_hr hr = PSDB_E_CACHE_CORRUPT;
    sqlite3_stmt *st = NULL;
    psdb_file_info *info = &f->info;
    int rc = SQLITE_OK, t = 0;
    const char *why = NULL;

    rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
        psdb__pf_set_msg(msg, msg_size, "header: %s", sqlite3_errmsg(db));
        goto cleanup;
    }
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        hr = rc == SQLITE_DONE ? PSDB_E_CACHE_CORRUPT : psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
        psdb__pf_set_msg(msg, msg_size, "malformed header row (%s)",
                         rc == SQLITE_DONE ? "no row" : sqlite3_errmsg(db));
        goto cleanup;
    }
    for (int i = 2; i <= 14; i++) {
        int want = (i == 5 || i == 14) ? SQLITE_BLOB : SQLITE_INTEGER;
        if (i == 3 || i == 6)
            continue;
        if (sqlite3_column_type(st, i) != want) {
            why = sqlite3_column_name(st, i);
            goto malformed;
        }
    }
    if ((t = column_text(st, 0, 1, &f->exe_filename)) != 0 ||
        (t = column_text(st, 1, 0, &f->app_name)) != 0 ||
        (t = column_text(st, 3, 1, &f->engine_name)) != 0 ||
        (t = column_text(st, 6, 0, &f->family)) != 0) {
        if (t == -2) {
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
        why = "text field";
        goto malformed;
    }
    info->identity.desc.exe_filename = f->exe_filename;
    info->identity.desc.name = f->app_name;
    info->identity.desc.version = (uint64_t)sqlite3_column_int64(st, 2);
    info->identity.desc.engine_name = f->engine_name;
    info->identity.desc.engine_version = (uint64_t)sqlite3_column_int64(st, 4);
    info->target.family = f->family;
    info->target.abi_version = (uint64_t)sqlite3_column_int64(st, 7);
    info->target.compiler_version = (uint64_t)sqlite3_column_int64(st, 8);
    info->target.profile_version = (uint64_t)sqlite3_column_int64(st, 9);
    info->num_values = (uint64_t)sqlite3_column_int64(st, 10);
    info->num_groups = (uint64_t)sqlite3_column_int64(st, 11);
    info->num_blobs = (uint64_t)sqlite3_column_int64(st, 12);
    info->blob_bytes = (uint64_t)sqlite3_column_int64(st, 13);
    if (sqlite3_column_bytes(st, 5) != 16 || sqlite3_column_bytes(st, 14) != 32) {
        why = "app_id or content_digest size";
        goto malformed;
    }
    memcpy(info->identity.app_id, sqlite3_column_blob(st, 5), 16);
    memcpy(info->content_digest, sqlite3_column_blob(st, 14), 32);
    if (f->app_name[0] == '\0') {
        why = "app_name empty";
        goto malformed;
    }
    if (!f->engine_name && info->identity.desc.engine_version != 0) {
        why = "engine_version without engine_name";
        goto malformed;
    }
    if (f->family[0] == '\0' || strlen(f->family) >= PSDB_ADAPTER_FAMILY_MAX) {
        why = "family length";
        goto malformed;
    }
    if (info->target.abi_version == 0 || info->target.abi_version == UINT64_MAX) {
        why = "reserved abi_version";
        goto malformed;
    }
    /* Every count is bounded by the file size (each row takes at least a byte), which keeps a lying
     * header from driving allocations. */
    if (info->num_values > file_size || info->num_groups > file_size ||
        info->num_blobs > file_size || info->blob_bytes > file_size ||
        info->num_blobs > info->num_values) {
        why = "counts";
        goto malformed;
    }
    rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) {
        why = "more than one row";
        goto malformed;
    }
    hr = PSDB_S_OK;
    goto cleanup;
malformed:
    hr = PSDB_E_CACHE_CORRUPT;
    psdb__pf_set_msg(msg, msg_size, "malformed header row (%s)", why);
cleanup:
    sqlite3_finalize(st);
    return hr;
}

/* MODEL A3: same family, ABI within the driver's range, top 32 bits of the profile version. */
static psdb_hr check_compat(const psdb_file_info *info, const psdb_adapter_desc *a, char *msg,
                            size_t msg_size)
{
    if (strcmp(info->target.family, a->family) != 0) {
        psdb__pf_set_msg(msg, msg_size, "adapter family %s, PSDB made for %s", a->family,
                         info->target.family);
        return PSDB_E_ADAPTER_NOT_FOUND;
    }
    if (info->target.abi_version < a->abi_min || info->target.abi_version > a->abi_max) {
        psdb__pf_set_msg(msg, msg_size, "ABI version %llu outside the driver's [%llu, %llu]",
                         (unsigned long long)info->target.abi_version,
                         (unsigned long long)a->abi_min, (unsigned long long)a->abi_max);
        return PSDB_E_DRIVER_VERSION_MISMATCH;
    }
    if (info->target.profile_version >> 32 != a->app_profile_version >> 32) {
        psdb__pf_set_msg(msg, msg_size,
                         "application profile version 0x%016llx, driver has 0x%016llx",
                         (unsigned long long)info->target.profile_version,
                         (unsigned long long)a->app_profile_version);
        return PSDB_E_DRIVER_VERSION_MISMATCH;
    }
    return PSDB_S_OK;
}

void psdb_file_release(psdb_file *f)
{
    if (!f)
        return;
    atomic_store(&f->index_cancel, 1);
    if (f->index_started)
        pthread_join(f->index_thread, NULL);
    psdb__pf_index_free(atomic_load(&f->index));
    while (f->idle) {
        conn *c = f->idle;
        f->idle = c->next;
        psdb__pf_conn_close(c);
    }
    psdb__pf_page_cache_free(f->pages);
    pthread_cond_destroy(&f->index_done);
    pthread_mutex_destroy(&f->lock);
    EVP_MD_free(f->sha256);
    free((void *)f->verified);
    free(f->uri);
    free(f->exe_filename);
    free(f->app_name);
    free(f->engine_name);
    free(f->family);
    free(f);
}

psdb_hr psdb__file_open_msg(const char *path, const psdb_adapter_desc *adapter, psdb_file **out,
                            char *msg, size_t msg_size)
{
    psdb_hr hr = PSDB_S_OK;
    psdb_file *f = NULL;
    conn *c = NULL;
    uint64_t file_size = 0;

    psdb__pf_set_msg(msg, msg_size, "ok");
    if (!path || !out || (adapter && !adapter->family)) {
        hr = PSDB_E_INVALIDARG;
        psdb__pf_set_msg(msg, msg_size, "invalid argument");
        goto cleanup;
    }
    *out = NULL;
    if ((hr = check_raw_header(path, &file_size, msg, msg_size)) < 0)
        goto cleanup;
    f = calloc(1, sizeof(*f));
    if (!f) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if (pthread_mutex_init(&f->lock, NULL) != 0) {
        free(f);
        f = NULL;
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if (pthread_cond_init(&f->index_done, NULL) != 0) {
        pthread_mutex_destroy(&f->lock);
        free(f);
        f = NULL;
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    f->file_size = file_size;
    f->uri = make_uri(path);
    f->pages = psdb__pf_page_cache_new(file_size);
    f->sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
    if (!f->uri || !f->sha256) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if ((hr = psdb__pf_conn_open(f, 1, &c, msg, msg_size)) < 0)
        goto cleanup;
    if ((hr = read_header(f, c->db, file_size, msg, msg_size)) < 0)
        goto cleanup;
    if (f->info.num_blobs > 0 && f->info.num_blobs < SIZE_MAX) {
        /* Without the cache every fetch hashes; that is correct, only slower. */
        f->num_verified_slots = f->info.num_blobs + 1;
        f->verified = calloc((size_t)f->num_verified_slots, 1);
        if (!f->verified)
            f->num_verified_slots = 0;
    }
    if (adapter && (hr = check_compat(&f->info, adapter, msg, msg_size)) < 0)
        goto cleanup;
    psdb__pf_conn_put(f, c);
    c = NULL;
    *out = f;
    f = NULL;
cleanup:
    psdb__pf_conn_close(c);
    psdb_file_release(f);
    return hr;
}

psdb_hr psdb_file_open(const char *path, const psdb_adapter_desc *adapter, psdb_file **out)
{
    char msg[512] = "";
    psdb_hr hr = psdb__file_open_msg(path, adapter, out, msg, sizeof(msg));
    if (PSDB_FAILED(hr))
        psdb__error_set(hr, "%s: %s", path ? path : "(null)", msg[0] ? msg : psdb_hr_str(hr));
    return hr;
}

psdb_hr psdb_file_get_info(psdb_file *f, psdb_file_info *out)
{
    if (!f || !out)
        return PSDB_E_INVALIDARG;
    *out = f->info;
    return PSDB_S_OK;
}

/* Fills k with what value_entries holds for key (every type at once). */
static psdb_hr load_key(conn *c, const void *key, size_t key_size, cached_key *k)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = c->key_st;
    int rc = SQLITE_OK;

    k->key_size = 0;
    memset(k->blob_id, 0, sizeof(k->blob_id));
    memset(k->size, 0, sizeof(k->size));
    if ((rc = psdb__pf_bind_bytes(st, 1, key, key_size)) != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
        goto cleanup;
    }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        sqlite3_int64 type = sqlite3_column_int64(st, 0);
        sqlite3_int64 id = sqlite3_column_int64(st, 1);
        sqlite3_int64 size = sqlite3_column_int64(st, 2);
        if (type < 0 || type >= (sqlite3_int64)PSDB_VALUE_TYPE_COUNT)
            continue; /* never asked for; psdb_file_verify reports it */
        if (sqlite3_column_type(st, 1) != SQLITE_INTEGER || id <= 0 ||
            sqlite3_column_type(st, 2) != SQLITE_INTEGER || size <= 0 || size > MAX_ITEM_SIZE)
            k->blob_id[type] = BLOB_MALFORMED;
        else
            k->blob_id[type] = id;
        k->size[type] = (uint64_t)size;
    }
    if (rc != SQLITE_DONE) {
        hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
        goto cleanup;
    }
    if (key_size <= CACHED_KEY_MAX) {
        memcpy(k->key, key, key_size);
        k->key_size = key_size;
    }
cleanup:
    sqlite3_reset(st);
    return hr;
}

/* Reads a blob already checked against its digest, through the connection's blob handle. */
static psdb_hr read_verified(conn *c, sqlite3_int64 id, void *value, size_t size)
{
    int rc = c->blob ? sqlite3_blob_reopen(c->blob, id)
                     : sqlite3_blob_open(c->db, "main", "blobs", "data", id, 0, &c->blob);
    if (rc == SQLITE_OK && (size_t)sqlite3_blob_bytes(c->blob) != size)
        return PSDB_E_CACHE_CORRUPT;
    if (rc == SQLITE_OK)
        rc = sqlite3_blob_read(c->blob, value, (int)size, 0);
    if (rc != SQLITE_OK) {
        /* A failed handle is aborted: start afresh next time. */
        sqlite3_blob_close(c->blob);
        c->blob = NULL;
        return psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
    }
    return PSDB_S_OK;
}

/* Reads a blob for the first time: bytes, type and size checked against the row and its SHA-256. */
static psdb_hr read_and_check(psdb_file *f, conn *c, sqlite3_int64 id, void *value, size_t size)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = c->blob_st;
    uint8_t got[EVP_MAX_MD_SIZE];
    unsigned int got_size = 0;
    int rc = sqlite3_bind_int64(st, 1, id);

    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        hr = rc == SQLITE_DONE ? PSDB_E_CACHE_CORRUPT : psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
        goto cleanup;
    }
    if (sqlite3_column_type(st, 0) != SQLITE_BLOB || sqlite3_column_type(st, 1) != SQLITE_BLOB ||
        sqlite3_column_bytes(st, 0) != 32) {
        hr = PSDB_E_CACHE_CORRUPT;
        goto cleanup;
    }
    const uint8_t *digest = sqlite3_column_blob(st, 0);
    const void *data = sqlite3_column_blob(st, 1);
    if ((size_t)sqlite3_column_bytes(st, 1) != size) {
        hr = PSDB_E_CACHE_CORRUPT;
        goto cleanup;
    }
    if (EVP_DigestInit_ex2(c->md, f->sha256, NULL) != 1 ||
        EVP_DigestUpdate(c->md, data, size) != 1 ||
        EVP_DigestFinal_ex(c->md, got, &got_size) != 1) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if (got_size != 32 || memcmp(got, digest, 32) != 0) {
        hr = PSDB_E_CACHE_CORRUPT;
        goto cleanup;
    }
    memcpy(value, data, size);
    if ((uint64_t)id < f->num_verified_slots)
        atomic_store_explicit(&f->verified[id], 1, memory_order_relaxed);
cleanup:
    sqlite3_reset(st);
    return hr;
}

psdb_hr psdb_file_find_value(psdb_file *f, const void *key, size_t key_size, uint32_t value_type,
                             void *value, size_t *value_size)
{
    psdb_hr hr = PSDB_S_OK;
    conn *c = NULL;
    cached_key uncached;
    const cached_key *k = NULL;
    const key_index *x = NULL;
    const index_entry *e = NULL;
    sqlite3_int64 id = 0;
    size_t size = 0;

    if (!f || !key || key_size == 0 || key_size > MAX_ITEM_SIZE ||
        value_type >= PSDB_VALUE_TYPE_COUNT || !value_size) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    x = atomic_load_explicit(&f->index, memory_order_acquire);
    if (x) {
        /* The index answers every key of value_entries: a miss is NOT_FOUND. */
        if ((e = psdb__pf_index_find(x, key, key_size)) != NULL) {
            id = e->blob_id[value_type] == INDEX_MALFORMED ? (sqlite3_int64)BLOB_MALFORMED
                                                           : (sqlite3_int64)e->blob_id[value_type];
            size = e->size[value_type];
        }
    } else {
        psdb__pf_index_start(f);
        if ((hr = psdb__pf_conn_get(f, &c)) < 0)
            goto cleanup;
        if (c->cache.key_size == key_size && memcmp(c->cache.key, key, key_size) == 0) {
            k = &c->cache;
        } else {
            /* Long keys bypass the cache (it holds CACHED_KEY_MAX bytes). */
            cached_key *dst = key_size <= CACHED_KEY_MAX ? &c->cache : &uncached;
            if ((hr = load_key(c, key, key_size, dst)) < 0)
                goto cleanup;
            k = dst;
        }
        id = k->blob_id[value_type];
        size = (size_t)k->size[value_type];
    }
    if (id == BLOB_ABSENT) {
        hr = PSDB_E_NOT_FOUND;
        goto cleanup;
    }
    if (id == BLOB_MALFORMED) {
        hr = PSDB_E_CACHE_CORRUPT;
        goto cleanup;
    }
    if (!value) {
        *value_size = size;
        goto cleanup;
    }
    if (size > *value_size) {
        *value_size = size;
        hr = PSDB_E_MORE_DATA;
        goto cleanup;
    }
    if (!c && (hr = psdb__pf_conn_get(f, &c)) < 0)
        goto cleanup;
    if ((uint64_t)id < f->num_verified_slots &&
        atomic_load_explicit(&f->verified[id], memory_order_relaxed))
        hr = read_verified(c, id, value, size);
    else
        hr = read_and_check(f, c, id, value, size);
    if (hr >= 0)
        *value_size = size;
cleanup:
    if (c)
        psdb__pf_conn_put(f, c);
    return hr;
}

psdb_hr psdb_file_foreach_group(psdb_file *f,
                                int (*fn)(const void *key, size_t key_size, uint64_t version,
                                          uint32_t num_values, void *ctx),
                                void *ctx)
{
    static const char *sql = "SELECT key, version, (SELECT count(*) FROM group_members m "
                             "WHERE m.group_key = g.key) FROM value_groups g ORDER BY key";
    psdb_hr hr = PSDB_S_OK;
    conn *c = NULL;
    sqlite3_stmt *st = NULL;
    int rc = SQLITE_OK;

    if (!f || !fn) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    if ((hr = psdb__pf_conn_get(f, &c)) < 0)
        goto cleanup;
    if ((rc = sqlite3_prepare_v2(c->db, sql, -1, &st, NULL)) != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
        goto cleanup;
    }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        sqlite3_int64 n = sqlite3_column_int64(st, 2);
        if (sqlite3_column_type(st, 0) != SQLITE_BLOB ||
            sqlite3_column_type(st, 1) != SQLITE_INTEGER || n < 0 || n > UINT32_MAX) {
            hr = PSDB_E_CACHE_CORRUPT;
            goto cleanup;
        }
        const void *key = sqlite3_column_blob(st, 0);
        size_t key_size = (size_t)sqlite3_column_bytes(st, 0);
        if (fn(key, key_size, (uint64_t)sqlite3_column_int64(st, 1), (uint32_t)n, ctx) != 0) {
            hr = PSDB_S_FALSE;
            goto cleanup;
        }
    }
    if (rc != SQLITE_DONE)
        hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
cleanup:
    sqlite3_finalize(st);
    if (c)
        psdb__pf_conn_put(f, c);
    return hr;
}

/* Runs a query expected to return no row; a row means a broken invariant described by what. */
