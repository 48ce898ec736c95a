/* psdb_schema.c - checking, before anything stored in a PSDB is evaluated, that its sqlite_schema
 * is exactly the one schema/psdb.sql creates (statements compared token by token). */
#include "format/psdbfile_int.h"

#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "common/status_map.h"

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
