/* psdb_conn.c - the read connections of an open PSDB: opening one (immutable, through the
 * file's page-cache VFS, with its prepared lookup statements) and the pool lookups take them from.
 */
#include "format/psdbfile_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <sqlite3.h>

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
    free(c->page);
    free(c);
}

char *psdb__pf_make_uri(const char *path)
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

psdb_hr psdb__pf_db_open(psdb_file *f, sqlite3 **db, char *msg, size_t msg_size)
{
    return psdb__pf_db_open_uri(f->uri, f->pages->name, db, msg, msg_size);
}

psdb_hr psdb__pf_db_open_uri(const char *uri, const char *vfs, sqlite3 **db, char *msg,
                             size_t msg_size)
{
    int rc =
        sqlite3_open_v2(uri, db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, vfs);
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
    if (!c || !(c->md = EVP_MD_CTX_new()) || !(c->page = malloc(PAGE_CACHE_PAGE_SIZE))) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if ((hr = psdb__pf_db_open(f, &c->db, msg, msg_size)) < 0)
        goto cleanup;
    if (check && (hr = psdb__pf_check_schema(c->db, msg, msg_size)) < 0)
        goto cleanup;
    sqlite3_exec(c->db, PSDB__CONN_CACHE_SIZE_SQL, NULL, NULL, NULL);
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
