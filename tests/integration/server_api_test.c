/* server_api_test.c - the real psdbd on loopback: publish, resolve, blobs, auth, bad input,
 * crashes. */
#include "testutil.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "common/parse.h"
#include "common/hash.h"

#ifndef PSDBD_BIN
#define PSDBD_BIN "psdbd"
#endif

/* ---- the server process ---------------------------------------------------------------------- */

typedef struct srv {
    pid_t pid;
    int port;
    char base[64];
} srv;

static char *g_dir, *g_data, *g_log;
static srv g_srv;
static char *g_pub, *g_pub_other, *g_reader, *g_admin;
static psdb_key *g_key, *g_key2;
static char g_kid[PSDB_KEY_ID_SIZE], g_kid2[PSDB_KEY_ID_SIZE];
static int g_soft; /* in forked clients: a failed transfer is status 0, not a test failure */
/* The suite runs on either index engine (ctest registers it twice): PSDB_TEST_INDEX=postgresql
 * runs every test against a database of its own in the cluster at PSDB_TEST_PG_URL, which every
 * psdbd it starts (server and admin commands) reaches through $PSDBD_INDEX. */
static int g_pg;
static char *g_pg_db, *g_pg_url;

/* Starts psdbd on 127.0.0.1:0 with `extra` flags (NULL-terminated) and an optional file-size
 * limit; returns 0, or -1 when it exited before announcing its port. */
static int srv_try_start(srv *s, const char *const *extra, rlim_t fsize_limit)
{
    int fds[2];
    char line[256];
    size_t n = 0;
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        const char *argv[32] = {PSDBD_BIN,   "--listen", "127.0.0.1:0", "--data-dir", g_data,
                                "--threads", "4"};
        int argc = 7;
        for (int i = 0; extra && extra[i] && argc < 30; i++)
            argv[argc++] = extra[i];
        argv[argc] = NULL;
        dup2(fds[1], 1);
        int lf = open(g_log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (lf >= 0)
            dup2(lf, 2);
        close(fds[0]);
        if (fsize_limit) {
            struct rlimit rl = {fsize_limit, fsize_limit};
            setrlimit(RLIMIT_FSIZE, &rl);
        }
        execv(PSDBD_BIN, (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    while (n < sizeof(line) - 1) {
        ssize_t r = read(fds[0], line + n, 1);
        if (r <= 0)
            break;
        if (line[n] == '\n')
            break;
        n++;
    }
    line[n] = '\0';
    close(fds[0]);
    char *colon = strrchr(line, ':');
    const char *scheme = strstr(line, "https://") ? "https" : "http";
    if (!colon || strstr(line, "listening on") == NULL) {
        int st;
        waitpid(pid, &st, 0);
        return -1;
    }
    s->pid = pid;
    s->port = atoi(colon + 1);
    snprintf(s->base, sizeof(s->base), "%s://127.0.0.1:%d", scheme, s->port);
    return 0;
}

static void srv_start(srv *s, const char *const *extra)
{
    ck_assert_msg(srv_try_start(s, extra, 0) == 0, "psdbd did not start; see %s", g_log);
}

/* SIGTERM and wait; returns the exit status. */
static int srv_stop(srv *s)
{
    int st = 0;
    if (s->pid <= 0)
        return -1;
    kill(s->pid, SIGTERM);
    waitpid(s->pid, &st, 0);
    s->pid = 0;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        /* What psdbd said last explains an exit the test did not expect. */
        size_t n = 0;
        char *log = tu_read_file(g_log, &n);
        const char *tail = log && n > 4000 ? log + n - 4000 : log;
        fprintf(stderr, "psdbd exited with %d; the end of %s:\n%s\n",
                WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), g_log, tail ? tail : "");
        free(log);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void srv_kill9(srv *s)
{
    int st;
    kill(s->pid, SIGKILL);
    waitpid(s->pid, &st, 0);
    s->pid = 0;
}

/* Runs a command line and returns its first stdout line (malloc'd) or NULL when it failed. */
static char *run_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *run_line(const char *fmt, ...)
{
    char *cmd = NULL, buf[1024] = {0};
    va_list ap;
    va_start(ap, fmt);
    ck_assert_int_ge(vasprintf(&cmd, fmt, ap), 0);
    va_end(ap);
    FILE *p = popen(cmd, "r");
    free(cmd);
    ck_assert_ptr_nonnull(p);
    char *got = fgets(buf, sizeof(buf), p);
    while (fgetc(p) != EOF) {
    }
    int st = pclose(p);
    if (!got || st != 0)
        return NULL;
    buf[strcspn(buf, "\n")] = '\0';
    return strdup(buf);
}

/* Runs a command line with stderr joined to stdout; returns its exit status, *out the output
 * (malloc'd). */
static int run_capture(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run_capture(char **out, const char *fmt, ...)
{
    char *cmd = NULL, *full = NULL, buf[4096];
    size_t len = 0, n;
    va_list ap;
    va_start(ap, fmt);
    ck_assert_int_ge(vasprintf(&cmd, fmt, ap), 0);
    va_end(ap);
    ck_assert_int_ge(asprintf(&full, "%s 2>&1", cmd), 0);
    FILE *p = popen(full, "r");
    ck_assert_ptr_nonnull(p);
    *out = calloc(1, 1);
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) {
        *out = realloc(*out, len + n + 1);
        memcpy(*out + len, buf, n);
        len += n;
        (*out)[len] = '\0';
    }
    int st = pclose(p);
    free(cmd);
    free(full);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int run_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run_status(const char *fmt, ...)
{
    char *cmd = NULL;
    va_list ap;
    va_start(ap, fmt);
    ck_assert_int_ge(vasprintf(&cmd, fmt, ap), 0);
    va_end(ap);
    int rc = tu_run(cmd, NULL);
    free(cmd);
    return rc;
}

static char *token(const char *role, const char *scope, const char *extra)
{
    char *t = run_line("%s token create --data-dir %s --role %s --scope '%s' %s", PSDBD_BIN, g_data,
                       role, scope, extra ? extra : "");
    ck_assert_ptr_nonnull(t);
    return t;
}

/* ---- PSDBs ----------------------------------------------------------------------------------- */

typedef struct spec {
    const char *app;
    const char *exe, *engine; /* NULL: "game.exe", "Engine" */
    uint64_t version;
    const char *family;
    uint64_t abi, profile;
    size_t payload; /* bytes of value data */
    unsigned seed;
} spec;

static char *make_psdb(const spec *sp)
{
    static int counter;
    char name[64];
    snprintf(name, sizeof(name), "p%d.psdb", counter++);
    char *path = tu_path(g_dir, name);
    psdb_app_identity id = {.desc = {.exe_filename = sp->exe ? sp->exe : "game.exe",
                                     .name = sp->app,
                                     .version = sp->version,
                                     .engine_name = sp->engine ? sp->engine : "Engine",
                                     .engine_version = PSDB_VERSION(5, 0, 0, 0)},
                            .app_id = {0xa1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}};
    psdb_target t = {.family = sp->family,
                     .abi_version = sp->abi,
                     .compiler_version = PSDB_VERSION(1, 0, 0, 0),
                     .profile_version = sp->profile};
    psdb_writer *w = NULL;
    ck_assert_hr(psdb_writer_create(path, &id, &t, &w), PSDB_S_OK);
    size_t chunk = 64 * 1024, left = sp->payload ? sp->payload : 100;
    uint8_t *buf = malloc(chunk);
    unsigned x = sp->seed * 2654435761u + 1;
    for (int k = 0; left > 0; k++) {
        size_t n = left < chunk ? left : chunk;
        for (size_t i = 0; i < n; i++) {
            x = x * 1103515245u + 12345u;
            buf[i] = (uint8_t)(x >> 16);
        }
        char key[16];
        snprintf(key, sizeof(key), "k%06d", k);
        ck_assert_hr(psdb_writer_put_value(w, key, strlen(key), PSDB_VALUE_OBJECT_CODE, buf, n),
                     PSDB_S_OK);
        left -= n;
    }
    ck_assert_hr(psdb_writer_finish(w), PSDB_S_OK);
    psdb_writer_release(w);
    free(buf);
    return path;
}

static void sha256_file(const char *path, uint8_t out[32], uint64_t *size)
{
    size_t n = 0;
    char *data = tu_read_file(path, &n);
    unsigned len = 32;
    ck_assert_ptr_nonnull(data);
    EVP_Digest(data, n, out, &len, EVP_sha256(), NULL);
    *size = n;
    free(data);
}

static void hex(const uint8_t *in, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", in[i]);
}

/* ---- HTTP ------------------------------------------------------------------------------------ */

struct buf {
    char *data;
    size_t len;
};

static size_t on_write(char *p, size_t size, size_t n, void *ctx)
{
    struct buf *b = ctx;
    b->data = realloc(b->data, b->len + size * n + 1);
    memcpy(b->data + b->len, p, size * n);
    b->len += size * n;
    b->data[b->len] = '\0';
    return size * n;
}

typedef struct resp {
    long status;
    struct buf body, headers;
    json_t *json;
} resp;

static void resp_free(resp *r)
{
    free(r->body.data);
    free(r->headers.data);
    json_decref(r->json);
    memset(r, 0, sizeof(*r));
}

/* One request. body_file (streamed) or body/body_len for a request body. */
static void http(resp *r, const char *method, const char *path, const char *tok,
                 const char *const *headers, const char *body_file, const void *body,
                 size_t body_len)
{
    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL;
    char url[512], auth[256];
    FILE *f = NULL;
    memset(r, 0, sizeof(*r));
    snprintf(url, sizeof(url), "%s%s", g_srv.base, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L); /* the TLS test's certificate is self-signed */
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
    if (tok) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", tok);
        h = curl_slist_append(h, auth);
    }
    for (int i = 0; headers && headers[i]; i++)
        h = curl_slist_append(h, headers[i]);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (body_file) {
        struct stat sb;
        f = fopen(body_file, "rb");
        ck_assert_ptr_nonnull(f);
        fstat(fileno(f), &sb);
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_READDATA, f);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)sb.st_size);
    } else if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    }
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r->body);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_write);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r->headers);
    CURLcode cc = curl_easy_perform(c);
    if (!g_soft)
        ck_assert_msg(cc == CURLE_OK, "%s %s: %s", method, path, curl_easy_strerror(cc));
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    if (r->body.data)
        r->json = json_loads(r->body.data, 0, NULL);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (f)
        fclose(f);
}

static const char *header(const resp *r, const char *name)
{
    static char value[512];
    size_t n = strlen(name);
    for (const char *p = r->headers.data; p && *p;) {
        const char *eol = strstr(p, "\r\n");
        if (!eol)
            break;
        if (strncasecmp(p, name, n) == 0 && p[n] == ':') {
            const char *v = p + n + 1;
            while (*v == ' ')
                v++;
            snprintf(value, sizeof(value), "%.*s", (int)(eol - v), v);
            return value;
        }
        p = eol + 2;
    }
    return NULL;
}

typedef struct pub_opts {
    const char *token;
    psdb_key *key;        /* signs */
    const char *kid;      /* sent as X-Psdb-Key-Id */
    uint64_t serial;      /* signed */
    uint64_t sent_serial; /* sent (0: same as serial) */
    const char *sodb;     /* a version 2 statement naming this SODB (X-Psdb-Sodb-Sha256) */
} pub_opts;

/* Whether every name of a PSDB is a name by psdb's rule (psdb__name_check). */
static int names_ok(const psdb_file_info *info)
{
    const char *names[] = {info->identity.desc.name, info->identity.desc.exe_filename,
                           info->identity.desc.engine_name, info->target.family};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (psdb__name_check(names[i], NULL, 0) != 0)
            return 0;
    return 1;
}

static void publish(resp *r, const char *path, const pub_opts *o)
{
    psdb_file *f = NULL;
    psdb_file_info info;
    psdb_statement st = {0};
    char sig[PSDB_SIGNATURE_B64_SIZE], h_sig[128], h_kid[128], h_serial[64];
    ck_assert_hr(psdb_file_open(path, NULL, &f), PSDB_S_OK);
    ck_assert_hr(psdb_file_get_info(f, &info), PSDB_S_OK);
    sha256_file(path, st.sha256, &st.size);
    st.identity = info.identity;
    st.target = info.target;
    st.serial = o->serial;
    if (o->sodb) {
        st.has_sodb = 1;
        ck_assert_int_eq(psdb__unhex(o->sodb, st.sodb_sha256, 32), 0);
    }
    /* libpsdb refuses to sign a name that is not a name (the rule for names): such a file is sent
     * with a well-formed signature of nothing, which psdbd must refuse before it checks one. */
    psdb_hr hr = psdb_statement_sign(o->key ? o->key : g_key, &st, sig);
    if (hr == PSDB_E_INVALIDARG && !names_ok(&info)) {
        memset(sig, 'A', 86); /* base64 of 64 zero bytes */
        memcpy(sig + 86, "==", 3);
    } else {
        ck_assert_hr(hr, PSDB_S_OK);
    }
    psdb_file_release(f);
    snprintf(h_sig, sizeof(h_sig), "X-Psdb-Signature: %s", sig);
    snprintf(h_kid, sizeof(h_kid), "X-Psdb-Key-Id: %s", o->kid ? o->kid : g_kid);
    snprintf(h_serial, sizeof(h_serial), "X-Psdb-Serial: %llu",
             (unsigned long long)(o->sent_serial ? o->sent_serial : o->serial));
    char h_sodb[128];
    snprintf(h_sodb, sizeof(h_sodb), "X-Psdb-Sodb-Sha256: %s", o->sodb ? o->sodb : "");
    const char *hs[] = {h_sig, h_kid, h_serial, o->sodb ? h_sodb : NULL, NULL};
    http(r, "POST", "/v1/psdbs", o->token ? o->token : g_pub, hs, path, NULL, 0);
}

static const char *jstr(json_t *o, const char *path1, const char *path2)
{
    json_t *v = json_object_get(o, path1);
    if (path2)
        v = json_object_get(v, path2);
    return json_string_value(v);
}

static long long jint(json_t *o, const char *path1, const char *path2)
{
    json_t *v = json_object_get(o, path1);
    if (path2)
        v = json_object_get(v, path2);
    ck_assert_msg(json_is_integer(v), "%s.%s is not an integer", path1, path2 ? path2 : "");
    return json_integer_value(v);
}

/* Sends raw bytes on a new connection; reads the answer until the server closes or 5 s pass. */
static size_t raw(const void *data, size_t len, int shut_wr, char *out, size_t out_size)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_srv.port)};
    struct timeval tv = {5, 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(s, (struct sockaddr *)&a, sizeof(a)), 0);
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (len)
        ck_assert_int_eq(send(s, data, len, MSG_NOSIGNAL), (ssize_t)len);
    if (shut_wr)
        shutdown(s, SHUT_WR);
    size_t got = tu_recv_all(s, out, out_size);
    close(s);
    return got;
}

static int count_dir(const char *sub)
{
    char *p = tu_path(g_data, sub);
    DIR *d = opendir(p);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    if (d)
        closedir(d);
    free(p);
    return n;
}

/* Waits (polling, bounded) until tmp/ is empty: the server removes a dropped upload in its
 * completion callback, which runs after the client has gone. */
static int wait_tmp_empty(void)
{
    for (int i = 0; i < 500; i++) {
        if (count_dir("tmp") == 0)
            return 1;
        usleep(10000);
    }
    return 0;
}

/* ---- fixture --------------------------------------------------------------------------------- */

/* base?dbname=NAME: a later dbname parameter wins over the URL's database. */
static char *pg_url_for(const char *db)
{
    const char *base = getenv("PSDB_TEST_PG_URL");
    char *u = NULL;
    ck_assert_int_ge(asprintf(&u, "%s%sdbname=%s", base, strchr(base, '?') ? "&" : "?", db), 0);
    return u;
}

/* Runs one SQL statement with psql against the cluster's maintenance database or `db`. */
static int pg_sql(const char *db, const char *sql)
{
    char *u = pg_url_for(db ? db : "postgres");
    int rc = run_status("psql -qAt -v ON_ERROR_STOP=1 '%s' -c \"%s\" >/dev/null", u, sql);
    free(u);
    return rc;
}

static void setup(void)
{
    if (g_pg) {
        ck_assert_int_ge(asprintf(&g_pg_db, "psdbt_%ld_%ld", (long)getpid(), (long)time(NULL)), 0);
        char *sql = NULL;
        ck_assert_int_ge(asprintf(&sql, "CREATE DATABASE %s", g_pg_db), 0);
        ck_assert_int_eq(pg_sql(NULL, sql), 0);
        free(sql);
        g_pg_url = pg_url_for(g_pg_db);
        setenv("PSDBD_INDEX", g_pg_url, 1);
    }
    g_dir = tu_mkdtemp();
    g_data = tu_path(g_dir, "data");
    g_log = tu_path(g_dir, "psdbd.log");
    g_pub = token("publisher", "*", "--name pub");
    g_pub_other = token("publisher", "Other*", "--name pub-other");
    g_reader = token("reader", "*", "--name reader");
    g_admin = token("admin", "*", "--name admin");
    char *k = tu_path(g_dir, "key"), *k2 = tu_path(g_dir, "key2");
    ck_assert_hr(psdb_keygen(k, g_kid), PSDB_S_OK);
    ck_assert_hr(psdb_keygen(k2, g_kid2), PSDB_S_OK);
    ck_assert_hr(psdb_key_load(k, &g_key), PSDB_S_OK);
    ck_assert_hr(psdb_key_load(k2, &g_key2), PSDB_S_OK);
    ck_assert_int_eq(run_status("%s key add --data-dir %s --name main --public-key %s.pub",
                                PSDBD_BIN, g_data, k),
                     0);
    /* key2 may only publish for applications named Other*. */
    ck_assert_int_eq(run_status("%s key add --data-dir %s --name other --public-key %s.pub "
                                "--scope 'Other*'",
                                PSDBD_BIN, g_data, k2),
                     0);
    free(k);
    free(k2);
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void teardown(void)
{
    if (g_srv.pid > 0)
        srv_stop(&g_srv);
    psdb_key_release(g_key);
    psdb_key_release(g_key2);
    g_key = g_key2 = NULL;
    if (g_pg && getenv("PSDB_KEEP_TEST_DIR") == NULL) {
        char *sql = NULL;
        ck_assert_int_ge(asprintf(&sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)", g_pg_db), 0);
        pg_sql(NULL, sql);
        free(sql);
    }
    if (g_pg && getenv("PSDB_KEEP_TEST_DIR") == NULL) {
        /* other_instance's database, where a test made one */
        char *sql = NULL;
        ck_assert_int_ge(asprintf(&sql, "DROP DATABASE IF EXISTS %s_b WITH (FORCE)", g_pg_db), 0);
        pg_sql(NULL, sql);
        free(sql);
    }
    free(g_pg_db);
    free(g_pg_url);
    g_pg_db = g_pg_url = NULL;
    if (getenv("PSDB_KEEP_TEST_DIR") == NULL)
        tu_rmtree(g_dir);
    free(g_dir);
    free(g_data);
    free(g_log);
    free(g_pub);
    free(g_pub_other);
    free(g_reader);
    free(g_admin);
    curl_global_cleanup();
}

static const spec base_spec = {.app = "Game",
                               .version = PSDB_VERSION(1, 0, 0, 0),
                               .family = "contoso-gfx9",
                               .abi = 7,
                               .profile = PSDB_VERSION(1, 2, 0, 0),
                               .payload = 5000,
                               .seed = 1};

/* ---- tests ----------------------------------------------------------------------------------- */

START_TEST(test_server__publish_resolve_download)
{
    srv_start(&g_srv, NULL);
    char *path = make_psdb(&base_spec);
    uint8_t digest[32];
    char sha[65];
    uint64_t size = 0;
    resp r;
    sha256_file(path, digest, &size);
    hex(digest, 32, sha);

    pub_opts o = {.serial = 3};
    publish(&r, path, &o);
    ck_assert_msg(r.status == 201, "publish: %ld %s", r.status, r.body.data);
    ck_assert_str_eq(jstr(r.json, "sha256", NULL), sha);
    ck_assert_int_eq(jint(r.json, "size", NULL), (long long)size);
    ck_assert_int_eq(jint(r.json, "serial", NULL), 3);
    ck_assert_str_eq(jstr(r.json, "app", "name"), "Game");
    ck_assert_str_eq(jstr(r.json, "app", "exe_filename"), "game.exe");
    ck_assert_str_eq(jstr(r.json, "app", "version"), "1.0.0.0");
    ck_assert_str_eq(jstr(r.json, "app", "engine_name"), "Engine");
    ck_assert_str_eq(jstr(r.json, "app", "engine_version"), "5.0.0.0");
    ck_assert_str_eq(jstr(r.json, "app", "app_id"), "a1020304-0506-0708-090a-0b0c0d0e0f10");
    ck_assert_str_eq(jstr(r.json, "target", "family"), "contoso-gfx9");
    ck_assert_int_eq(jint(r.json, "target", "abi_version"), 7);
    ck_assert_str_eq(jstr(r.json, "target", "compiler_version"), "1.0.0.0");
    ck_assert_str_eq(jstr(r.json, "target", "profile_version"), "1.2.0.0");
    ck_assert_str_eq(jstr(r.json, "key_id", NULL), g_kid);
    ck_assert_uint_eq(strlen(jstr(r.json, "signature", NULL)), 88);
    ck_assert_ptr_nonnull(jstr(r.json, "created_at", NULL));
    char url[128];
    snprintf(url, sizeof(url), "/v1/blobs/%s", sha);
    ck_assert_str_eq(jstr(r.json, "url", NULL), url);
    long long id = jint(r.json, "id", NULL);
    resp_free(&r);

    /* Same content, same serial: idempotent. */
    publish(&r, path, &o);
    ck_assert_int_eq(r.status, 200);
    ck_assert_int_eq(jint(r.json, "id", NULL), id);
    resp_free(&r);

    /* The manifest by id, and the listings. */
    char p[256];
    snprintf(p, sizeof(p), "/v1/psdbs/%lld", id);
    http(&r, "GET", p, NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(jstr(r.json, "sha256", NULL), sha);
    resp_free(&r);
    http(&r, "GET", "/v1/apps", NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(jstr(json_array_get(json_object_get(r.json, "apps"), 0), "name", NULL),
                     "Game");
    resp_free(&r);
    http(&r, "GET", "/v1/apps/Game/psdbs", NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(json_array_size(json_object_get(r.json, "psdbs")), 1);
    resp_free(&r);
    http(&r, "GET", "/v1/apps/Nope/psdbs", NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 404);
    ck_assert_str_eq(jstr(r.json, "error", NULL), "not_found");
    resp_free(&r);

    /* Resolve. */
    http(&r, "GET",
         "/v1/resolve?app=Game&app_version=1.0.0.0&family=contoso-gfx9&abi_min=1&abi_max=9&"
         "profile_version=1.2.7.7",
         NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_int_eq(jint(r.json, "id", NULL), id);
    resp_free(&r);

    /* Download: whole, HEAD, Range, 304, 416. */
    size_t n = 0;
    char *bytes = tu_read_file(path, &n);
    http(&r, "GET", url, NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.body.len, n);
    ck_assert_mem_eq(r.body.data, bytes, n);
    char etag[80];
    snprintf(etag, sizeof(etag), "\"%s\"", sha);
    ck_assert_str_eq(header(&r, "ETag"), etag);
    ck_assert_str_eq(header(&r, "Cache-Control"), "public, max-age=31536000, immutable");
    resp_free(&r);
    http(&r, "HEAD", url, NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_int_eq(atoll(header(&r, "Content-Length")), (long long)n);
    resp_free(&r);
    const char *range[] = {"Range: bytes=10-19", NULL};
    http(&r, "GET", url, NULL, range, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 206);
    ck_assert_uint_eq(r.body.len, 10);
    ck_assert_mem_eq(r.body.data, bytes + 10, 10);
    char cr[96];
    snprintf(cr, sizeof(cr), "bytes 10-19/%zu", n);
    ck_assert_str_eq(header(&r, "Content-Range"), cr);
    resp_free(&r);
    const char *suffix[] = {"Range: bytes=-5", NULL};
    http(&r, "GET", url, NULL, suffix, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 206);
    ck_assert_mem_eq(r.body.data, bytes + n - 5, 5);
    resp_free(&r);
    const char *open_end[] = {"Range: bytes=100-", NULL};
    http(&r, "GET", url, NULL, open_end, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 206);
    ck_assert_uint_eq(r.body.len, n - 100);
    resp_free(&r);
    char inm[128];
    snprintf(inm, sizeof(inm), "If-None-Match: %s", etag);
    const char *cond[] = {inm, NULL};
    http(&r, "GET", url, NULL, cond, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 304);
    ck_assert_uint_eq(r.body.len, 0);
    resp_free(&r);
    char far[64];
    snprintf(far, sizeof(far), "Range: bytes=%zu-", n);
    const char *bad_range[] = {far, NULL};
    http(&r, "GET", url, NULL, bad_range, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 416);
    snprintf(cr, sizeof(cr), "bytes */%zu", n);
    ck_assert_str_eq(header(&r, "Content-Range"), cr);
    resp_free(&r);
    /* An If-Range that does not match gives the whole blob. */
    const char *if_range[] = {"Range: bytes=0-0", "If-Range: \"other\"", NULL};
    http(&r, "GET", url, NULL, if_range, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.body.len, n);
    resp_free(&r);

    /* Health, readiness, metrics. */
    http(&r, "GET", "/healthz", NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    http(&r, "GET", "/readyz", NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    http(&r, "GET", "/metrics", NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.body.data, "psdbd_publishes_total{result=\"created\"} 1"));
    ck_assert_ptr_nonnull(strstr(r.body.data, "psdbd_resolve_total{result=\"hit\"} 1"));
    ck_assert_ptr_nonnull(
        strstr(r.body.data, "psdbd_http_requests_total{route=\"blob\",status=\"206\"} 3"));
    resp_free(&r);
    free(bytes);
    free(path);
    ck_assert_int_eq(srv_stop(&g_srv), 0);
    /* One access log line per request, with the token name. */
    char *log = tu_read_file(g_log, NULL);
    ck_assert_ptr_nonnull(strstr(log, "access POST /v1/psdbs 201 "));
    ck_assert_ptr_nonnull(strstr(log, "ms pub\n"));
    free(log);
}
END_TEST

/* Publishes `sp` with `serial`; returns the id. */
static long long publish_ok(const spec *sp, uint64_t serial)
{
    char *path = make_psdb(sp);
    resp r;
    pub_opts o = {.serial = serial};
    publish(&r, path, &o);
    ck_assert_msg(r.status == 201, "publish: %ld %s", r.status, r.body.data);
    long long id = jint(r.json, "id", NULL);
    resp_free(&r);
    free(path);
    return id;
}

static long long resolve_id(const char *query)
{
    resp r;
    char p[512];
    long long id = -1;
    snprintf(p, sizeof(p), "/v1/resolve?app=Game&app_version=1.0.0.0&family=contoso-gfx9&%s",
             query);
    http(&r, "GET", p, NULL, NULL, NULL, NULL, 0);
    if (r.status == 200)
        id = jint(r.json, "id", NULL);
    else
        ck_assert_int_eq(r.status, 404);
    resp_free(&r);
    return id;
}

START_TEST(test_server__A3_resolve_order)
{
    srv_start(&g_srv, NULL);
    /* Misses first, on every worker thread: the answers are cached, and publishes must make
     * those cached answers stale. */
    for (int i = 0; i < 16; i++)
        ck_assert_int_eq(resolve_id("abi_min=1&abi_max=9&profile_version=1.2.0.0"), -1);
    spec s = base_spec;
    s.abi = 5;
    long long abi5 = publish_ok(&s, 1);
    s.abi = 9;
    s.seed = 2;
    long long abi9 = publish_ok(&s, 1);
    s.abi = 9;
    s.profile = PSDB_VERSION(1, 2, 5, 0);
    s.seed = 3;
    long long abi9_p125 = publish_ok(&s, 1);
    s.profile = PSDB_VERSION(1, 2, 5, 0);
    s.seed = 4;
    long long abi9_p125_s2 = publish_ok(&s, 2);
    s.profile = PSDB_VERSION(1, 3, 0, 0);
    s.seed = 5;
    long long abi9_p13 = publish_ok(&s, 1);
    s.family = "other-family";
    s.abi = 6;
    s.seed = 6;
    publish_ok(&s, 1);

    /* Larger ABI wins, then the larger profile, then the larger serial. */
    ck_assert_int_eq(resolve_id("abi_min=1&abi_max=9&profile_version=1.2.0.0"), abi9_p125_s2);
    /* Profile top 32 bits must be equal: 1.3 only. */
    ck_assert_int_eq(resolve_id("abi_min=1&abi_max=9&profile_version=1.3.9.9"), abi9_p13);
    /* No profile given: every profile is acceptable, the largest wins. */
    ck_assert_int_eq(resolve_id("abi_min=1&abi_max=9"), abi9_p13);
    /* ABI range excludes 9. */
    ck_assert_int_eq(resolve_id("abi_min=1&abi_max=8&profile_version=1.2.0.0"), abi5);
    ck_assert_int_eq(resolve_id("abi_min=6&abi_max=8"), -1);
    ck_assert_int_eq(resolve_id("abi_min=1&abi_max=9&profile_version=2.0.0.0"), -1);
    /* Another family is never chosen. */
    ck_assert_int_eq(resolve_id("abi_min=6&abi_max=6"), -1);

    /* Retired PSDBs are never resolved (DELETE needs a publisher token). */
    resp r;
    char p[64];
    snprintf(p, sizeof(p), "/v1/psdbs/%lld", abi9_p125_s2);
    http(&r, "DELETE", p, g_reader, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 403);
    resp_free(&r);
    http(&r, "DELETE", p, NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 401);
    resp_free(&r);
    http(&r, "DELETE", p, g_pub_other, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 403);
    resp_free(&r);
    http(&r, "DELETE", p, g_pub, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert(json_is_true(json_object_get(r.json, "retired")));
    resp_free(&r);
    ck_assert_int_eq(resolve_id("abi_min=1&abi_max=9&profile_version=1.2.0.0"), abi9_p125);
    http(&r, "GET", p, NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200); /* still readable by id */
    resp_free(&r);
    (void)abi9;

    /* Bad queries. */
    http(&r, "GET", "/v1/resolve?app=Game&family=f&abi_min=1&abi_max=2", NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 400);
    ck_assert_str_eq(jstr(r.json, "error", NULL), "bad_request");
    resp_free(&r);
    http(&r, "GET", "/v1/resolve?app=Game&app_version=1&family=f&abi_min=3&abi_max=2", NULL, NULL,
         NULL, NULL, 0);
    ck_assert_int_eq(r.status, 400);
    resp_free(&r);
}
END_TEST

START_TEST(test_server__tokens_and_scopes)
{
    srv_start(&g_srv, NULL);
    char *path = make_psdb(&base_spec);
    resp r;
    /* No token, a malformed one, an unknown one: 401. */
    pub_opts o = {.serial = 1,
                  .token = "psdb_0000000000000000_"
                           "00000000000000000000000000000000"
                           "00000000000000000000000000000000"};
    publish(&r, path, &o);
    ck_assert_int_eq(r.status, 401);
    ck_assert_str_eq(jstr(r.json, "error", NULL), "unauthorized");
    resp_free(&r);
    o.token = "nonsense";
    publish(&r, path, &o);
    ck_assert_int_eq(r.status, 401);
    resp_free(&r);
    /* The right selector with a wrong secret. */
    char *wrong = strdup(g_pub);
    wrong[strlen(wrong) - 1] = wrong[strlen(wrong) - 1] == '0' ? '1' : '0';
    o.token = wrong;
    publish(&r, path, &o);
    ck_assert_int_eq(r.status, 401);
    resp_free(&r);
    free(wrong);
    /* Expired. */
    char *expired = token("publisher", "*", "--name old --expires-at 1000");
    o.token = expired;
    publish(&r, path, &o);
    ck_assert_int_eq(r.status, 401);
    resp_free(&r);
    free(expired);
    /* A reader cannot publish. */
    o.token = g_reader;
    publish(&r, path, &o);
    ck_assert_int_eq(r.status, 403);
    resp_free(&r);
    /* A publisher whose scope does not cover "Game". */
    o.token = g_pub_other;
    publish(&r, path, &o);
    ck_assert_int_eq(r.status, 403);
    ck_assert_str_eq(jstr(r.json, "error", NULL), "out_of_scope");
    resp_free(&r);
    ck_assert_int_eq(count_dir("blobs"), 0);
    /* An admin token publishes anything. */
    o.token = g_admin;
    publish(&r, path, &o);
    ck_assert_int_eq(r.status, 201);
    resp_free(&r);
    free(path);

    /* Readers need a token when configured so. */
    ck_assert_int_eq(srv_stop(&g_srv), 0);
    const char *extra[] = {"--readers-need-token", "--metrics-need-token", "true", NULL};
    srv_start(&g_srv, extra);
    http(&r, "GET", "/metrics", NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 401);
    resp_free(&r);
    http(&r, "GET", "/metrics", g_reader, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    http(&r, "GET", "/v1/apps", NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 401);
    ck_assert_ptr_nonnull(header(&r, "WWW-Authenticate"));
    resp_free(&r);
    http(&r, "GET", "/v1/apps", g_reader, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    http(&r, "GET", "/v1/apps/Game/psdbs", g_pub_other, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 403);
    resp_free(&r);
    http(&r, "GET", "/healthz", NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);

    /* Revoked tokens and keys are refused at once; listings never show a secret. */
    char *list = run_line("%s token list --data-dir %s --json", PSDBD_BIN, g_data);
    ck_assert_ptr_nonnull(list);
    ck_assert_ptr_nonnull(strstr(list, "\"name\":\"reader\""));
    ck_assert_ptr_null(strstr(list, g_reader + 22)); /* the secret part */
    free(list);
    ck_assert_int_eq(run_status("%s token revoke --data-dir %s --name reader", PSDBD_BIN, g_data),
                     0);
    ck_assert_int_ne(run_status("%s token revoke --data-dir %s --name nobody", PSDBD_BIN, g_data),
                     0);
    http(&r, "GET", "/v1/apps", g_reader, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 401);
    resp_free(&r);
    ck_assert_int_eq(run_status("%s key revoke --data-dir %s --name main", PSDBD_BIN, g_data), 0);
    char *p2 = make_psdb(&base_spec);
    pub_opts o5 = {.serial = 9};
    publish(&r, p2, &o5);
    ck_assert_int_eq(r.status, 403);
    ck_assert_str_eq(jstr(r.json, "error", NULL), "unknown_key");
    resp_free(&r);
    free(p2);
}
END_TEST

START_TEST(test_server__signatures)
{
    srv_start(&g_srv, NULL);
    char *path = make_psdb(&base_spec);
    resp r;
    /* Signed by key2 but sent under key1's id. */
    pub_opts o = {.serial = 1, .key = g_key2};
    publish(&r, path, &o);
    ck_assert_int_eq(r.status, 403);
    ck_assert_str_eq(jstr(r.json, "error", NULL), "bad_signature");
    resp_free(&r);
    /* The serial header differs from the signed serial. */
    pub_opts o2 = {.serial = 1, .sent_serial = 2};
    publish(&r, path, &o2);
    ck_assert_int_eq(r.status, 403);
    resp_free(&r);
    /* An unregistered key id. */
    pub_opts o3 = {.serial = 1,
                   .kid = "0000000000000000000000000000000000000000000000000000000000"
                          "000000"};
    publish(&r, path, &o3);
    ck_assert_int_eq(r.status, 403);
    ck_assert_str_eq(jstr(r.json, "error", NULL), "unknown_key");
    resp_free(&r);
    /* key2 is registered with scope Other*: correct signature, wrong application. */
    pub_opts o4 = {.serial = 1, .key = g_key2, .kid = g_kid2};
    publish(&r, path, &o4);
    ck_assert_int_eq(r.status, 403);
    ck_assert_str_eq(jstr(r.json, "error", NULL), "out_of_scope");
    resp_free(&r);
    /* Missing headers. */
    http(&r, "POST", "/v1/psdbs", g_pub, NULL, path, NULL, 0);
    ck_assert_int_eq(r.status, 400);
    resp_free(&r);
    ck_assert_int_eq(count_dir("blobs"), 0);
    ck_assert(wait_tmp_empty());
    /* And key2 within its scope works. */
    spec s = base_spec;
    s.app = "OtherGame";
    char *other = make_psdb(&s);
    publish(&r, other, &o4);
    ck_assert_int_eq(r.status, 201);
    resp_free(&r);
    free(other);
    free(path);
}
END_TEST

START_TEST(test_server__invalid_bodies_and_conflicts)
{
    srv_start(&g_srv, NULL);
    resp r;
    /* Not a PSDB: 400, nothing stored. */
    char *junk = tu_path(g_dir, "junk.psdb");
    char data[4096];
    memset(data, 'x', sizeof(data));
    tu_write_file(junk, data, sizeof(data));
    const char *hs[] = {
        "X-Psdb-Serial: 1",
        "X-Psdb-Key-Id: 0000000000000000000000000000000000000000000000000000000000"
        "000000",
        "X-Psdb-Signature: "
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
        "AAAAAA==",
        NULL};
    char kid[128];
    snprintf(kid, sizeof(kid), "X-Psdb-Key-Id: %s", g_kid);
    hs[1] = kid;
    http(&r, "POST", "/v1/psdbs", g_pub, hs, junk, NULL, 0);
    ck_assert_int_eq(r.status, 400);
    ck_assert_str_eq(jstr(r.json, "error", NULL), "invalid_psdb");
    resp_free(&r);
    /* A truncated PSDB is not a PSDB either. */
    char *path = make_psdb(&base_spec);
    size_t n = 0;
    char *bytes = tu_read_file(path, &n);
    char *half = tu_path(g_dir, "half.psdb");
    tu_write_file(half, bytes, n / 2);
    http(&r, "POST", "/v1/psdbs", g_pub, hs, half, NULL, 0);
    ck_assert_int_eq(r.status, 400);
    resp_free(&r);
    ck_assert_int_eq(count_dir("blobs"), 0);
    ck_assert(wait_tmp_empty());

    /* Same identity + target + serial with other content: 409. */
    pub_opts o = {.serial = 4};
    publish(&r, path, &o);
    ck_assert_int_eq(r.status, 201);
    resp_free(&r);
    spec s = base_spec;
    s.seed = 99;
    char *other = make_psdb(&s);
    publish(&r, other, &o);
    ck_assert_int_eq(r.status, 409);
    ck_assert_str_eq(jstr(r.json, "error", NULL), "conflict");
    resp_free(&r);
    /* With another serial it is a new PSDB. */
    o.serial = 5;
    publish(&r, other, &o);
    ck_assert_int_eq(r.status, 201);
    resp_free(&r);
    /* An identity that is not UTF-8 never reaches the index (manifests are JSON). */
    spec bad = base_spec;
    bad.app = "Bad\xff\xfe";
    char *badp = make_psdb(&bad);
    o.serial = 1;
    publish(&r, badp, &o);
    ck_assert_int_eq(r.status, 400);
    ck_assert_str_eq(jstr(r.json, "error", NULL), "invalid_psdb");
    resp_free(&r);
    free(badp);
    http(&r, "GET", "/v1/apps", NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(json_array_size(json_object_get(r.json, "apps")), 1);
    resp_free(&r);
    /* Chunked bodies (no Content-Length) are refused. */
    const char *chunked[] = {"Transfer-Encoding: chunked", NULL};
    http(&r, "POST", "/v1/psdbs", g_pub, chunked, NULL, "abc", 3);
    ck_assert_int_eq(r.status, 411);
    resp_free(&r);
    free(bytes);
    free(half);
    free(junk);
    free(other);
    free(path);
}
END_TEST

/* Runs SQL on a PSDB written by make_psdb (damaging it on purpose). */
static void damage(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    char *err = NULL;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
    ck_assert_msg(rc == SQLITE_OK, "%s: %s", sql, err ? err : "?");
    sqlite3_free(err);
    sqlite3_close(db);
}

START_TEST(test_server__publish_refuses_what_verify_refuses)
{
    /* Each file opens (psdb_file_open accepts it: the damage is in rows and bytes) and is refused
     * by `psdb verify`; publish must refuse it the same way, naming the problem. */
    static const struct {
        const char *sql, *want;
    } kinds[] = {
        {"UPDATE header SET content_digest = zeroblob(32);", "content digest"},
        {"UPDATE header SET compiler_version = compiler_version + 1;", "content digest"},
        {"UPDATE value_entries SET size = size + 1 WHERE key = CAST('k000000' AS BLOB);", "size"},
        {"UPDATE value_entries SET blob_id = 999 WHERE key = CAST('k000000' AS BLOB);",
         "missing blob"},
        {"UPDATE blobs SET data = zeroblob(length(data)) WHERE id = 1;", "SHA-256"},
        {"UPDATE blobs SET data = x'00' || substr(data, 2) WHERE id = 1;", "malformed row"},
        /* Keys stored as text: every lookup (which binds a blob) would miss. */
        {"UPDATE value_entries SET key = CAST(key AS TEXT);", "malformed key"},
        {"INSERT INTO blobs (sha256, data) VALUES (x'4bf5122f344554c53bde2ebb8cd2b7e3d1600ad631c3"
         "85a5d7cce23c7785459a', x'01');",
         "not referenced"},
        {"INSERT INTO value_groups VALUES (x'67', 1); INSERT INTO group_members VALUES (x'67', 0, "
         "CAST('k000000' AS BLOB)), (x'67', 1, CAST('missing' AS BLOB)); UPDATE header SET "
         "num_groups = 1;",
         "missing value key"},
        {"INSERT INTO value_groups VALUES (x'67', 1); INSERT INTO group_members VALUES (x'67', 1, "
         "CAST('k000000' AS BLOB)); UPDATE header SET num_groups = 1;",
         "indexes"},
        {"INSERT INTO group_members VALUES (x'68', 0, CAST('k000000' AS BLOB));", "no group"},
        {"UPDATE value_groups SET key = CAST(key AS TEXT); INSERT INTO value_groups VALUES "
         "('g', 1); UPDATE header SET num_groups = 1;",
         "malformed key or version"},
        {"UPDATE header SET num_values = num_values + 1;", "counts"},
        {"UPDATE header SET blob_bytes = blob_bytes - 1;", "counts"},
        {"PRAGMA writable_schema = ON; UPDATE sqlite_schema SET sql = replace(sql, 'version "
         "INTEGER NOT NULL', 'version INTEGER NOT NULL, g AS (length(hex(zeroblob(100000000)))) "
         "VIRTUAL') WHERE name = 'value_groups';",
         "schema differs"},
    };
    srv_start(&g_srv, NULL);
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        char *path = make_psdb(&base_spec);
        resp r;
        pub_opts o = {.serial = 1 + i};
        psdb_file *f = NULL;
        damage(path, kinds[i].sql);
        if (psdb_file_open(path, NULL, &f) == PSDB_S_OK) {
            psdb_file_release(f);
            publish(&r, path, &o);
        } else {
            /* Not even open accepts it, so it cannot be signed here: checked before the
             * signature, it must be refused all the same. */
            char kid[128];
            snprintf(kid, sizeof(kid), "X-Psdb-Key-Id: %s", g_kid);
            const char *hs[] = {"X-Psdb-Serial: 1", kid,
                                "X-Psdb-Signature: "
                                "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
                                "AAAAAAAAAAAAAAAAAAAA==",
                                NULL};
            http(&r, "POST", "/v1/psdbs", g_pub, hs, path, NULL, 0);
        }
        ck_assert_msg(r.status == 400, "%s: status %ld", kinds[i].sql, (long)r.status);
        ck_assert_str_eq(jstr(r.json, "error", NULL), "invalid_psdb");
        const char *m = jstr(r.json, "message", NULL);
        ck_assert_msg(m && strstr(m, kinds[i].want), "%s: %s", kinds[i].sql, m ? m : "(none)");
        resp_free(&r);
        free(path);
    }
    /* Nothing indexed, no blob stored, no upload left behind. */
    resp r;
    http(&r, "GET", "/v1/apps", NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(json_array_size(json_object_get(r.json, "apps")), 0);
    resp_free(&r);
    ck_assert_int_eq(count_dir("blobs"), 0);
    ck_assert(wait_tmp_empty());
    /* The undamaged file publishes. */
    char *good = make_psdb(&base_spec);
    pub_opts o = {.serial = 100};
    publish(&r, good, &o);
    ck_assert_int_eq(r.status, 201);
    resp_free(&r);
    free(good);
}
END_TEST

START_TEST(test_server__upload_limit_and_broken_uploads)
{
    const char *extra[] = {"--max-upload", "64K", "--timeout", "2", NULL};
    srv_start(&g_srv, extra);
    spec s = base_spec;
    s.payload = 200 * 1024;
    char *big = make_psdb(&s);
    resp r;
    pub_opts o = {.serial = 1};
    publish(&r, big, &o);
    ck_assert_int_eq(r.status, 413);
    ck_assert_str_eq(jstr(r.json, "error", NULL), "too_large");
    resp_free(&r);

    /* 413 is answered from the headers alone: no body byte is sent. */
    char req[1024], out[4096];
    int len = snprintf(req, sizeof(req),
                       "POST /v1/psdbs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                       "Content-Length: 1000000000\r\nX-Psdb-Serial: 1\r\n\r\n",
                       g_pub);
    raw(req, (size_t)len, 0, out, sizeof(out));
    ck_assert_msg(strncmp(out, "HTTP/1.1 413", 12) == 0, "got: %.80s", out);

    /* A client that disconnects mid-body leaves nothing behind. */
    char *small = make_psdb(&base_spec);
    size_t n = 0;
    char *bytes = tu_read_file(small, &n);
    char sig_line[256];
    {
        psdb_file *f = NULL;
        psdb_file_info info;
        psdb_statement st = {0};
        char sig[PSDB_SIGNATURE_B64_SIZE];
        psdb_file_open(small, NULL, &f);
        psdb_file_get_info(f, &info);
        sha256_file(small, st.sha256, &st.size);
        st.identity = info.identity;
        st.target = info.target;
        st.serial = 1;
        psdb_statement_sign(g_key, &st, sig);
        psdb_file_release(f);
        snprintf(sig_line, sizeof(sig_line), "X-Psdb-Signature: %s\r\n", sig);
    }
    char *head = NULL;
    ck_assert_int_ge(
        asprintf(&head,
                 "POST /v1/psdbs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                 "Content-Length: %zu\r\nX-Psdb-Serial: 1\r\nX-Psdb-Key-Id: %s\r\n%s\r\n",
                 g_pub, n, g_kid, sig_line),
        0);
    size_t hl = strlen(head);
    char *msg = malloc(hl + n);
    memcpy(msg, head, hl);
    memcpy(msg + hl, bytes, n);
    raw(msg, hl + n / 2, 1, out, sizeof(out)); /* half the body, then the client hangs up */
    ck_assert(wait_tmp_empty());
    /* A Content-Length that promises more than is sent: the server times the connection out. */
    raw(msg, hl + n - 10, 0, out, sizeof(out));
    ck_assert_uint_eq(strlen(out), 0);
    ck_assert(wait_tmp_empty());
    ck_assert_int_eq(count_dir("blobs"), 0);
    /* The whole message still works. */
    raw(msg, hl + n, 0, out, sizeof(out));
    ck_assert_msg(strncmp(out, "HTTP/1.1 201", 12) == 0, "got: %.200s", out);
    /* A Content-Length that promises less: the server reads a truncated PSDB (400). */
    char *lie = NULL;
    ck_assert_int_ge(
        asprintf(&lie,
                 "POST /v1/psdbs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                 "Content-Length: %zu\r\nX-Psdb-Serial: 2\r\nX-Psdb-Key-Id: %s\r\n%s\r\n",
                 g_pub, n / 2, g_kid, sig_line),
        0);
    size_t ll = strlen(lie);
    char *msg2 = malloc(ll + n);
    memcpy(msg2, lie, ll);
    memcpy(msg2 + ll, bytes, n);
    raw(msg2, ll + n, 1, out, sizeof(out));
    ck_assert_msg(strncmp(out, "HTTP/1.1 400", 12) == 0, "got: %.200s", out);
    ck_assert(wait_tmp_empty());
    /* The server is fine afterwards. */
    http(&r, "GET", "/readyz", NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    free(lie);
    free(msg2);
    free(msg);
    free(head);
    free(bytes);
    free(small);
    free(big);
}
END_TEST

START_TEST(test_server__hostile_urls_and_headers)
{
    srv_start(&g_srv, NULL);
    resp r;
    const char *bad[] = {
        "/v1/blobs/xyz",
        "/v1/blobs/../../../../etc/passwd",
        "/v1/blobs/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        "/v1/blobs/0932E7EB35728098E2F102F21F38EE11458D745D063846890EBCA1219612A43A",
        "/v1/blobs/0932e7eb35728098e2f102f21f38ee11458d745d063846890ebca1219612a43a0",
        "/v1/blobs/0932e7eb35728098e2f102f21f38ee11458d745d063846890ebca1219612a43",
        "/v1/blobs/",
        "/v1/psdbs/1abc",
        "/v1/psdbs/-1",
        "/v1/psdbs/99999999999999999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        http(&r, "GET", bad[i], NULL, NULL, NULL, NULL, 0);
        ck_assert_msg(r.status == 400, "%s: %ld", bad[i], r.status);
        resp_free(&r);
    }
    http(&r, "GET", "/v1/blobs/0932e7eb35728098e2f102f21f38ee11458d745d063846890ebca1219612a43a",
         NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 404);
    resp_free(&r);
    http(&r, "GET", "/../../etc/passwd", NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 404);
    resp_free(&r);
    http(&r, "PUT", "/v1/apps", NULL, NULL, NULL, "x", 1);
    ck_assert_int_eq(r.status, 405);
    resp_free(&r);

    /* A huge header is refused (431 or a closed connection), and the server stays up. */
    size_t big = 256 * 1024;
    char *req = malloc(big + 256);
    int l = snprintf(req, 256, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ");
    memset(req + l, 'a', big);
    memcpy(req + l + big, "\r\n\r\n", 4);
    char out[4096];
    raw(req, (size_t)l + big + 4, 0, out, sizeof(out));
    ck_assert_msg(out[0] == '\0' || strncmp(out, "HTTP/1.1 431", 12) == 0 ||
                      strncmp(out, "HTTP/1.1 413", 12) == 0,
                  "got: %.80s", out);
    free(req);

    /* Many idle connections do not stop others from being served. */
    int socks[300];
    for (int i = 0; i < 300; i++) {
        socks[i] = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_srv.port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ck_assert_int_eq(connect(socks[i], (struct sockaddr *)&a, sizeof(a)), 0);
    }
    http(&r, "GET", "/healthz", NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    for (int i = 0; i < 300; i++)
        close(socks[i]);
}
END_TEST

START_TEST(test_server__disk_full_is_507)
{
    /* A file-size limit makes every write past 256 KiB fail with EFBIG, as a full disk would. */
    ck_assert_int_eq(srv_try_start(&g_srv, NULL, 256 * 1024), 0);
    spec s = base_spec;
    s.payload = 600 * 1024;
    char *big = make_psdb(&s);
    resp r;
    pub_opts o = {.serial = 1};
    publish(&r, big, &o);
    ck_assert_int_eq(r.status, 507);
    ck_assert_str_eq(jstr(r.json, "error", NULL), "disk_full");
    resp_free(&r);
    ck_assert(wait_tmp_empty());
    ck_assert_int_eq(count_dir("blobs"), 0);
    /* A small one still fits. */
    char *small = make_psdb(&base_spec);
    publish(&r, small, &o);
    ck_assert_int_eq(r.status, 201);
    resp_free(&r);
    ck_assert_int_eq(srv_stop(&g_srv), 0);
    ck_assert_int_eq(run_status("%s check --data-dir %s --deep", PSDBD_BIN, g_data), 0);
    free(small);
    free(big);
}
END_TEST

START_TEST(test_server__sigterm_finishes_inflight_request)
{
    srv_start(&g_srv, NULL);
    char *path = make_psdb(&base_spec);
    size_t n = 0;
    char *bytes = tu_read_file(path, &n);
    char hdr[1024];
    psdb_file *f = NULL;
    psdb_file_info info;
    psdb_statement st = {0};
    char sig[PSDB_SIGNATURE_B64_SIZE];
    psdb_file_open(path, NULL, &f);
    psdb_file_get_info(f, &info);
    sha256_file(path, st.sha256, &st.size);
    st.identity = info.identity;
    st.target = info.target;
    st.serial = 1;
    psdb_statement_sign(g_key, &st, sig);
    psdb_file_release(f);
    int hl = snprintf(hdr, sizeof(hdr),
                      "POST /v1/psdbs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                      "Content-Length: %zu\r\nX-Psdb-Serial: 1\r\nX-Psdb-Key-Id: %s\r\n"
                      "X-Psdb-Signature: %s\r\n\r\n",
                      g_pub, n, g_kid, sig);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_srv.port)};
    struct timeval tv = {10, 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(s, (struct sockaddr *)&a, sizeof(a)), 0);
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ck_assert_int_eq(send(s, hdr, (size_t)hl, 0), hl);
    ck_assert_int_eq(send(s, bytes, n / 2, 0), (ssize_t)(n / 2));
    /* Wait until the upload file exists: the request is in flight. */
    for (int i = 0; i < 500 && count_dir("tmp") == 0; i++)
        usleep(10000);
    ck_assert_int_eq(count_dir("tmp"), 1);
    kill(g_srv.pid, SIGTERM);
    ck_assert_int_eq(send(s, bytes + n / 2, n - n / 2, 0), (ssize_t)(n - n / 2));
    char out[4096];
    ssize_t got = recv(s, out, sizeof(out) - 1, 0);
    ck_assert_int_gt(got, 12);
    out[got] = '\0';
    ck_assert_msg(strncmp(out, "HTTP/1.1 201", 12) == 0, "got: %.200s", out);
    close(s);
    int status = 0;
    waitpid(g_srv.pid, &status, 0);
    g_srv.pid = 0;
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_int_eq(run_status("%s check --data-dir %s --deep", PSDBD_BIN, g_data), 0);
    free(bytes);
    free(path);
}
END_TEST

START_TEST(test_server__kill9_during_publishes)
{
    enum { ROUNDS = 5, CLIENTS = 6 };
    spec s = base_spec;
    s.payload = 512 * 1024;
    char *path = make_psdb(&s);
    char *acked_path = tu_path(g_dir, "acked");
    srand(12345);
    uint64_t serial = 1;
    for (int round = 0; round < ROUNDS; round++) {
        srv_start(&g_srv, NULL);
        pid_t kids[CLIENTS];
        for (int c = 0; c < CLIENTS; c++) {
            uint64_t my = serial++;
            kids[c] = fork();
            ck_assert_int_ge(kids[c], 0);
            if (kids[c] == 0) {
                /* Each client publishes its serial; an acknowledged one is recorded. */
                resp r;
                g_soft = 1;
                pub_opts o = {.serial = my};
                publish(&r, path, &o);
                if (r.status == 201 || r.status == 200) {
                    FILE *f = fopen(acked_path, "a");
                    fprintf(f, "%lld %llu\n", jint(r.json, "id", NULL), (unsigned long long)my);
                    fclose(f);
                }
                _exit(0);
            }
        }
        usleep((useconds_t)(rand() % 150000));
        srv_kill9(&g_srv);
        for (int c = 0; c < CLIENTS; c++) {
            int st;
            waitpid(kids[c], &st, 0);
        }
        /* After a crash: the index is consistent, every acknowledged publish is there. */
        ck_assert_int_eq(run_status("%s check --data-dir %s --deep", PSDBD_BIN, g_data), 0);
    }
    srv_start(&g_srv, NULL);
    ck_assert_int_eq(count_dir("tmp"), 0); /* leftovers removed at start */
    FILE *f = fopen(acked_path, "r");
    long long id;
    unsigned long long ser;
    int acked = 0;
    while (f && fscanf(f, "%lld %llu", &id, &ser) == 2) {
        resp r;
        char p[64];
        snprintf(p, sizeof(p), "/v1/psdbs/%lld", id);
        http(&r, "GET", p, NULL, NULL, NULL, NULL, 0);
        ck_assert_msg(r.status == 200, "acknowledged psdb %lld lost", id);
        ck_assert_int_eq(jint(r.json, "serial", NULL), (long long)ser);
        resp_free(&r);
        acked++;
    }
    if (f)
        fclose(f);
    fprintf(stderr, "kill -9 test: %d acknowledged publishes survived %d crashes\n", acked, ROUNDS);
    /* gc removes only unindexed blob files. */
    ck_assert_int_eq(srv_stop(&g_srv), 0);
    ck_assert_int_eq(run_status("%s gc --data-dir %s --grace 0", PSDBD_BIN, g_data), 0);
    ck_assert_int_eq(run_status("%s check --data-dir %s --deep", PSDBD_BIN, g_data), 0);
    free(acked_path);
    free(path);
}
END_TEST

START_TEST(test_server__check_gc_and_schema_version)
{
    srv_start(&g_srv, NULL);
    long long id = publish_ok(&base_spec, 1);
    (void)id;
    ck_assert_int_eq(srv_stop(&g_srv), 0);
    ck_assert_int_eq(run_status("%s check --data-dir %s --deep", PSDBD_BIN, g_data), 0);
    /* An orphan blob file: gc --dry-run keeps it, gc removes it; check passes either way. */
    char *dir = tu_path(g_data, "blobs/ab");
    mkdir(dir, 0755);
    char *orphan = tu_path(dir, "ab00000000000000000000000000000000000000000000000000000000000000");
    tu_write_file(orphan, "junk", 4);
    ck_assert_int_eq(run_status("%s check --data-dir %s", PSDBD_BIN, g_data), 0);
    ck_assert_int_eq(run_status("%s gc --data-dir %s --dry-run --grace 0", PSDBD_BIN, g_data), 0);
    ck_assert_int_eq(access(orphan, F_OK), 0);
    ck_assert_int_eq(run_status("%s gc --data-dir %s --grace 0", PSDBD_BIN, g_data), 0);
    ck_assert_int_ne(access(orphan, F_OK), 0);
    /* A damaged blob fails the deep check. */
    resp r;
    srv_start(&g_srv, NULL);
    http(&r, "GET", "/v1/psdbs/1", NULL, NULL, NULL, NULL, 0);
    char *blob = NULL;
    const char *sha = jstr(r.json, "sha256", NULL);
    ck_assert_int_ge(asprintf(&blob, "%s/blobs/%.2s/%s", g_data, sha, sha), 0);
    resp_free(&r);
    ck_assert_int_eq(srv_stop(&g_srv), 0);
    chmod(blob, 0644);
    FILE *f = fopen(blob, "r+b");
    ck_assert_ptr_nonnull(f);
    fseek(f, 100, SEEK_SET);
    fputc(0x55, f);
    fclose(f);
    ck_assert_int_eq(run_status("%s check --data-dir %s", PSDBD_BIN, g_data), 0);
    ck_assert_int_ne(run_status("%s check --data-dir %s --deep", PSDBD_BIN, g_data), 0);
    /* A missing blob fails the plain check, and gc keeps what it would have removed. */
    unlink(blob);
    ck_assert_int_ne(run_status("%s check --data-dir %s", PSDBD_BIN, g_data), 0);
    tu_write_file(orphan, "junk", 4);
    ck_assert_int_eq(run_status("%s gc --data-dir %s --grace 0", PSDBD_BIN, g_data), 1);
    ck_assert_int_eq(access(orphan, F_OK), 0);
    free(blob);
    /* An index newer than this psdbd is refused. */
    char *ixp = tu_path(g_data, "index.sqlite");
    if (g_pg) {
        ck_assert_int_eq(pg_sql(g_pg_db, "UPDATE psdbd_schema SET version = 999"), 0);
    } else {
        sqlite3 *db = NULL;
        ck_assert_int_eq(sqlite3_open(ixp, &db), SQLITE_OK);
        ck_assert_int_eq(sqlite3_exec(db, "PRAGMA user_version = 999", NULL, NULL, NULL),
                         SQLITE_OK);
        sqlite3_close(db);
    }
    ck_assert_int_eq(srv_try_start(&g_srv, NULL, 0), -1);
    char *log = tu_read_file(g_log, NULL);
    ck_assert_ptr_nonnull(strstr(log, "newer than this psdbd knows"));
    free(log);
    free(ixp);
    free(orphan);
    free(dir);
}
END_TEST

START_TEST(test_server__tool_keygen_and_publish)
{
    srv_start(&g_srv, NULL);
    char *key = tu_path(g_dir, "toolkey");
    ck_assert_int_eq(run_status("%s keygen -o %s", PSDB_TOOL, key), 0);
    ck_assert_int_ne(run_status("%s keygen -o %s", PSDB_TOOL, key), 0); /* never overwrites */
    ck_assert_int_eq(run_status("%s key add --data-dir %s --name tool --public-key %s.pub",
                                PSDBD_BIN, g_data, key),
                     0);
    char *path = make_psdb(&base_spec);
    char *line = run_line("%s publish --server %s --token %s --key %s --serial 7 %s", PSDB_TOOL,
                          g_srv.base, g_pub, key, path);
    ck_assert_ptr_nonnull(line);
    ck_assert_msg(strncmp(line, "published id ", 13) == 0, "%s", line);
    free(line);
    line = run_line("%s publish --server %s --token %s --key %s --serial 7 %s", PSDB_TOOL,
                    g_srv.base, g_pub, key, path);
    ck_assert_msg(line && strncmp(line, "already published", 17) == 0, "%s", line);
    free(line);
    /* A wrong token fails with a non-zero exit status. */
    ck_assert_int_ne(run_status("%s publish --server %s --token nope --key %s %s", PSDB_TOOL,
                                g_srv.base, key, path),
                     0);
    ck_assert_int_eq(resolve_id("abi_min=7&abi_max=7"), 1);
    free(path);
    free(key);
}
END_TEST

START_TEST(test_server__native_tls_from_config_file)
{
    char *cert = tu_path(g_dir, "cert.pem"), *key = tu_path(g_dir, "key.pem");
    char *conf = tu_path(g_dir, "psdbd.conf");
    ck_assert_int_eq(run_status("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
                                "-nodes -keyout %s -out %s -days 1 -subj /CN=127.0.0.1",
                                key, cert),
                     0);
    FILE *f = fopen(conf, "w");
    fprintf(f, "# native HTTPS\ntls-cert = %s\ntls-key = %s\nmax-upload = 1M\n", cert, key);
    fclose(f);
    const char *extra[] = {"--config", conf, NULL};
    srv_start(&g_srv, extra);
    ck_assert_msg(strncmp(g_srv.base, "https://", 8) == 0, "%s", g_srv.base);
    resp r;
    http(&r, "GET", "/healthz", NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    /* Blobs over TLS (no sendfile there) and the upload limit from the file. */
    char *path = make_psdb(&base_spec);
    pub_opts o = {.serial = 1};
    publish(&r, path, &o);
    ck_assert_int_eq(r.status, 201);
    char url[128];
    snprintf(url, sizeof(url), "%s", jstr(r.json, "url", NULL));
    resp_free(&r);
    size_t n = 0;
    char *bytes = tu_read_file(path, &n);
    http(&r, "GET", url, NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.body.len, n);
    ck_assert_mem_eq(r.body.data, bytes, n);
    resp_free(&r);
    spec s = base_spec;
    s.payload = 2 << 20;
    char *big = make_psdb(&s);
    publish(&r, big, &o);
    ck_assert_int_eq(r.status, 413);
    resp_free(&r);
    ck_assert_int_eq(srv_stop(&g_srv), 0);
    /* A half-given TLS setting is refused. */
    const char *half[] = {"--tls-cert", cert, NULL};
    ck_assert_int_eq(srv_try_start(&g_srv, half, 0), -1);
    free(big);
    free(bytes);
    free(path);
    free(conf);
    free(cert);
    free(key);
}
END_TEST

/* psdb_client_publish goes through the client's curl setup, as resolve and download do: over
 * native HTTPS with a self-signed certificate it succeeds only with the client's ca_file, and a
 * pinned key other than the server's fails the upload before anything is sent. */
START_TEST(test_server__client_publish_uses_the_clients_ca_file_and_pin)
{
    char *cert = tu_path(g_dir, "cert.pem"), *tkey = tu_path(g_dir, "tlskey.pem");
    char *conf = tu_path(g_dir, "psdbd.conf"), *key = tu_path(g_dir, "key");
    ck_assert_int_eq(run_status("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
                                "-nodes -keyout %s -out %s -days 1 -subj /CN=127.0.0.1 "
                                "-addext subjectAltName=IP:127.0.0.1 2>/dev/null",
                                tkey, cert),
                     0);
    char *pin = run_line("openssl x509 -in %s -pubkey -noout | openssl pkey -pubin -outform der | "
                         "openssl dgst -sha256 -binary | base64",
                         cert);
    ck_assert_ptr_nonnull(pin);
    char right_pin[128];
    snprintf(right_pin, sizeof(right_pin), "sha256//%s", pin);
    FILE *f = fopen(conf, "w");
    fprintf(f, "tls-cert = %s\ntls-key = %s\n", cert, tkey);
    fclose(f);
    const char *extra[] = {"--config", conf, NULL};
    srv_start(&g_srv, extra);
    ck_assert_msg(strncmp(g_srv.base, "https://", 8) == 0, "%s", g_srv.base);
    char *path = make_psdb(&base_spec);
    psdb_publish_desc pd = {.key_path = key, .psdb_path = path, .serial = 1};
    psdb_publish_result *r = NULL;
    struct {
        const char *ca_file, *pin;
        psdb_hr want;
        const char *says; /* in the message on failure */
    } cases[] = {
        {NULL, NULL, PSDB_E_NETWORK, "certificate"}, /* the system's CAs do not know it */
        {cert, "sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", PSDB_E_NETWORK, "pin"},
        {cert, right_pin, PSDB_S_OK, NULL},
        {cert, NULL, PSDB_S_FALSE, NULL}, /* the same content again */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        psdb_client_desc cd = {.server_url = g_srv.base,
                               .token = g_pub,
                               .ca_file = cases[i].ca_file,
                               .pinned_public_key = cases[i].pin,
                               .max_retries = 1,
                               .retry_base_ms = 1};
        psdb_client *c = NULL;
        ck_assert_hr(psdb_client_create(&cd, &c), PSDB_S_OK);
        psdb_hr hr = psdb_client_publish(c, &pd, &r);
        ck_assert_msg(hr == cases[i].want, "case %zu: %s (%s)", i, psdb_hr_str(hr), r->message);
        if (cases[i].says)
            ck_assert_msg(strstr(r->message, cases[i].says), "case %zu: %s", i, r->message);
        psdb_publish_result_free(r);
        psdb_client_release(c);
    }
    ck_assert_int_eq(srv_stop(&g_srv), 0);
    free(pin);
    free(path);
    free(conf);
    free(cert);
    free(tkey);
    free(key);
}
END_TEST

START_TEST(test_server__blob_over_4gib)
{
    /* A sparse 5 GiB file in the store (blobs are served by name; the index is not consulted). */
    const char *sha = "5555555555555555555555555555555555555555555555555555555555555555";
    char *sub = tu_path(g_data, "blobs/55");
    mkdir(g_data, 0755);
    char *blobs = tu_path(g_data, "blobs");
    mkdir(blobs, 0755);
    mkdir(sub, 0755);
    char *file = tu_path(sub, sha);
    int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    const uint64_t size = 5ull << 30;
    ck_assert_int_eq(pwrite(fd, "tail", 4, (off_t)(size - 4)), 4);
    ck_assert_int_eq(pwrite(fd, "mark", 4, (off_t)5000000000ull), 4);
    close(fd);
    srv_start(&g_srv, NULL);
    char url[128];
    snprintf(url, sizeof(url), "/v1/blobs/%s", sha);
    resp r;
    http(&r, "HEAD", url, NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(header(&r, "Content-Length"), "5368709120");
    resp_free(&r);
    const char *range[] = {"Range: bytes=5000000000-5000000003", NULL};
    http(&r, "GET", url, NULL, range, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 206);
    ck_assert_uint_eq(r.body.len, 4);
    ck_assert_mem_eq(r.body.data, "mark", 4);
    ck_assert_str_eq(header(&r, "Content-Range"), "bytes 5000000000-5000000003/5368709120");
    resp_free(&r);
    const char *last[] = {"Range: bytes=-4", NULL};
    http(&r, "GET", url, NULL, last, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 206);
    ck_assert_mem_eq(r.body.data, "tail", 4);
    resp_free(&r);
    http(&r, "GET", "/v1/psdbs/12345", NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 404);
    resp_free(&r);
    unlink(file);
    free(file);
    free(sub);
    free(blobs);
}
END_TEST

/* A body of many hashing steps whose size is no multiple of a step: the digest computed while it
 * arrives (upload_hash.c maps the file back behind the writer) is the file's SHA-256, and the
 * stored blob is the file. */
START_TEST(test_server__large_upload_hashed_while_it_arrives)
{
    srv_start(&g_srv, NULL);
    spec sp = base_spec;
    sp.payload = (21u << 20) + 12345;
    sp.seed = 77;
    char *path = make_psdb(&sp);
    uint8_t digest[32], got[32];
    char sha[65], url[128];
    uint64_t size = 0;
    unsigned len = 32;
    resp r;
    sha256_file(path, digest, &size);
    hex(digest, 32, sha);
    ck_assert_uint_ne(size % (1u << 20), 0); /* a last, partial step */
    pub_opts o = {.serial = 1};
    publish(&r, path, &o);
    ck_assert_msg(r.status == 201, "publish: %ld %s", r.status, r.body.data);
    ck_assert_str_eq(jstr(r.json, "sha256", NULL), sha);
    ck_assert_int_eq(jint(r.json, "size", NULL), (long long)size);
    resp_free(&r);
    snprintf(url, sizeof(url), "/v1/blobs/%s", sha);
    http(&r, "GET", url, NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.body.len, size);
    EVP_Digest(r.body.data, r.body.len, got, &len, EVP_sha256(), NULL);
    ck_assert_mem_eq(got, digest, 32);
    resp_free(&r);
    free(path);
}
END_TEST

/* ---- the index never silently starts over ---------------------------------------------------- */

/* The sha256 of PSDB `id`, from its manifest (malloc'd). */
static char *sha_of(long long id, const char *tok)
{
    resp r;
    char p[64];
    snprintf(p, sizeof(p), "/v1/psdbs/%lld", id);
    http(&r, "GET", p, tok, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    char *sha = strdup(jstr(r.json, "sha256", NULL));
    resp_free(&r);
    return sha;
}

static char *blob_path(const char *sha)
{
    char *p = NULL;
    ck_assert_int_ge(asprintf(&p, "%s/blobs/%.2s/%s", g_data, sha, sha), 0);
    return p;
}

static void expect_status(const char *method, const char *path, const char *tok, long status,
                          const char *error)
{
    resp r;
    http(&r, method, path, tok, NULL, NULL, NULL, 0);
    ck_assert_msg(r.status == status, "%s %s: %ld, expected %ld (%s)", method, path, r.status,
                  status, r.body.data ? r.body.data : "");
    if (error && strcmp(method, "HEAD") != 0)
        ck_assert_str_eq(jstr(r.json, "error", NULL), error);
    resp_free(&r);
}

/* Every route that needs the index answers 503 after the index file went away, and nothing
 * creates a new one. */
static void expect_index_unavailable(long long id)
{
    char p[64];
    snprintf(p, sizeof(p), "/v1/psdbs/%lld", id);
    /* Several times: each worker thread has its own connection (4 threads). */
    for (int i = 0; i < 8; i++)
        expect_status("GET", "/readyz", NULL, 503, "not_ready");
    spec s = base_spec;
    s.seed = 42;
    char *path = make_psdb(&s);
    resp r;
    pub_opts o = {.serial = 7};
    publish(&r, path, &o);
    ck_assert_msg(r.status == 503, "publish: %ld %s", r.status, r.body.data);
    ck_assert_str_eq(jstr(r.json, "error", NULL), "index_unavailable");
    resp_free(&r);
    free(path);
    expect_status("DELETE", p, g_pub, 503, "index_unavailable");
    expect_status("GET", "/v1/apps", g_reader, 503, "index_unavailable");
    expect_status("GET", "/v1/apps/Game/psdbs", NULL, 503, "index_unavailable");
    expect_status("GET", p, NULL, 503, "index_unavailable");
}

START_TEST(test_server__index_removed_under_running_server_is_503)
{
    srv_start(&g_srv, NULL);
    long long id = publish_ok(&base_spec, 1);
    char *ixp = tu_path(g_data, "index.sqlite");
    expect_status("GET", "/readyz", NULL, 200, NULL);
    ck_assert_int_eq(unlink(ixp), 0);
    expect_index_unavailable(id);
    ck_assert_msg(access(ixp, F_OK) != 0, "a new index.sqlite was created");
    char *log = tu_read_file(g_log, NULL);
    ck_assert_ptr_nonnull(strstr(log, "index.sqlite was removed while psdbd runs"));
    free(log);

    /* Replaced by another file (here an empty SQLite database): still refused, and psdbd writes
     * nothing into it. */
    sqlite3 *db = NULL;
    ck_assert_int_eq(sqlite3_open(ixp, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db, "CREATE TABLE x (y)", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    expect_index_unavailable(id);
    ck_assert_int_eq(sqlite3_open(ixp, &db), SQLITE_OK);
    sqlite3_stmt *st = NULL;
    ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT count(*) FROM sqlite_master", -1, &st, NULL),
                     SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_int_eq(sqlite3_column_int(st, 0), 1);
    sqlite3_finalize(st);
    sqlite3_close(db);
    log = tu_read_file(g_log, NULL);
    ck_assert_ptr_nonnull(strstr(log, "index.sqlite was replaced by another file"));
    free(log);
    ck_assert_int_eq(srv_stop(&g_srv), 0);
    free(ixp);
}
END_TEST

/* ---- PostgreSQL: the database lost and back, replicas racing ----------------------------------
 */

/* Connections to the test's database refused (allow 0) or admitted again; refusing also ends the
 * ones psdbd holds, as a database restart would. */
static void pg_allow_connections(int allow)
{
    char *sql = NULL;
    ck_assert_int_ge(
        asprintf(&sql, "ALTER DATABASE %s ALLOW_CONNECTIONS %s", g_pg_db, allow ? "true" : "false"),
        0);
    ck_assert_int_eq(pg_sql(NULL, sql), 0);
    free(sql);
    if (!allow) {
        ck_assert_int_ge(asprintf(&sql,
                                  "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                  "WHERE datname = '%s'",
                                  g_pg_db),
                         0);
        ck_assert_int_eq(pg_sql(NULL, sql), 0);
        free(sql);
    }
}

static long readyz_status(void)
{
    resp r;
    http(&r, "GET", "/readyz", NULL, NULL, NULL, NULL, 0);
    long status = r.status;
    resp_free(&r);
    return status;
}

START_TEST(test_server__pg_database_lost_is_503_and_recovers_without_restart)
{
    srv_start(&g_srv, NULL);
    long long id = publish_ok(&base_spec, 1);
    char p[64];
    snprintf(p, sizeof(p), "/v1/psdbs/%lld", id);
    expect_status("GET", "/readyz", NULL, 200, NULL);
    pg_allow_connections(0);
    expect_index_unavailable(id);
    /* Back: the same process answers again once its prober found the database (a few times a
     * second), its pool reconnects (readyz first, as a load balancer would look). */
    pg_allow_connections(1);
    for (int i = 0; i < 100 && readyz_status() != 200; i++)
        usleep(50000);
    for (int i = 0; i < 8; i++)
        expect_status("GET", "/readyz", NULL, 200, NULL);
    expect_status("GET", p, NULL, 200, NULL);
    long long id2 = publish_ok(&base_spec, 2);
    ck_assert_int_gt(id2, id);
    char *log = tu_read_file(g_log, NULL);
    ck_assert_ptr_nonnull(strstr(log, "cannot be reached"));
    ck_assert_ptr_nonnull(strstr(log, "answers again"));
    free(log);
    ck_assert_int_eq(srv_stop(&g_srv), 0);
}
END_TEST

/* Publishes sp as serial 1 to s in a child; exits 0 on 201, 1 on 409, 2 otherwise. */
static pid_t publish_in_child(const srv *s, const char *path)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        resp r;
        pub_opts o = {.serial = 1};
        g_srv = *s;
        g_soft = 1;
        publish(&r, path, &o);
        _exit(r.status == 201 ? 0 : r.status == 409 ? 1 : 2);
    }
    return pid;
}

START_TEST(test_server__pg_two_replicas_same_identity_one_201_one_409)
{
    /* Two psdbd on one database and one blob store; each round publishes one identity with
     * other bytes to each at once. */
    enum { ROUNDS = 6 };
    srv a = {0}, b = {0};
    srv_start(&a, NULL);
    srv_start(&b, NULL);
    for (int i = 0; i < ROUNDS; i++) {
        spec s1 = base_spec, s2 = base_spec;
        char app[32];
        snprintf(app, sizeof(app), "Race%d", i);
        s1.app = s2.app = app;
        s1.seed = 100 + i;
        s2.seed = 200 + i;
        char *p1 = make_psdb(&s1), *p2 = make_psdb(&s2);
        pid_t c1 = publish_in_child(&a, p1), c2 = publish_in_child(&b, p2);
        int st1 = 0, st2 = 0;
        waitpid(c1, &st1, 0);
        waitpid(c2, &st2, 0);
        ck_assert(WIFEXITED(st1) && WIFEXITED(st2));
        int x = WEXITSTATUS(st1), y = WEXITSTATUS(st2);
        ck_assert_msg((x == 0 && y == 1) || (x == 1 && y == 0),
                      "round %d: replica answers %d and %d (0: 201, 1: 409)", i, x, y);
        free(p1);
        free(p2);
    }
    /* One row per identity, visible on both replicas. */
    for (int k = 0; k < 2; k++) {
        resp r;
        g_srv = k ? b : a;
        http(&r, "GET", "/v1/apps", g_reader, NULL, NULL, NULL, 0);
        ck_assert_int_eq(r.status, 200);
        json_t *apps = json_object_get(r.json, "apps");
        ck_assert_int_eq(json_array_size(apps), ROUNDS);
        for (size_t i = 0; i < json_array_size(apps); i++)
            ck_assert_int_eq(jint(json_array_get(apps, i), "psdbs", NULL), 1);
        resp_free(&r);
    }
    g_srv.pid = 0;
    ck_assert_int_eq(srv_stop(&a), 0);
    ck_assert_int_eq(srv_stop(&b), 0);
    ck_assert_int_eq(run_status("%s check --data-dir %s --deep", PSDBD_BIN, g_data), 0);
}
END_TEST

START_TEST(test_server__pg_publish_and_retire_on_one_replica_reach_anothers_resolve_cache)
{
    /* B answers (and caches, on every worker thread) a miss, then an answer; a publish and a
     * retire on A must reach B's cache, not wait for B's own next publish. */
    srv a = {0}, b = {0};
    const char *q = "abi_min=1&abi_max=9&profile_version=1.2.0.0";
    srv_start(&a, NULL);
    srv_start(&b, NULL);
    g_srv = b;
    for (int i = 0; i < 16; i++)
        ck_assert_int_eq(resolve_id(q), -1);
    g_srv = a;
    long long id1 = publish_ok(&base_spec, 1);
    g_srv = b;
    /* NOTIFY reaches B's listener at A's commit; allow it a moment, bounded. */
    int seen = 0;
    for (int i = 0; i < 200 && !seen; i++) {
        seen = 1;
        for (int k = 0; k < 16; k++)
            seen &= resolve_id(q) == id1;
        if (!seen)
            usleep(10000);
    }
    ck_assert_msg(seen, "replica B still answers its cached miss after A's publish");
    char p[64];
    snprintf(p, sizeof(p), "/v1/psdbs/%lld", id1);
    g_srv = a;
    expect_status("DELETE", p, g_pub, 200, NULL);
    g_srv = b;
    seen = 0;
    for (int i = 0; i < 200 && !seen; i++) {
        seen = 1;
        for (int k = 0; k < 16; k++)
            seen &= resolve_id(q) == -1;
        if (!seen)
            usleep(10000);
    }
    ck_assert_msg(seen, "replica B still resolves a PSDB retired on A");
    g_srv.pid = 0;
    ck_assert_int_eq(srv_stop(&a), 0);
    ck_assert_int_eq(srv_stop(&b), 0);
}
END_TEST

START_TEST(test_server__pg_start_refuses_blobs_beside_an_empty_database)
{
    srv_start(&g_srv, NULL);
    publish_ok(&base_spec, 1);
    ck_assert_int_eq(srv_stop(&g_srv), 0);
    /* The database replaced by an empty one (a wrong URL, a lost database): blobs/ is not new. */
    char *sql = NULL;
    ck_assert_int_ge(asprintf(&sql, "DROP DATABASE %s WITH (FORCE)", g_pg_db), 0);
    ck_assert_int_eq(pg_sql(NULL, sql), 0);
    free(sql);
    ck_assert_int_ge(asprintf(&sql, "CREATE DATABASE %s", g_pg_db), 0);
    ck_assert_int_eq(pg_sql(NULL, sql), 0);
    free(sql);
    ck_assert_int_eq(srv_try_start(&g_srv, NULL, 0), -1);
    char *log = tu_read_file(g_log, NULL), *out = NULL;
    ck_assert_ptr_nonnull(strstr(log, "holds no psdbd index and the blob store is not new"));
    free(log);
    ck_assert_int_ne(
        run_capture(&out, "%s token create --data-dir %s --role reader", PSDBD_BIN, g_data), 0);
    free(out);
    ck_assert_int_ne(run_capture(&out, "%s gc --data-dir %s --grace 0", PSDBD_BIN, g_data), 0);
    free(out);
    ck_assert_int_eq(count_dir("blobs"), 1);
}
END_TEST

START_TEST(test_server__start_refuses_blobs_without_index)
{
    srv_start(&g_srv, NULL);
    publish_ok(&base_spec, 1);
    ck_assert_int_eq(srv_stop(&g_srv), 0);
    char *ixp = tu_path(g_data, "index.sqlite"), *out = NULL;
    ck_assert_int_eq(unlink(ixp), 0);
    /* A restart, and the admin commands that may set up a new data directory, refuse. */
    ck_assert_int_eq(srv_try_start(&g_srv, NULL, 0), -1);
    char *log = tu_read_file(g_log, NULL);
    ck_assert_ptr_nonnull(strstr(log, "index.sqlite is missing but"));
    ck_assert_ptr_nonnull(strstr(log, "psdbd restore --from BACKUPDIR"));
    free(log);
    ck_assert_int_ne(
        run_capture(&out, "%s token create --data-dir %s --role reader", PSDBD_BIN, g_data), 0);
    ck_assert_ptr_nonnull(strstr(out, "psdbd restore"));
    free(out);
    ck_assert_msg(access(ixp, F_OK) != 0, "a new index.sqlite was created");
    /* check reports it; gc refuses (even forced: there is nothing to compare against). */
    ck_assert_int_eq(run_capture(&out, "%s check --data-dir %s", PSDBD_BIN, g_data), 1);
    ck_assert_ptr_nonnull(strstr(out, "problem: index"));
    ck_assert_ptr_nonnull(strstr(out, "is missing"));
    free(out);
    ck_assert_int_eq(run_capture(&out, "%s check --data-dir %s --json", PSDBD_BIN, g_data), 1);
    ck_assert_ptr_nonnull(strstr(out, "\"ok\":false"));
    free(out);
    ck_assert_int_ne(
        run_capture(&out, "%s gc --data-dir %s --grace 0 --force-empty-index", PSDBD_BIN, g_data),
        0);
    free(out);
    ck_assert_int_eq(count_dir("blobs"), 1);
    ck_assert_msg(access(ixp, F_OK) != 0, "a new index.sqlite was created");

    /* An index truncated to nothing is not a new one either. */
    tu_write_file(ixp, "", 0);
    ck_assert_int_eq(srv_try_start(&g_srv, NULL, 0), -1);
    log = tu_read_file(g_log, NULL);
    ck_assert_ptr_nonnull(strstr(log, "is empty or not a psdbd index"));
    free(log);
    struct stat sb;
    ck_assert_int_eq(stat(ixp, &sb), 0);
    ck_assert_int_eq(sb.st_size, 0);
    free(ixp);
}
END_TEST

START_TEST(test_server__gc_keeps_blobs_while_index_looks_lost)
{
    srv_start(&g_srv, NULL);
    long long id = publish_ok(&base_spec, 1);
    char *sha = sha_of(id, NULL), *blob = blob_path(sha), *out = NULL;
    ck_assert_int_eq(srv_stop(&g_srv), 0);
    char *ixp = tu_path(g_data, "index.sqlite");
    sqlite3 *db = NULL;

    /* Another application_id: not a psdbd index; nothing opens it, gc removes nothing. */
    ck_assert_int_eq(sqlite3_open(ixp, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db, "PRAGMA application_id = 7", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    ck_assert_int_eq(srv_try_start(&g_srv, NULL, 0), -1);
    ck_assert_int_ne(run_capture(&out, "%s gc --data-dir %s --grace 0", PSDBD_BIN, g_data), 0);
    ck_assert_ptr_nonnull(strstr(out, "not a psdbd index"));
    free(out);
    ck_assert_int_eq(run_capture(&out, "%s check --data-dir %s", PSDBD_BIN, g_data), 1);
    ck_assert_ptr_nonnull(strstr(out, "not a psdbd index"));
    free(out);
    ck_assert_int_eq(access(blob, F_OK), 0);
    ck_assert_int_eq(sqlite3_open(ixp, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db, "PRAGMA application_id = 1347634249", NULL, NULL, NULL),
                     SQLITE_OK);

    /* Every row gone: with only a young blob beside it, this is what a publish killed before its
     * first index row leaves (a note, and gc may collect it); once the blob is older than an hour
     * the index looks lost: gc refuses and keeps the blob, check says why; with
     * --force-empty-index gc removes it. */
    ck_assert_int_eq(sqlite3_exec(db, "DELETE FROM psdbs; DELETE FROM blobs; DELETE FROM apps",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    ck_assert_int_eq(run_capture(&out, "%s check --data-dir %s", PSDBD_BIN, g_data), 0);
    ck_assert_ptr_nonnull(strstr(out, "is not indexed"));
    free(out);
    ck_assert_int_eq(run_status("%s gc --data-dir %s --dry-run", PSDBD_BIN, g_data), 0);
    ck_assert_int_eq(access(blob, F_OK), 0);
    struct timespec aged[2] = {{.tv_sec = time(NULL) - 7200}, {.tv_sec = time(NULL) - 7200}};
    ck_assert_int_eq(utimensat(AT_FDCWD, blob, aged, 0), 0);
    ck_assert_int_eq(run_capture(&out, "%s check --data-dir %s", PSDBD_BIN, g_data), 1);
    ck_assert_ptr_nonnull(strstr(out, "the index has no PSDBs but blobs/ holds 1 blob files"));
    free(out);
    ck_assert_int_ne(run_capture(&out, "%s gc --data-dir %s --grace 0", PSDBD_BIN, g_data), 0);
    ck_assert_ptr_nonnull(strstr(out, "the index does not match the blob store (the index has "
                                      "no PSDBs but blobs/ holds 1 blob files"));
    ck_assert_ptr_nonnull(strstr(out, "--force"));
    free(out);
    ck_assert_int_eq(access(blob, F_OK), 0);
    ck_assert_int_eq(run_status("%s gc --data-dir %s --grace 0 --dry-run --force-empty-index",
                                PSDBD_BIN, g_data),
                     0);
    ck_assert_int_eq(access(blob, F_OK), 0);
    ck_assert_int_eq(
        run_status("%s gc --data-dir %s --grace 0 --force-empty-index", PSDBD_BIN, g_data), 0);
    ck_assert_int_ne(access(blob, F_OK), 0);
    /* With the blobs gone too the directory is consistent again: no problem, gc runs. */
    ck_assert_int_eq(run_status("%s check --data-dir %s", PSDBD_BIN, g_data), 0);
    ck_assert_int_eq(run_status("%s gc --data-dir %s --grace 0", PSDBD_BIN, g_data), 0);
    free(ixp);
    free(sha);
    free(blob);
}
END_TEST

/* ---- gc and an index that does not match the store ------------------------------------------ */

/* The "_b" database of a test on PostgreSQL: another instance's index (teardown drops it). */
static char *pg_db_b(void)
{
    char *db = NULL;
    ck_assert_int_ge(asprintf(&db, "%s_b", g_pg_db), 0);
    return db;
}

/* Another psdbd instance, set up like the fixture's in DATA (on PostgreSQL with the "_b" database
 * as its index), with a PSDB of its own (other bytes than base_spec's); returns that PSDB's blob
 * digest. *index_flag: what points an admin command at its index ("" for DATA/index.sqlite). */
static char *other_instance(const char *data, char **index_flag)
{
    char *saved_data = g_data, *saved_pub = g_pub, *url = NULL, *key = tu_path(g_dir, "key");
    srv saved_srv = g_srv, other = {0};
    *index_flag = strdup("");
    if (g_pg) {
        char *db = pg_db_b(), *sql = NULL;
        ck_assert_int_ge(asprintf(&sql, "CREATE DATABASE %s", db), 0);
        ck_assert_int_eq(pg_sql(NULL, sql), 0);
        url = pg_url_for(db);
        free(*index_flag);
        ck_assert_int_ge(asprintf(index_flag, "--index '%s'", url), 0);
        setenv("PSDBD_INDEX", url, 1);
        free(sql);
        free(db);
    }
    g_data = (char *)data;
    g_pub = token("publisher", "*", "--name pub");
    ck_assert_int_eq(run_status("%s key add --data-dir %s --name main --public-key %s.pub",
                                PSDBD_BIN, g_data, key),
                     0);
    srv_start(&other, NULL);
    g_srv = other;
    spec sp = base_spec;
    sp.seed = 2;
    char *sha = sha_of(publish_ok(&sp, 1), NULL);
    ck_assert_int_eq(srv_stop(&g_srv), 0);
    free(g_pub);
    g_pub = saved_pub;
    g_data = saved_data;
    g_srv = saved_srv;
    if (g_pg)
        setenv("PSDBD_INDEX", g_pg_url, 1);
    free(url);
    free(key);
    return sha;
}

/* The line of `out` that holds `what`, or NULL (a finding must be said in one line). */
static char *line_with(const char *out, const char *what)
{
    const char *hit = strstr(out, what), *start, *end;
    if (!hit)
        return NULL;
    for (start = hit; start > out && start[-1] != '\n'; start--) {
    }
    end = strchr(hit, '\n');
    return strndup(start, end ? (size_t)(end - start) : strlen(start));
}

START_TEST(test_server__gc_refuses_an_index_that_does_not_match_the_store)
{
    srv_start(&g_srv, NULL);
    char *sha = sha_of(publish_ok(&base_spec, 1), NULL), *blob = blob_path(sha);
    ck_assert_int_eq(srv_stop(&g_srv), 0);
    char *other_data = tu_path(g_dir, "other"), *ix = NULL, *out = NULL, *line = NULL, want[160];
    char *other_sha = other_instance(other_data, &ix);

    /* The other instance's index in this data directory: its one PSDB's blob is not in this
     * store, and this store's blob is unreferenced by it. */
    if (!g_pg) {
        char *mine = tu_path(g_data, "index.sqlite"), *theirs = tu_path(other_data, "index.sqlite");
        char *wal = NULL;
        size_t n = 0;
        char *bytes = tu_read_file(theirs, &n);
        ck_assert_ptr_nonnull(bytes);
        ck_assert_int_ge(asprintf(&wal, "%s-wal", theirs), 0);
        ck_assert_msg(access(wal, F_OK) != 0, "the other instance left %s", wal);
        ck_assert_int_eq(tu_write_file(mine, bytes, n), 0);
        free(wal);
        ck_assert_int_ge(asprintf(&wal, "%s-wal", mine), 0);
        unlink(wal);
        free(wal);
        free(bytes);
        free(mine);
        free(theirs);
    }
    snprintf(want, sizeof(want), "blob %s is indexed but missing", other_sha);
    ck_assert_int_eq(run_capture(&out, "%s check --data-dir %s %s", PSDBD_BIN, g_data, ix), 1);
    ck_assert_msg(strstr(out, want) != NULL, "check: %s", out);
    free(out);
    /* gc (and its dry run) removes nothing, exits 1 and says why in one line. */
    for (int dry = 0; dry <= 1; dry++) {
        ck_assert_int_eq(run_capture(&out, "%s gc --data-dir %s %s --grace 0%s", PSDBD_BIN, g_data,
                                     ix, dry ? " --dry-run" : ""),
                         1);
        line = line_with(out, "the index does not match the blob store");
        ck_assert_msg(line != NULL, "gc: %s", out);
        ck_assert_msg(strstr(line, want) != NULL && strstr(line, "--force") != NULL, "gc: %s",
                      line);
        ck_assert_msg(strstr(out, " bytes)") == NULL, "gc named a file to remove: %s", out);
        free(line);
        free(out);
        ck_assert_int_eq(access(blob, F_OK), 0);
    }
    /* Told so, it goes on; --force-empty-index is the same option. */
    ck_assert_int_eq(run_capture(&out,
                                 "%s gc --data-dir %s %s --grace 0 --dry-run "
                                 "--force-empty-index",
                                 PSDBD_BIN, g_data, ix),
                     0);
    ck_assert_msg(strstr(out, "warning: the index does not match the blob store") != NULL, "%s",
                  out);
    free(out);
    ck_assert_int_eq(access(blob, F_OK), 0);
    ck_assert_int_eq(
        run_capture(&out, "%s gc --data-dir %s %s --grace 0 --force", PSDBD_BIN, g_data, ix), 0);
    ck_assert_msg(strstr(out, "(--force)") != NULL, "%s", out);
    free(out);
    ck_assert_int_ne(access(blob, F_OK), 0);

    /* The other instance with its own index still collects real garbage: an old unindexed blob
     * goes, its indexed one stays. */
    char *other_blob = NULL, orphan[200];
    ck_assert_int_ge(asprintf(&other_blob, "%s/blobs/%.2s/%s", other_data, other_sha, other_sha),
                     0);
    snprintf(orphan, sizeof(orphan), "%s/blobs/ab", other_data);
    mkdir(orphan, 0750);
    snprintf(orphan, sizeof(orphan), "%s/blobs/ab/ab%062d", other_data, 0);
    ck_assert_int_eq(tu_write_file(orphan, "junk", 4), 0);
    ck_assert_int_eq(
        run_capture(&out, "%s gc --data-dir %s %s --grace 0", PSDBD_BIN, other_data, ix), 0);
    ck_assert_msg(strstr(out, "does not match") == NULL, "%s", out);
    free(out);
    ck_assert_int_ne(access(orphan, F_OK), 0);
    ck_assert_int_eq(access(other_blob, F_OK), 0);

    /* Not only a swapped index: one blob gone from its own store stops gc as well. */
    ck_assert_int_eq(tu_write_file(orphan, "junk", 4), 0);
    ck_assert_int_eq(unlink(other_blob), 0);
    ck_assert_int_eq(
        run_capture(&out, "%s gc --data-dir %s %s --grace 0", PSDBD_BIN, other_data, ix), 1);
    snprintf(want, sizeof(want), "blob %s is indexed but missing", other_sha);
    line = line_with(out, "the index does not match the blob store");
    ck_assert_msg(line != NULL && strstr(line, want) != NULL, "gc: %s", out);
    free(line);
    free(out);
    ck_assert_int_eq(access(orphan, F_OK), 0);
    free(other_blob);
    free(other_sha);
    free(other_data);
    free(ix);
    free(blob);
    free(sha);
}
END_TEST

/* ---- /metrics and who may learn an application's name ------------------------------------- */

/* GET /metrics with tok into a file of the test directory (promtool reads it); the body. */
static char *metrics_as(const char *tok, const char *file)
{
    resp r;
    http(&r, "GET", "/metrics", tok, NULL, NULL, NULL, 0);
    ck_assert_msg(r.status == 200, "/metrics: %ld %s", r.status, r.body.data ? r.body.data : "");
    char *body = strdup(r.body.data), *path = tu_path(g_dir, file);
    resp_free(&r);
    ck_assert_int_eq(tu_write_file(path, body, strlen(body)), 0);
    if (run_status("command -v promtool >/dev/null") == 0)
        ck_assert_msg(run_status("promtool check metrics < %s", path) == 0,
                      "promtool check metrics refused %s", path);
    free(path);
    return body;
}

static void resolve_as(const char *app, const char *tok, long status)
{
    char p[256];
    snprintf(p, sizeof(p),
             "/v1/resolve?app=%s&app_version=1.0.0.0&family=contoso-gfx9&abi_min=1&abi_max=9", app);
    expect_status("GET", p, tok, status, NULL);
}

START_TEST(test_server__metrics_name_applications_only_to_readers)
{
    /* Readers need no token: anyone may list the applications, and /metrics names them. */
    srv_start(&g_srv, NULL);
    publish_ok(&base_spec, 1);
    resolve_as("Game", NULL, 200);
    resolve_as("Unannounced", NULL, 404);
    char *m = metrics_as(NULL, "open.prom");
    ck_assert_msg(strstr(m, "psdbd_demand_resolves_total{app=\"Unannounced\",result=\"miss\"} 1"),
                  "%s", m);
    free(m);
    ck_assert_int_eq(srv_stop(&g_srv), 0);

    /* Readers need a token: an anonymous scrape gets every series but the per-application ones;
     * a reader's names the applications; a scoped token those its scope covers. */
    const char *extra[] = {"--readers-need-token", NULL};
    srv_start(&g_srv, extra);
    resolve_as("Game", g_reader, 200);
    resolve_as("Unannounced", g_reader, 404);
    resolve_as("OtherTitle", g_reader, 404);
    m = metrics_as(NULL, "anonymous.prom");
    ck_assert_msg(strstr(m, "app=") == NULL, "an anonymous scrape names applications:\n%s", m);
    ck_assert_msg(strstr(m, "Unannounced") == NULL, "%s", m);
    ck_assert_ptr_nonnull(strstr(m, "psdbd_resolve_total{result=\"miss\"} 2"));
    ck_assert_ptr_nonnull(strstr(m, "# TYPE psdbd_demand_resolves_total counter"));
    free(m);
    m = metrics_as(g_reader, "reader.prom");
    ck_assert_msg(strstr(m, "psdbd_demand_resolves_total{app=\"Unannounced\",result=\"miss\"} 1"),
                  "%s", m);
    ck_assert_ptr_nonnull(strstr(m, "psdbd_demand_resolves_total{app=\"Game\",result=\"hit\"} 1"));
    free(m);
    m = metrics_as(g_pub_other, "scoped.prom"); /* scope Other* */
    ck_assert_ptr_nonnull(
        strstr(m, "psdbd_demand_resolves_total{app=\"OtherTitle\",result=\"miss\"} 1"));
    ck_assert_msg(strstr(m, "Unannounced") == NULL && strstr(m, "app=\"Game\"") == NULL, "%s", m);
    free(m);
    expect_status("GET", "/metrics", "nonsense", 401, "unauthorized");
    ck_assert_int_eq(srv_stop(&g_srv), 0);
}
END_TEST

/* ---- token scopes on every route ------------------------------------------------------------- */

START_TEST(test_server__scopes_on_every_route)
{
    srv_start(&g_srv, NULL);
    long long game = publish_ok(&base_spec, 1);
    spec s = base_spec;
    s.app = "OtherGame";
    s.seed = 2;
    long long other = publish_ok(&s, 1);
    s.app = "OtherTwo";
    s.seed = 3;
    long long two = publish_ok(&s, 1);
    char *sha_game = sha_of(game, NULL), *sha_other = sha_of(other, NULL),
         *sha_two = sha_of(two, NULL);
    ck_assert_int_eq(srv_stop(&g_srv), 0);
    char *tok_game = token("reader", "Game", "--name r-game");
    char *tok_other = token("reader", "Other*", "--name r-other"); /* a pattern */
    const char *extra[] = {"--readers-need-token", NULL};
    srv_start(&g_srv, extra);

    /* Listings: a scoped token sees only its applications. */
    struct {
        const char *tok;
        const char *names;
    } lists[] = {{tok_game, "Game,"},
                 {tok_other, "OtherGame,OtherTwo,"},
                 {g_reader, "Game,OtherGame,OtherTwo,"},
                 {g_admin, "Game,OtherGame,OtherTwo,"},
                 {g_pub_other, "OtherGame,OtherTwo,"}};
    for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
        resp r;
        char names[256] = "";
        size_t k;
        json_t *a;
        http(&r, "GET", "/v1/apps", lists[i].tok, NULL, NULL, NULL, 0);
        ck_assert_int_eq(r.status, 200);
        json_array_foreach(json_object_get(r.json, "apps"), k, a)
        {
            strncat(names, json_string_value(json_object_get(a, "name")),
                    sizeof(names) - strlen(names) - 2);
            strcat(names, ",");
        }
        ck_assert_str_eq(names, lists[i].names);
        resp_free(&r);
    }

    /* Each reader route, in scope and out of scope. */
    struct {
        const char *app;
        long long id;
        const char *sha;
    } apps[] = {
        {"Game", game, sha_game}, {"OtherGame", other, sha_other}, {"OtherTwo", two, sha_two}};
    for (size_t a = 0; a < 3; a++) {
        for (int t = 0; t < 2; t++) {
            const char *tok = t == 0 ? tok_game : tok_other;
            int in = t == 0 ? a == 0 : a != 0;
            long want = in ? 200 : 403;
            const char *err = in ? NULL : "out_of_scope";
            char p[256];
            snprintf(p, sizeof(p), "/v1/apps/%s/psdbs", apps[a].app);
            expect_status("GET", p, tok, want, err);
            snprintf(p, sizeof(p), "/v1/psdbs/%lld", apps[a].id);
            expect_status("GET", p, tok, want, err);
            snprintf(p, sizeof(p),
                     "/v1/resolve?app=%s&app_version=1.0.0.0&family=contoso-gfx9&abi_min=1&"
                     "abi_max=9",
                     apps[a].app);
            expect_status("GET", p, tok, want, err);
            snprintf(p, sizeof(p), "/v1/blobs/%s", apps[a].sha);
            expect_status("GET", p, tok, want, err);
            expect_status("HEAD", p, tok, want, NULL);
        }
    }
    /* A blob no PSDB references: out of scope for a scoped token (which learns nothing about its
     * existence), absent for an unscoped one. */
    const char *nosuch =
        "/v1/blobs/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    expect_status("GET", nosuch, tok_game, 403, "out_of_scope");
    expect_status("HEAD", nosuch, tok_game, 403, NULL);
    expect_status("GET", nosuch, g_reader, 404, "not_found");
    expect_status("GET", nosuch, g_admin, 404, "not_found");
    /* Unknown applications: a scoped token may not ask. */
    expect_status("GET", "/v1/apps/Nope/psdbs", tok_game, 403, "out_of_scope");
    expect_status("GET", "/v1/apps/Nope/psdbs", g_reader, 404, "not_found");

    /* Retire: a publisher token's scope (a pattern here) decides; readers never retire. */
    char p[64];
    snprintf(p, sizeof(p), "/v1/psdbs/%lld", game);
    expect_status("DELETE", p, g_pub_other, 403, "out_of_scope");
    expect_status("DELETE", p, tok_game, 403, "forbidden");
    snprintf(p, sizeof(p), "/v1/psdbs/%lld", two);
    expect_status("DELETE", p, g_pub_other, 200, NULL);
    /* Publish: the token's scope and the key's scope both apply. */
    s.app = "Game";
    s.seed = 9;
    char *path = make_psdb(&s);
    resp r;
    pub_opts o = {.serial = 2, .token = g_pub_other, .key = g_key2, .kid = g_kid2};
    publish(&r, path, &o);
    ck_assert_int_eq(r.status, 403);
    ck_assert_str_eq(jstr(r.json, "error", NULL), "out_of_scope");
    resp_free(&r);
    pub_opts o2 = {.serial = 2, .key = g_key2, .kid = g_kid2};
    publish(&r, path, &o2);
    ck_assert_int_eq(r.status, 403);
    ck_assert_str_eq(jstr(r.json, "error", NULL), "out_of_scope");
    resp_free(&r);
    free(path);

    /* Anonymous reads (no token needed): everything stays readable, with or without a token. */
    ck_assert_int_eq(srv_stop(&g_srv), 0);
    srv_start(&g_srv, NULL);
    char b[128];
    snprintf(b, sizeof(b), "/v1/blobs/%s", sha_other);
    expect_status("GET", b, NULL, 200, NULL);
    expect_status("GET", b, tok_game, 200, NULL);
    resp r2;
    http(&r2, "GET", "/v1/apps", tok_game, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r2.status, 200);
    ck_assert_uint_eq(json_array_size(json_object_get(r2.json, "apps")), 3);
    resp_free(&r2);
    free(tok_game);
    free(tok_other);
    free(sha_game);
    free(sha_other);
    free(sha_two);
}
END_TEST

/* ---- identity strings ------------------------------------------------------------------------ */

START_TEST(test_server__identity_control_characters_refused)
{
    srv_start(&g_srv, NULL);
    struct {
        const char *app, *exe, *engine, *family, *field;
    } bad[] = {
        {"Bad\x07Game", NULL, NULL, NULL, "application name"},
        {"Bad\tGame", NULL, NULL, NULL, "application name"},
        {"Bad\x1b[2JGame", NULL, NULL, NULL, "application name"},
        {"Bad\x7fGame", NULL, NULL, NULL, "application name"},
        {"Bad\xc2\x85Game", NULL, NULL, NULL, "application name"}, /* U+0085, C1 */
        {"Bad\xc2\x9bGame", NULL, NULL, NULL, "application name"}, /* U+009B, C1 CSI */
        {"Game", "ga\nme.exe", NULL, NULL, "exe filename"},
        {"Game", "game.exe\r", NULL, NULL, "exe filename"},
        {"Game", NULL, "Eng\x01ine", NULL, "engine name"},
        {"Game", NULL, "Eng\xc2\x80ine", NULL, "engine name"},
        {"Game", NULL, NULL, "contoso\x1f-gfx9", "family"},
        {"Game", NULL, NULL, "contoso-\xc2\x9f", "family"},
    };
    /* The rest of the rule for names: Unicode format characters and separators other than the
     * ASCII space (schema/HTTP.md, "Names"), each named by its code point. */
    struct {
        const char *app, *exe, *engine, *family, *field, *cp;
    } spoof[] = {
        {"Demo\xe2\x80\xaegnp.exe", NULL, NULL, NULL, "application name", "U+202E"},
        {"Demo\xe2\x81\xa6x", NULL, NULL, NULL, "application name", "U+2066"},
        {"Demo\xe2\x80\x8e", NULL, NULL, NULL, "application name", "U+200E"},
        {"De\xc2\xadmo", NULL, NULL, NULL, "application name", "U+00AD"},
        {"Spi\xc3\xa9l\xc2\xa0Z", NULL, NULL, NULL, "application name", "U+00A0"},
        {"Game", "game\xe2\x80\x8f.exe", NULL, NULL, "exe filename", "U+200F"},
        {"Game", "ga\xe2\x80\x8bme.exe", NULL, NULL, "exe filename", "U+200B"},
        {"Game", NULL, "Eng\xef\xbb\xbfine", NULL, "engine name", "U+FEFF"},
        {"Game", NULL, "Eng\xe3\x80\x80ine", NULL, "engine name", "U+3000"},
        {"Game", NULL, NULL, "contoso\xe2\x80\xa8gfx9", "family", "U+2028"},
        {"Game", NULL, NULL, "contoso\xe2\x80\xa9gfx9", "family", "U+2029"},
        {"Game", NULL, NULL, "contoso\xf3\xa0\x80\x81", "family", "U+E0001"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        spec s = base_spec;
        s.app = bad[i].app;
        s.exe = bad[i].exe;
        s.engine = bad[i].engine;
        if (bad[i].family)
            s.family = bad[i].family;
        s.seed = (unsigned)i + 10;
        char *path = make_psdb(&s);
        resp r;
        pub_opts o = {.serial = 1};
        publish(&r, path, &o);
        ck_assert_msg(r.status == 400, "case %zu: %ld %s", i, r.status, r.body.data);
        ck_assert_str_eq(jstr(r.json, "error", NULL), "invalid_psdb");
        ck_assert_msg(strstr(jstr(r.json, "message", NULL), bad[i].field) &&
                          strstr(jstr(r.json, "message", NULL), "control character"),
                      "case %zu: %s", i, jstr(r.json, "message", NULL));
        resp_free(&r);
        free(path);
    }
    for (size_t i = 0; i < sizeof(spoof) / sizeof(spoof[0]); i++) {
        spec s = base_spec;
        char want[64];
        s.app = spoof[i].app;
        s.exe = spoof[i].exe;
        s.engine = spoof[i].engine;
        if (spoof[i].family)
            s.family = spoof[i].family;
        s.seed = (unsigned)i + 40;
        char *path = make_psdb(&s);
        resp r;
        pub_opts o = {.serial = 1};
        publish(&r, path, &o);
        snprintf(want, sizeof(want), "%s contains %s", spoof[i].field, spoof[i].cp);
        ck_assert_msg(r.status == 400, "spoof case %zu: %ld %s", i, r.status, r.body.data);
        ck_assert_str_eq(jstr(r.json, "error", NULL), "invalid_psdb");
        ck_assert_msg(strstr(jstr(r.json, "message", NULL), want), "spoof case %zu: %s", i,
                      jstr(r.json, "message", NULL));
        resp_free(&r);
        free(path);
    }
    ck_assert_int_eq(count_dir("blobs"), 0);
    /* Token and key names and scopes reach the access log and listings: the same rule. */
    char *out = NULL;
    ck_assert_int_ne(run_capture(&out,
                                 "%s token create --data-dir %s --role reader --name \"$(printf "
                                 "'bad\\033[2Jname')\"",
                                 PSDBD_BIN, g_data),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "--name contains the control character U+001B"));
    free(out);
    ck_assert_int_ne(run_capture(&out,
                                 "%s token create --data-dir %s --role reader --scope \"$(printf "
                                 "'G\\302\\233*')\"",
                                 PSDBD_BIN, g_data),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "--scope contains the control character U+009B"));
    free(out);
    ck_assert_int_ne(run_capture(&out,
                                 "%s key add --data-dir %s --public-key /nonexistent.pub --name "
                                 "\"$(printf 'k\\r')\"",
                                 PSDBD_BIN, g_data),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "--name contains the control character U+000D"));
    free(out);
    ck_assert_int_ne(run_capture(&out,
                                 "%s token create --data-dir %s --role reader --name \"$(printf "
                                 "'ci\342\200\256gnp')\"",
                                 PSDBD_BIN, g_data),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "--name contains U+202E"));
    free(out);
    ck_assert_int_ne(run_capture(&out,
                                 "%s token create --data-dir %s --role reader --scope \"$(printf "
                                 "'Game\342\200\213*')\"",
                                 PSDBD_BIN, g_data),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "--scope contains U+200B"));
    free(out);
    ck_assert_int_ne(run_capture(&out,
                                 "%s key add --data-dir %s --public-key /nonexistent.pub --name "
                                 "\"$(printf 'k\342\200\251')\"",
                                 PSDBD_BIN, g_data),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "--name contains U+2029"));
    free(out);
    /* Non-ASCII letters, right-to-left letters, emoji and the first code point after NBSP
     * (U+00A1) are fine. */
    spec ok = base_spec;
    ok.app = "Spi\xc3\xa9l\xc2\xa1Z \xf0\x9f\x8e\xae \xd9\x84\xd8\xb9\xd8\xa8\xd8\xa9";
    ok.engine = "\xe5\xbc\x95\xe6\x93\x8e";
    publish_ok(&ok, 1);
    resp r;
    http(&r, "GET", "/v1/apps", NULL, NULL, NULL, NULL, 0);
    ck_assert_uint_eq(json_array_size(json_object_get(r.json, "apps")), 1);
    resp_free(&r);
}
END_TEST

/* The rule for names at every door of psdbd that takes a name from a request, and in the psdb
 * tool's options: 400 (or exit 1) naming the code point, before anything is looked up or
 * recorded (schema/HTTP.md, "Names"). */
START_TEST(test_server__names_that_spoof_refused_by_every_route_and_the_tool)
{
    static const struct {
        const char *path, *want;
    } routes[] = {
        {"/v1/resolve?app=Demo%E2%80%AEgnp.exe&app_version=1.0.0.0&family=contoso-gfx9&abi_min=1"
         "&abi_max=2",
         "app contains U+202E"},
        {"/v1/resolve?app=Game&app_version=1.0.0.0&family=contoso%E2%80%A8gfx9&abi_min=1"
         "&abi_max=2",
         "family contains U+2028"},
        {"/v1/resolve?app=Ga%C2%A0me&app_version=1.0.0.0&family=contoso-gfx9&abi_min=1&abi_max=2",
         "app contains U+00A0"},
        {"/v1/resolve?app=bad%FF&app_version=1.0.0.0&family=contoso-gfx9&abi_min=1&abi_max=2",
         "app is not UTF-8"},
        {"/v1/apps/Game%E2%81%A7/psdbs", "application name contains U+2067"},
        {"/v1/stats/coverage?app=Ga%E2%80%8Bme", "app contains U+200B"},
    };
    resp r;
    char *out = NULL;
    srv_start(&g_srv, NULL);
    publish_ok(&base_spec, 1);
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        http(&r, "GET", routes[i].path, NULL, NULL, NULL, NULL, 0);
        ck_assert_msg(r.status == 400, "%s: %ld %s", routes[i].path, r.status, r.body.data);
        ck_assert_str_eq(jstr(r.json, "error", NULL), "bad_request");
        ck_assert_msg(strstr(jstr(r.json, "message", NULL), routes[i].want), "%s: %s",
                      routes[i].path, jstr(r.json, "message", NULL));
        resp_free(&r);
    }
    /* The names that are names still work: the same routes answer. */
    http(&r, "GET",
         "/v1/resolve?app=Game&app_version=1.0.0.0&family=contoso-gfx9&abi_min=1&abi_max=9", NULL,
         NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    /* The tool refuses the same names before it sends anything. */
    ck_assert_int_eq(
        run_capture(&out,
                    "%s resolve --server %s --app \"$(printf 'Demo\\342\\200\\256gnp')\" "
                    "--app-version 1.0.0.0 --family contoso-gfx9 --abi-min 1 "
                    "--abi-max 2",
                    PSDB_TOOL, g_srv.base),
        1);
    ck_assert_msg(strstr(out, "psdb resolve: --app contains U+202E"), "%s", out);
    free(out);
    ck_assert_int_eq(
        run_capture(&out,
                    "%s synth --app \"$(printf 'A\\342\\200\\217')\" --app-version 1.0 "
                    "--pipelines 1 -o %s/x.sodb",
                    PSDB_TOOL, g_dir),
        1);
    ck_assert_msg(strstr(out, "psdb synth: --app contains U+200F"), "%s", out);
    free(out);
    ck_assert_int_eq(run_capture(&out,
                                 "%s install --server %s --exe-path /g/x.exe --app Game "
                                 "--app-version 1.0 --trust /nonexistent.pub --target "
                                 "\"$(printf 'contoso\\342\\201\\246gfx9:1-2')\"",
                                 PSDB_TOOL, g_srv.base),
                     1);
    ck_assert_msg(strstr(out, "--target contains U+2066"), "%s", out);
    free(out);
    ck_assert_int_eq(run_capture(&out,
                                 "%s coverage --server %s --app \"$(printf 'G\\343\\200\\200')\"",
                                 PSDB_TOOL, g_srv.base),
                     1);
    ck_assert_msg(strstr(out, "psdb coverage: --app contains U+3000"), "%s", out);
    free(out);
}
END_TEST

/* ---- slow clients, framing, validators (issue 11) -------------------------------------------- */

/* 86 base64 digits of zero bits: with "==", a well-formed (if wrong) signature. */
#define ALL_A                                                                                      \
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"

/* A TCP connection to the server from `src` (any 127/8 address: each is another client address
 * to the per-address limit). */
static int connect_from(const char *src)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in me = {.sin_family = AF_INET};
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_srv.port)};
    ck_assert_int_ge(s, 0);
    ck_assert_int_eq(inet_pton(AF_INET, src, &me.sin_addr), 1);
    ck_assert_int_eq(bind(s, (struct sockaddr *)&me, sizeof(me)), 0);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(s, (struct sockaddr *)&a, sizeof(a)), 0);
    return s;
}

/* True when the server has closed (or reset) the connection: a read sees EOF or an error. */
static int peer_closed(int s)
{
    char b[256];
    ssize_t n = recv(s, b, sizeof(b), MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Times one GET /healthz on a new connection from 127.0.0.1; fails unless it is a 200. */
static double healthz_seconds(void)
{
    resp r;
    double t0 = now_s();
    http(&r, "GET", "/healthz", NULL, NULL, NULL, NULL, 0);
    double t = now_s() - t0;
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    return t;
}

START_TEST(test_server__slowloris_connections_closed_at_request_deadline)
{
    enum { SLOW = 60 };
    const char *extra[] = {"--request-timeout", "3", NULL};
    srv_start(&g_srv, extra);
    int socks[SLOW], closed_at[SLOW];
    double t0 = now_s();
    /* 60 clients from another address send the request line, then trickle a header one byte a
     * second: each byte resets libmicrohttpd's idle timeout, only the deadline ends them. */
    for (int i = 0; i < SLOW; i++) {
        socks[i] = connect_from("127.0.0.2");
        closed_at[i] = -1;
        const char *line = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ";
        ck_assert_int_eq(send(socks[i], line, strlen(line), MSG_NOSIGNAL), (ssize_t)strlen(line));
    }
    for (int sec = 0; sec < 9; sec++) {
        for (int i = 0; i < SLOW; i++) {
            if (closed_at[i] >= 0)
                continue;
            if (peer_closed(socks[i]) || send(socks[i], "a", 1, MSG_NOSIGNAL) != 1)
                closed_at[i] = sec;
        }
        /* Meanwhile a new client is served at once. */
        double t = healthz_seconds();
        ck_assert_msg(t < 1.0, "/healthz took %.3f s beside %d slow clients", t, SLOW);
        while (now_s() < t0 + sec + 1)
            usleep(20000);
    }
    for (int i = 0; i < SLOW; i++) {
        /* Alive before the 3 s deadline, closed within a few seconds after it. */
        ck_assert_msg(closed_at[i] >= 2 && closed_at[i] <= 6, "slow client %d closed at %d s", i,
                      closed_at[i]);
        close(socks[i]);
    }
    resp r;
    http(&r, "GET", "/metrics", NULL, NULL, NULL, NULL, 0);
    ck_assert_msg(strstr(r.body.data, "psdbd_request_timeouts_total 60\n") != NULL, "%s",
                  r.body.data);
    ck_assert_ptr_nonnull(
        strstr(r.body.data, "psdbd_http_requests_total{route=\"healthz\",status=\"aborted\"} 60"));
    resp_free(&r);
    ck_assert_int_eq(srv_stop(&g_srv), 0);
    char *log = tu_read_file(g_log, NULL);
    ck_assert_ptr_nonnull(strstr(log, "access - /healthz 0 0 "));
    ck_assert_ptr_nonnull(strstr(log, " aborted=timeout\n"));
    free(log);
}
END_TEST

START_TEST(test_server__trickled_body_closed_at_request_deadline)
{
    const char *extra[] = {"--request-timeout", "2", NULL};
    srv_start(&g_srv, extra);
    /* A body nobody reads (on a GET) or a publish body sent far below upload-min-rate. */
    int s = connect_from("127.0.0.3");
    const char *head = "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n";
    ck_assert_int_eq(send(s, head, strlen(head), MSG_NOSIGNAL), (ssize_t)strlen(head));
    int closed = -1;
    for (int sec = 0; sec < 8 && closed < 0; sec++) {
        if (peer_closed(s) || send(s, "b", 1, MSG_NOSIGNAL) != 1)
            closed = sec;
        sleep(1);
    }
    ck_assert_msg(closed >= 1 && closed <= 5, "trickled body closed at %d s", closed);
    close(s);
    /* A keep-alive connection waiting for its next request gets the same deadline. */
    s = connect_from("127.0.0.3");
    const char *req = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    char out[1024];
    ck_assert_int_eq(send(s, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
    struct timeval tv = {2, 0};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ck_assert_int_gt(recv(s, out, sizeof(out), 0), 12);
    ck_assert_int_eq(strncmp(out, "HTTP/1.1 200", 12), 0);
    double t0 = now_s();
    for (int i = 0; i < 8 && send(s, "G", 1, MSG_NOSIGNAL) == 1 && !peer_closed(s); i++)
        sleep(1);
    ck_assert_msg(now_s() - t0 < 6, "a trickled second request lived %.1f s", now_s() - t0);
    close(s);
    /* Publish bodies get their length at upload-min-rate on top. */
    srv_stop(&g_srv);
    const char *slow_rate[] = {"--request-timeout", "1", "--upload-min-rate", "1K", NULL};
    srv_start(&g_srv, slow_rate);
    s = connect_from("127.0.0.3");
    char *h = NULL;
    ck_assert_int_ge(asprintf(&h,
                              "POST /v1/psdbs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                              "Content-Length: 2048\r\nX-Psdb-Serial: 1\r\nX-Psdb-Key-Id: %s\r\n"
                              "X-Psdb-Signature: %.86s==\r\n\r\n",
                              g_pub, g_kid, ALL_A),
                     0);
    ck_assert_int_eq(send(s, h, strlen(h), MSG_NOSIGNAL), (ssize_t)strlen(h));
    free(h);
    t0 = now_s();
    closed = -1;
    for (int sec = 0; sec < 12 && closed < 0; sec++) {
        if (peer_closed(s) || send(s, "c", 1, MSG_NOSIGNAL) != 1)
            closed = sec;
        sleep(1);
    }
    /* 1 s + 2048 B at 1 KiB/s (+1 s rounding): alive at 3 s, closed soon after 4 s. */
    ck_assert_msg(closed >= 3 && closed <= 7, "trickled publish closed at %d s", closed);
    close(s);
    ck_assert(wait_tmp_empty());
}
END_TEST

START_TEST(test_server__per_address_connection_limit)
{
    const char *extra[] = {"--max-connections-per-ip", "5", NULL};
    srv_start(&g_srv, extra);
    int socks[5];
    for (int i = 0; i < 5; i++)
        socks[i] = connect_from("127.0.0.4");
    usleep(300000);
    /* The sixth from the same address is closed unanswered; other addresses are served. */
    int extra_s = connect_from("127.0.0.4");
    const char *req = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    send(extra_s, req, strlen(req), MSG_NOSIGNAL);
    struct timeval tv = {3, 0};
    char out[512];
    setsockopt(extra_s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ck_assert_int_le(recv(extra_s, out, sizeof(out), 0), 0);
    close(extra_s);
    ck_assert(healthz_seconds() < 1.0);
    for (int i = 0; i < 5; i++)
        close(socks[i]);
    /* Once they are gone, the address is served again. */
    usleep(300000);
    int again = connect_from("127.0.0.4");
    ck_assert_int_eq(send(again, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
    setsockopt(again, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ck_assert_int_gt(recv(again, out, sizeof(out), 0), 12);
    ck_assert_int_eq(strncmp(out, "HTTP/1.1 200", 12), 0);
    close(again);
}
END_TEST

START_TEST(test_server__connections_over_global_limit_wait_for_deadline)
{
    /* Slow clients fill every slot: a new client waits to be accepted, and is served once the
     * deadline has closed them, instead of never. */
    const char *extra[] = {"--max-connections", "4", "--threads", "1",
                           "--request-timeout", "2", NULL};
    srv_start(&g_srv, extra);
    int socks[4];
    for (int i = 0; i < 4; i++) {
        socks[i] = connect_from("127.0.0.5");
        send(socks[i], "GET /", 5, MSG_NOSIGNAL);
    }
    usleep(300000);
    int s = connect_from("127.0.0.6");
    const char *req = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    ck_assert_int_eq(send(s, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
    struct timeval tv = {1, 0};
    char out[512];
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    double t0 = now_s();
    ck_assert_int_lt(recv(s, out, sizeof(out), 0), 0); /* not accepted yet */
    tv.tv_sec = 6;
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ck_assert_int_gt(recv(s, out, sizeof(out), 0), 12);
    ck_assert_int_eq(strncmp(out, "HTTP/1.1 200", 12), 0);
    ck_assert_msg(now_s() - t0 < 4.5, "served after %.1f s", now_s() - t0);
    close(s);
    for (int i = 0; i < 4; i++)
        close(socks[i]);
}
END_TEST

/* Sends `first`, waits pause_ms, sends `rest` (may be NULL) on a connection from src, and reads
 * the answers until the server closes or 3 s pass; returns the bytes read into out. */
static size_t staged(const char *src, const char *first, int pause_ms, const char *rest, char *out,
                     size_t out_size)
{
    int s = connect_from(src);
    struct timeval tv = {3, 0};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (*first)
        ck_assert_int_eq(send(s, first, strlen(first), MSG_NOSIGNAL), (ssize_t)strlen(first));
    usleep((useconds_t)pause_ms * 1000);
    if (rest)
        ck_assert_int_eq(send(s, rest, strlen(rest), MSG_NOSIGNAL), (ssize_t)strlen(rest));
    size_t got = tu_recv_all(s, out, out_size);
    close(s);
    return got;
}

START_TEST(test_server__headers_over_connection_memory_are_431_and_publishes_get_more)
{
    /* Defaults: connection-memory 8K for connections that begin with anything but a POST,
     * upload-connection-memory 64K for those that begin with one. */
    srv_start(&g_srv, NULL);
    /* post: a publish without its first two bytes, which each case sends its own way */
    char *pad = malloc(12 * 1024 + 1), *get = NULL, *post = NULL, *range = NULL, *both = NULL;
    char out[8192];
    memset(pad, 'a', 12 * 1024);
    pad[12 * 1024] = '\0';
    ck_assert_int_ge(asprintf(&get, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\n\r\n", pad),
                     0);
    ck_assert_int_ge(asprintf(&post,
                              "ST /v1/psdbs HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
                              "X-Pad: %s\r\n\r\n",
                              pad),
                     0);
    /* 12 KiB of header on a GET: answered 431 before the connection closes, not dropped. */
    staged("127.0.0.7", get, 0, NULL, out, sizeof(out));
    ck_assert_msg(strncmp(out, "HTTP/1.1 431", 12) == 0, "got: %.80s", out);
    /* The largest header psdb's clients send, a delta's Range (MULTI_RANGE_HEADER, 4,000 bytes
     * and a range more) beside a token, is read whole. */
    size_t rl = 0;
    range = malloc(4200);
    rl = (size_t)snprintf(range, 4200,
                          "GET /healthz HTTP/1.1\r\nHost: x\r\n"
                          "Authorization: Bearer %s\r\nRange: bytes=0-0",
                          g_reader);
    for (unsigned i = 1; rl < 4000 + 60; i++)
        rl += (size_t)snprintf(range + rl, 4200 - rl, ",%u-%u", i * 1000, i * 1000 + 9);
    rl += (size_t)snprintf(range + rl, 4200 - rl, "\r\n\r\n");
    ck_assert_uint_lt(rl, 4200);
    staged("127.0.0.7", range, 0, NULL, out, sizeof(out));
    ck_assert_msg(strncmp(out, "HTTP/1.1 200", 12) == 0, "got: %.80s", out);
    /* A connection that begins with a POST (a publish) may send that much: its token is what it
     * lacks. Its first bytes may come in pieces. */
    staged("127.0.0.7", "PO", 0, post, out, sizeof(out));
    ck_assert_msg(strncmp(out, "HTTP/1.1 401", 12) == 0, "got: %.80s", out);
    staged("127.0.0.7", "PO", 100, post, out, sizeof(out));
    ck_assert_msg(strncmp(out, "HTTP/1.1 401", 12) == 0, "got: %.80s", out);
    /* One that said nothing for a while, or began with a GET, has the smaller buffer. */
    ck_assert_int_ge(asprintf(&both, "PO%s", post), 0);
    staged("127.0.0.7", "", 1500, both, out, sizeof(out));
    ck_assert_msg(strncmp(out, "HTTP/1.1 431", 12) == 0, "got: %.80s", out);
    free(both);
    ck_assert_int_ge(asprintf(&both, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nPO%s", post), 0);
    staged("127.0.0.7", both, 0, NULL, out, sizeof(out));
    ck_assert_msg(strncmp(out, "HTTP/1.1 200", 12) == 0 && strstr(out, "HTTP/1.1 431") != NULL,
                  "got: %.200s", out);
    /* The server is up, and the refusals were counted (as libmicrohttpd's own: aborted). */
    ck_assert(healthz_seconds() < 1.0);
    resp r;
    http(&r, "GET", "/metrics", NULL, NULL, NULL, NULL, 0);
    ck_assert_msg(strstr(r.body.data, "{route=\"healthz\",status=\"aborted\"} 1\n") &&
                      strstr(r.body.data, "{route=\"publish\",status=\"aborted\"} 2\n"),
                  "%s", r.body.data);
    resp_free(&r);
    free(both);
    free(range);
    free(post);
    free(get);
    free(pad);
}
END_TEST

START_TEST(test_server__encoded_nul_in_path_or_query_is_400)
{
    srv_start(&g_srv, NULL);
    long long id = publish_ok(&base_spec, 1);
    char p[256], sha[65];
    resp r;
    snprintf(p, sizeof(p), "/v1/psdbs/%lld", id);
    http(&r, "GET", p, NULL, NULL, NULL, NULL, 0);
    snprintf(sha, sizeof(sha), "%s", jstr(r.json, "sha256", NULL));
    resp_free(&r);
    char blob_nul[160], id_nul[64];
    snprintf(blob_nul, sizeof(blob_nul), "/v1/blobs/%s%%00.psdb", sha);
    snprintf(id_nul, sizeof(id_nul), "/v1/psdbs/%lld%%00", id);
    /* Each would be served as the part before the NUL without the check. */
    const char *bad[] = {blob_nul,
                         id_nul,
                         "/healthz%00",
                         "/v1/apps/Game%00x/psdbs",
                         "/v1/resolve?app=Game%00Other&app_version=1.0.0.0&family=contoso-gfx9&"
                         "abi_min=1&abi_max=9",
                         "/v1/resolve?app=Game&app_version=1.0.0.0&family=contoso-gfx9%00&"
                         "abi_min=1&abi_max=9",
                         "/healthz?x=%00"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        http(&r, "GET", bad[i], NULL, NULL, NULL, NULL, 0);
        ck_assert_msg(r.status == 400, "%s: %ld", bad[i], r.status);
        ck_assert_str_eq(jstr(r.json, "error", NULL), "bad_request");
        resp_free(&r);
    }
    /* Other escapes still decode. */
    http(&r, "GET",
         "/v1/resolve?app=G%61me&app_version=1.0.0.0&family=contoso-gfx9&abi_min=1&abi_max=9", NULL,
         NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
}
END_TEST

/* An error message quotes what the client sent; JSON carries UTF-8 only, so bytes that are not
 * (a path that decodes to them, or a quote cut inside a sequence) are answered as '?', and the
 * server keeps serving. */
START_TEST(test_server__error_quoting_bytes_that_are_not_utf8_is_answered)
{
    srv_start(&g_srv, NULL);
    char cut[256];
    /* "no such endpoint: %.200s" cuts this path's decoded form inside its first U+00E9. */
    int n = snprintf(cut, sizeof(cut), "/v1/");
    memset(cut + n, 'a', 195);
    snprintf(cut + n + 195, sizeof(cut) - (size_t)n - 195, "%%C3%%A9%%C3%%A9");
    const char *paths[] = {"/v1/%FF%FE", "/v1/stats/%C3%28", cut};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        resp r;
        http(&r, "GET", paths[i], NULL, NULL, NULL, NULL, 0);
        ck_assert_msg(r.status == 404, "%.40s: %ld", paths[i], r.status);
        ck_assert_str_eq(jstr(r.json, "error", NULL), "not_found");
        ck_assert_ptr_nonnull(strchr(jstr(r.json, "message", NULL), '?'));
        resp_free(&r);
        expect_status("GET", "/healthz", NULL, 200, NULL);
    }
    ck_assert_int_eq(srv_stop(&g_srv), 0);
}
END_TEST

START_TEST(test_server__repeated_or_conflicting_content_length_is_400)
{
    srv_start(&g_srv, NULL);
    char out[4096], req[2048];
    const char *variants[] = {
        "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
        "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 5\r\n\r\nabcde",
        "GET /healthz HTTP/1.1\r\nHost: x\r\ncontent-length: 0\r\nContent-Length: 0\r\n\r\n",
        ("GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
         "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
        "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 3\r\n\r\nabc",
    };
    for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
        raw(variants[i], strlen(variants[i]), 0, out, sizeof(out));
        ck_assert_msg(strncmp(out, "HTTP/1.1 400", 12) == 0, "variant %zu: %.80s", i, out);
    }
    /* The same on a publish, before the token or any body is looked at. */
    int n = snprintf(req, sizeof(req),
                     "POST /v1/psdbs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                     "Content-Length: 10\r\nContent-Length: 20\r\nX-Psdb-Serial: 1\r\n\r\n",
                     g_pub);
    raw(req, (size_t)n, 0, out, sizeof(out));
    ck_assert_msg(strncmp(out, "HTTP/1.1 400", 12) == 0, "publish: %.80s", out);
    ck_assert_int_eq(count_dir("tmp"), 0);
}
END_TEST

START_TEST(test_server__blob_validators_if_match_and_dates)
{
    srv_start(&g_srv, NULL);
    long long id = publish_ok(&base_spec, 1);
    resp r;
    char p[256], url[128], sha[65], etag[80];
    snprintf(p, sizeof(p), "/v1/psdbs/%lld", id);
    http(&r, "GET", p, NULL, NULL, NULL, NULL, 0);
    snprintf(sha, sizeof(sha), "%s", jstr(r.json, "sha256", NULL));
    struct tm tm = {0};
    ck_assert_ptr_nonnull(strptime(jstr(r.json, "created_at", NULL), "%Y-%m-%dT%H:%M:%SZ", &tm));
    time_t created = timegm(&tm);
    resp_free(&r);
    snprintf(url, sizeof(url), "/v1/blobs/%s", sha);
    snprintf(etag, sizeof(etag), "\"%s\"", sha);
    char lm[64], before[64], after[64];
    time_t t_before = created - 3600, t_after = time(NULL) + 86400;
    strftime(lm, sizeof(lm), "%a, %d %b %Y %H:%M:%S GMT", gmtime(&created));
    strftime(before, sizeof(before), "%a, %d %b %Y %H:%M:%S GMT", gmtime(&t_before));
    strftime(after, sizeof(after), "%a, %d %b %Y %H:%M:%S GMT", gmtime(&t_after));

    /* Last-Modified is the publish time (the manifest's created_at). */
    http(&r, "HEAD", url, NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(header(&r, "Last-Modified"), lm);
    resp_free(&r);

    char h1[160], h2[160];
    struct {
        const char *a, *b;
        long status;
    } cases[] = {
        {"If-Match: \"0000\"", NULL, 412},
        {"If-Match: *", NULL, 200},
        {h1, NULL, 200}, /* If-Match: the ETag */
        {"If-Match: \"0000\", W/\"x\"", NULL, 412},
        {h2, NULL, 412}, /* If-Match: W/ETag: weak never matches strongly */
        {"If-Unmodified-Since: Sat, 01 Jan 2000 00:00:00 GMT", NULL, 412},
        {"If-Modified-Since: ", lm, 304},
        {"If-Modified-Since: ", after, 200}, /* a date in the future is no validator */
        {"If-Modified-Since: ", before, 200},
        {"If-Modified-Since: Sat, 01 Jan 2000 00:00:00 GMT", NULL, 200},
        {"If-Modified-Since: not a date", NULL, 200},
        /* If-None-Match takes precedence over If-Modified-Since (RFC 9110 13.1.3). */
        {"If-None-Match: \"0000\"", NULL, 200},
        {"If-Match: \"0000\"", "If-None-Match: *", 412},
    };
    snprintf(h1, sizeof(h1), "If-Match: %s", etag);
    snprintf(h2, sizeof(h2), "If-Match: W/%s", etag);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char line[200];
        const char *hs[3] = {cases[i].a, NULL, NULL};
        if (cases[i].b && strncmp(cases[i].b, "If-", 3) == 0) {
            hs[1] = cases[i].b;
        } else if (cases[i].b) {
            snprintf(line, sizeof(line), "%s%s", cases[i].a, cases[i].b);
            hs[0] = line;
        }
        http(&r, "GET", url, NULL, hs, NULL, NULL, 0);
        ck_assert_msg(r.status == cases[i].status, "case %zu (%s %s): %ld", i, hs[0],
                      hs[1] ? hs[1] : "", r.status);
        if (r.status == 412)
            ck_assert_str_eq(jstr(r.json, "error", NULL), "precondition_failed");
        resp_free(&r);
    }
    char ims[160], inm_other[] = "If-None-Match: \"0000\"";
    snprintf(ims, sizeof(ims), "If-Modified-Since: %s", lm);
    const char *both[] = {inm_other, ims, NULL};
    http(&r, "GET", url, NULL, both, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200); /* If-Modified-Since is ignored beside If-None-Match */
    resp_free(&r);

    /* A 304 carries the validators and no body framing at all. */
    char inm[160];
    snprintf(inm, sizeof(inm), "If-None-Match: %s", etag);
    const char *cond[] = {inm, NULL};
    http(&r, "GET", url, NULL, cond, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 304);
    ck_assert_ptr_null(header(&r, "Content-Length"));
    ck_assert_ptr_null(header(&r, "Transfer-Encoding"));
    ck_assert_str_eq(header(&r, "ETag"), etag);
    ck_assert_str_eq(header(&r, "Last-Modified"), lm);
    resp_free(&r);

    /* If-Range: the ETag or exactly the Last-Modified date keeps the range. */
    char ir_date[160];
    snprintf(ir_date, sizeof(ir_date), "If-Range: %s", lm);
    const char *ir1[] = {"Range: bytes=0-9", ir_date, NULL};
    http(&r, "GET", url, NULL, ir1, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 206);
    resp_free(&r);
    snprintf(ir_date, sizeof(ir_date), "If-Range: %s", before);
    http(&r, "GET", url, NULL, ir1, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
}
END_TEST

/* A publish request head with the given signature, key id and serial header values. */
static char *publish_head(const char *sig, const char *kid, const char *serial, int expect)
{
    char *h = NULL;
    ck_assert_int_ge(asprintf(&h,
                              "POST /v1/psdbs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                              "Content-Length: 1000000000\r\nX-Psdb-Serial: %s\r\n"
                              "X-Psdb-Key-Id: %s\r\nX-Psdb-Signature: %s\r\n%s\r\n",
                              g_pub, serial, kid, sig, expect ? "Expect: 100-continue\r\n" : ""),
                     0);
    return h;
}

START_TEST(test_server__malformed_publish_headers_refused_before_body)
{
    srv_start(&g_srv, NULL);
    char good_sig[PSDB_SIGNATURE_B64_SIZE], upper_kid[PSDB_KEY_ID_SIZE];
    memset(good_sig, 'A', 86);
    memcpy(good_sig + 86, "==", 3);
    snprintf(upper_kid, sizeof(upper_kid), "%s", g_kid);
    for (char *q = upper_kid; *q; q++)
        if (*q >= 'a' && *q <= 'f')
            *q = (char)(*q - 32);
    char bad_chars[PSDB_SIGNATURE_B64_SIZE], pad_bits[PSDB_SIGNATURE_B64_SIZE],
        no_pad[PSDB_SIGNATURE_B64_SIZE];
    memcpy(bad_chars, good_sig, sizeof(good_sig));
    bad_chars[10] = '!';
    memcpy(pad_bits, good_sig, sizeof(good_sig));
    pad_bits[85] = 'B'; /* non-zero pad bits: not the canonical encoding of any 64 bytes */
    memset(no_pad, 'A', 88);
    no_pad[88] = '\0';
    struct {
        const char *sig, *kid, *serial;
    } bad[] = {
        {bad_chars, g_kid, "1"},
        {pad_bits, g_kid, "1"},
        {no_pad, g_kid, "1"},
        {"AAAA", g_kid, "1"},
        {good_sig, upper_kid, "1"},
        {good_sig, "1234", "1"},
        {good_sig, g_kid, "x1"},
        {good_sig, g_kid, "-1"},
        {good_sig, g_kid, "9223372036854775808"},
        {good_sig, g_kid, "1 2"},
    };
    char out[4096];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        /* Expect: 100-continue: a server that looked at the body would send 100 first. */
        char *h = publish_head(bad[i].sig, bad[i].kid, bad[i].serial, 1);
        raw(h, strlen(h), 0, out, sizeof(out));
        ck_assert_msg(strncmp(out, "HTTP/1.1 400", 12) == 0, "case %zu: %.80s", i, out);
        ck_assert_ptr_null(strstr(out, "100 Continue"));
        free(h);
    }
    ck_assert_int_eq(count_dir("tmp"), 0);
    /* Well-formed headers with Expect: 100-continue get the 100 and then read the body. */
    char *h = publish_head(good_sig, g_kid, "1", 1);
    raw(h, strlen(h), 1, out, sizeof(out));
    ck_assert_msg(strncmp(out, "HTTP/1.1 100", 12) == 0, "good headers: %.80s", out);
    free(h);

    /* A whole publish with Expect: 100-continue (what curl sends for large bodies). */
    char *path = make_psdb(&base_spec);
    psdb_file *f = NULL;
    psdb_file_info info;
    psdb_statement st = {0};
    char sig[PSDB_SIGNATURE_B64_SIZE], h_sig[128], h_kid[128];
    ck_assert_hr(psdb_file_open(path, NULL, &f), PSDB_S_OK);
    ck_assert_hr(psdb_file_get_info(f, &info), PSDB_S_OK);
    sha256_file(path, st.sha256, &st.size);
    st.identity = info.identity;
    st.target = info.target;
    st.serial = 5;
    ck_assert_hr(psdb_statement_sign(g_key, &st, sig), PSDB_S_OK);
    psdb_file_release(f);
    snprintf(h_sig, sizeof(h_sig), "X-Psdb-Signature: %s", sig);
    snprintf(h_kid, sizeof(h_kid), "X-Psdb-Key-Id: %s", g_kid);
    const char *hs[] = {h_sig, h_kid, "X-Psdb-Serial: 5", "Expect: 100-continue", NULL};
    resp r;
    http(&r, "POST", "/v1/psdbs", g_pub, hs, path, NULL, 0);
    ck_assert_msg(r.status == 201, "publish with Expect: %ld %s", r.status, r.body.data);
    ck_assert_ptr_nonnull(strstr(r.headers.data, "HTTP/1.1 100 Continue"));
    resp_free(&r);
    free(path);
}
END_TEST

/* An answer decided before a body that comes without Expect: 100-continue (a wrong token, a
 * publish without its statement) waits for the body, read and dropped: nginx streams the body it
 * buffered to psdbd before it reads an answer, and a connection closed under it is a broken pipe,
 * answered 502 in place of the 401 or 400. The whole body is sent here (a send to a closed
 * connection fails), then the answer is read. */
START_TEST(test_server__early_publish_answers_wait_for_the_body)
{
    srv_start(&g_srv, NULL);
    size_t body = 16u << 20; /* well over what the sockets buffer between the two */
    struct {
        const char *auth;
        const char *want;
    } cases[] = {
        {"not-a-token", "HTTP/1.1 401"},
        {g_pub, "HTTP/1.1 400"}, /* a publisher's token, no X-Psdb- statement headers */
    };
    char out[4096];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *head = NULL;
        ck_assert_int_ge(asprintf(&head,
                                  "POST /v1/psdbs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                                  "%s\r\nContent-Length: %zu\r\n\r\n",
                                  cases[i].auth, body),
                         0);
        size_t n = strlen(head);
        char *req = malloc(n + body);
        ck_assert_ptr_nonnull(req);
        memcpy(req, head, n);
        memset(req + n, 'x', body);
        raw(req, n + body, 1, out, sizeof(out));
        ck_assert_msg(strncmp(out, cases[i].want, 12) == 0, "case %zu: %.80s", i, out);
        free(req);
        free(head);
    }
    ck_assert_int_eq(count_dir("tmp"), 0);
}
END_TEST

START_TEST(test_server__aborted_download_logs_bytes_sent)
{
    srv_start(&g_srv, NULL);
    spec sp = base_spec;
    sp.payload = 48u << 20;
    long long id = publish_ok(&sp, 1);
    resp r;
    char p[256], req[256];
    snprintf(p, sizeof(p), "/v1/psdbs/%lld", id);
    http(&r, "GET", p, NULL, NULL, NULL, NULL, 0);
    long long size = jint(r.json, "size", NULL);
    int n = snprintf(req, sizeof(req), "GET /v1/blobs/%s HTTP/1.1\r\nHost: x\r\n\r\n",
                     jstr(r.json, "sha256", NULL));
    resp_free(&r);
    /* A client with a small receive buffer reads 256 KiB, then resets the connection. */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    int rcvbuf = 64 * 1024;
    setsockopt(s, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_srv.port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(s, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(send(s, req, (size_t)n, 0), n);
    char buf[16384];
    size_t got = 0;
    while (got < 256 * 1024) {
        ssize_t k = recv(s, buf, sizeof(buf), 0);
        ck_assert_int_gt(k, 0);
        got += (size_t)k;
    }
    usleep(200000);
    struct linger lg = {1, 0};
    setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(s);
    usleep(500000);
    http(&r, "GET", "/metrics", NULL, NULL, NULL, NULL, 0);
    ck_assert_ptr_nonnull(
        strstr(r.body.data, "psdbd_http_requests_total{route=\"blob\",status=\"aborted\"} 1"));
    resp_free(&r);
    ck_assert_int_eq(srv_stop(&g_srv), 0);
    char *log = tu_read_file(g_log, NULL), *line = strstr(log, "access GET /v1/blobs/");
    ck_assert_ptr_nonnull(line);
    char *eol = strchr(line, '\n');
    ck_assert_ptr_nonnull(eol);
    *eol = '\0';
    ck_assert_msg(strstr(line, " aborted=") != NULL, "%s", line);
    unsigned status = 0;
    unsigned long long bytes = 0;
    ck_assert_int_eq(sscanf(strchr(line + 21, ' '), " %u %llu", &status, &bytes), 2);
    ck_assert_uint_eq(status, 200);
    /* What the client took and the two kernels buffered, not the whole blob: at most what was
     * read, the client's receive buffer and the server's send buffer, which TCP may grow up to
     * net.ipv4.tcp_wmem's maximum (4 MiB by default; under load it does). */
    unsigned long long wmem_max = 4u << 20, lo, def, hi;
    FILE *wm = fopen("/proc/sys/net/ipv4/tcp_wmem", "r");
    if (wm && fscanf(wm, "%llu %llu %llu", &lo, &def, &hi) == 3)
        wmem_max = hi;
    if (wm)
        fclose(wm);
    unsigned long long bound = got + 2ull * (unsigned long long)rcvbuf + wmem_max + (256u << 10);
    ck_assert_msg(bound < (unsigned long long)size,
                  "the blob (%lld) must exceed the buffers (%llu)", size, bound);
    ck_assert_msg(bytes >= 200 * 1024 && bytes <= bound, "logged %llu of %lld (bound %llu)", bytes,
                  size, bound);
    free(log);
}
END_TEST

/* ---- value maps ------------------------------------------------------------------------------ */

/* <data>/valuemaps/<sha>.valuemap (version 1) or <sha>.v2.valuemap (malloc'd); `suffix` appended.
 */
static char *vmap_path(const char *sha, unsigned version, const char *suffix)
{
    char *p = NULL;
    ck_assert_int_ge(asprintf(&p, "%s/valuemaps/%s%s.valuemap%s", g_data, sha,
                              version == 1 ? "" : ".v2", suffix ? suffix : ""),
                     0);
    return p;
}

/* The value of psdbd_valuemaps_derived_total{version="V"} on /metrics, or -1 when absent. */
static long long derived_count(unsigned version)
{
    resp r;
    char series[96];
    long long n = -1;
    snprintf(series, sizeof(series), "psdbd_valuemaps_derived_total{version=\"%u\"} ", version);
    http(&r, "GET", "/metrics", NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    const char *line = r.body.data ? strstr(r.body.data, series) : NULL;
    if (line)
        n = atoll(line + strlen(series));
    resp_free(&r);
    return n;
}

/* How many times the log says map `version` of `sha` was derived. */
static int derived_in_log(const char *sha, unsigned version)
{
    char needle[160];
    char *log = tu_read_file(g_log, NULL);
    int n = 0;
    snprintf(needle, sizeof(needle), "valuemap v%u of %s derived", version, sha);
    for (const char *p = log; p && (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    free(log);
    return n;
}

/* Whether a file is a whole value map of `version` (magic and version field). */
static int is_valuemap(const char *path, unsigned version)
{
    size_t n = 0;
    char *data = tu_read_file(path, &n);
    int ok =
        data && n > 16 && memcmp(data, "PSDBVMAP", 8) == 0 && (unsigned char)data[8] == version;
    free(data);
    return ok;
}

/* The names in valuemaps/ that are not exactly a map's: temporaries, of any psdbd. */
static int count_vmap_temporaries(void)
{
    char *p = tu_path(g_data, "valuemaps");
    DIR *d = opendir(p);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.')
            continue;
        if (!(len == 64 + 9 && strcmp(e->d_name + 64, ".valuemap") == 0) &&
            !(len == 64 + 12 && strcmp(e->d_name + 64, ".v2.valuemap") == 0))
            n++;
    }
    if (d)
        closedir(d);
    free(p);
    return n;
}

START_TEST(test_server__publish_derives_the_v2_valuemap_without_a_request)
{
    srv_start(&g_srv, NULL);
    spec sp = base_spec;
    sp.payload = 4u << 20;
    long long id = publish_ok(&sp, 1);
    char *sha = sha_of(id, NULL), *v2 = vmap_path(sha, 2, NULL), *v1 = vmap_path(sha, 1, NULL);
    /* No request for it: the publish queued it for the worker. */
    ck_assert_msg(tu_wait_file(v2, 30), "no %s 30 s after the publish, without a GET", v2);
    ck_assert(is_valuemap(v2, 2));
    ck_assert_int_eq(derived_count(2), 1);
    ck_assert_int_eq(derived_count(1), 0);
    ck_assert_int_ne(access(v1, F_OK), 0); /* version 1 stays derived on request */
    /* The first request is served the derived file, and nothing derives it again. */
    char p[160];
    resp r;
    snprintf(p, sizeof(p), "/v1/blobs/%s/valuemap/v2", sha);
    http(&r, "GET", p, NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    size_t n = 0;
    char *file = tu_read_file(v2, &n);
    ck_assert_uint_eq(r.body.len, n);
    ck_assert_int_eq(memcmp(r.body.data, file, n), 0);
    free(file);
    resp_free(&r);
    ck_assert_int_eq(derived_count(2), 1);
    ck_assert_int_eq(srv_stop(&g_srv), 0);
    ck_assert_int_eq(derived_in_log(sha, 2), 1);
    ck_assert_int_eq(count_vmap_temporaries(), 0);
    free(v1);
    free(v2);
    free(sha);
}
END_TEST

/* In a child: waits on `gate` (closed by the parent to release every child at once), GETs `path`
 * and exits 0 for a 200 carrying a value map. */
static pid_t get_valuemap_in_child(const int gate[2], const char *path)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char b;
        resp r;
        g_soft = 1;
        close(gate[1]); /* the parent's is then the last write end */
        while (read(gate[0], &b, 1) < 0 && errno == EINTR) {
        }
        http(&r, "GET", path, NULL, NULL, NULL, NULL, 0);
        _exit(r.status == 200 && r.body.len > 96 && memcmp(r.body.data, "PSDBVMAP", 8) == 0 ? 0
                                                                                            : 1);
    }
    return pid;
}

/* N clients GET one map at the same instant; every one gets it, and it is derived once. */
static void concurrent_first_gets(const char *sha, unsigned version, int clients)
{
    char p[160];
    int gate[2];
    pid_t kids[32];
    ck_assert_int_le(clients, 32);
    snprintf(p, sizeof(p), "/v1/blobs/%s/valuemap%s", sha, version == 1 ? "" : "/v2");
    ck_assert_int_eq(pipe(gate), 0);
    for (int i = 0; i < clients; i++)
        kids[i] = get_valuemap_in_child(gate, p);
    close(gate[0]);
    usleep(100000); /* every child is blocked on the gate */
    close(gate[1]);
    for (int i = 0; i < clients; i++) {
        int st = 0;
        waitpid(kids[i], &st, 0);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "client %d of %d: no map v%u", i,
                      clients, version);
    }
}

START_TEST(test_server__concurrent_first_valuemap_requests_derive_it_once)
{
    enum { CLIENTS = 16 };
    /* Threads enough that the requests run at once, and a map that takes a while to derive. */
    const char *const threads[] = {"--threads", "16", NULL};
    srv_start(&g_srv, threads);
    spec sp = base_spec;
    sp.payload = 40u << 20;
    long long id = publish_ok(&sp, 1);
    char *sha = sha_of(id, NULL);
    /* Version 2, right after the publish: the worker may be deriving it; requests wait for it. */
    concurrent_first_gets(sha, 2, CLIENTS);
    /* Version 1 is derived on request only: the first one derives it, the others wait. */
    concurrent_first_gets(sha, 1, CLIENTS);
    ck_assert_int_eq(derived_count(2), 1);
    ck_assert_int_eq(derived_count(1), 1);
    ck_assert_int_eq(srv_stop(&g_srv), 0);
    ck_assert_int_eq(derived_in_log(sha, 2), 1);
    ck_assert_int_eq(derived_in_log(sha, 1), 1);
    ck_assert_int_eq(count_vmap_temporaries(), 0);
    free(sha);
}
END_TEST

START_TEST(test_server__sigterm_while_deriving_a_valuemap_stops_cleanly)
{
    srv_start(&g_srv, NULL);
    spec sp = base_spec;
    sp.payload = 40u << 20;
    long long id = publish_ok(&sp, 1);
    char *sha = sha_of(id, NULL), *v2 = vmap_path(sha, 2, NULL);
    /* Stopped at once: the worker finishes the map it is deriving (joined) or, had it not taken
     * it yet, says it leaves it to the first request; either way psdbd exits 0 and leaves a whole
     * map or none, and no temporary. */
    ck_assert_int_eq(srv_stop(&g_srv), 0);
    ck_assert_int_eq(count_vmap_temporaries(), 0);
    char *log = tu_read_file(g_log, NULL);
    int left = strstr(log, "stopping with 1 maps not derived yet") != NULL;
    free(log);
    ck_assert_int_eq(derived_in_log(sha, 2) + left, 1);
    ck_assert(left ? access(v2, F_OK) != 0 : is_valuemap(v2, 2));
    free(v2);
    free(sha);
}
END_TEST

static void set_age(const char *path, long seconds)
{
    struct timespec ts[2];
    clock_gettime(CLOCK_REALTIME, &ts[0]);
    ts[0].tv_sec -= seconds;
    ts[1] = ts[0];
    ck_assert_int_eq(utimensat(AT_FDCWD, path, ts, 0), 0);
}

/* A blob without its version 2 map (published by a psdbd that did not derive maps at publish,
 * or whose derivation a kill cut short) gets one after the next start, without a request. */
START_TEST(test_server__start_derives_the_v2_valuemaps_old_blobs_lack)
{
    srv_start(&g_srv, NULL);
    long long id = publish_ok(&base_spec, 1);
    char *sha = sha_of(id, NULL), *v2 = vmap_path(sha, 2, NULL);
    ck_assert_msg(tu_wait_file(v2, 30), "no %s 30 s after the publish", v2);
    ck_assert_int_eq(srv_stop(&g_srv), 0);
    ck_assert_int_eq(unlink(v2), 0);
    srv_start(&g_srv, NULL);
    ck_assert_msg(tu_wait_file(v2, 30), "no %s 30 s after the start", v2);
    ck_assert(is_valuemap(v2, 2));
    ck_assert_int_eq(srv_stop(&g_srv), 0);
    char *log = tu_read_file(g_log, NULL);
    ck_assert_msg(strstr(log, "valuemaps: backfill done: 1 blobs looked at, 1 version 2 maps "
                              "derived, 0 could not be") != NULL,
                  "no backfill summary in the log:\n%s", log);
    free(log);
    free(v2);
    free(sha);
}
END_TEST

START_TEST(test_server__valuemap_temporaries_of_a_killed_psdbd_removed_at_start)
{
    srv_start(&g_srv, NULL);
    long long id = publish_ok(&base_spec, 1);
    char *sha = sha_of(id, NULL), *v2 = vmap_path(sha, 2, NULL), p[160];
    snprintf(p, sizeof(p), "/v1/blobs/%s/valuemap/v2", sha);
    expect_status("GET", p, NULL, 200, NULL); /* the map, whoever derived it */
    srv_kill9(&g_srv);
    /* What a kill leaves: this psdbd's temporaries (mkstemp, then libpsdb's .tmp beside it) and
     * an older psdbd's (<map>.<pid>.<n>). */
    const char *leftovers[] = {".Ab12Cd", ".Ab12Cd.tmp", ".4242.0", ".4242.0.tmp"};
    char *made[8];
    for (int i = 0; i < 4; i++) {
        made[i] = vmap_path(sha, i % 2 ? 2 : 1, leftovers[i]);
        ck_assert_int_eq(tu_write_file(made[i], "partial", 7), 0);
    }
    ck_assert_int_eq(count_vmap_temporaries(), 4);
    srv_start(&g_srv, NULL); /* alone on its data directory */
    ck_assert_int_eq(count_vmap_temporaries(), 0);
    ck_assert(is_valuemap(v2, 2)); /* a whole map stays */
    ck_assert_int_eq(srv_stop(&g_srv), 0);
    for (int i = 0; i < 4; i++)
        free(made[i]);
    free(v2);
    free(sha);
}
END_TEST

START_TEST(test_server__gc_removes_valuemaps_of_removed_and_gone_blobs)
{
    srv_start(&g_srv, NULL);
    long long id = publish_ok(&base_spec, 1);
    char *live = sha_of(id, NULL), p[200];
    /* A blob no PSDB references, older than the grace period, with both its maps derived. */
    spec sp = base_spec;
    sp.seed = 77;
    char *orphan_src = make_psdb(&sp);
    uint8_t d[32];
    uint64_t size;
    char orphan[65];
    sha256_file(orphan_src, d, &size);
    hex(d, 32, orphan);
    char *ob = blob_path(orphan), *sub = tu_path(g_data, "blobs");
    snprintf(p, sizeof(p), "%s/%.2s", sub, orphan);
    mkdir(p, 0750);
    ck_assert_int_eq(rename(orphan_src, ob), 0);
    for (unsigned v = 1; v <= 2; v++) {
        snprintf(p, sizeof(p), "/v1/blobs/%s/valuemap%s", live, v == 1 ? "" : "/v2");
        expect_status("GET", p, NULL, 200, NULL);
        snprintf(p, sizeof(p), "/v1/blobs/%s/valuemap%s", orphan, v == 1 ? "" : "/v2");
        expect_status("GET", p, NULL, 200, NULL);
    }
    set_age(ob, 7200);
    /* Maps whose blob is already gone (an earlier gc, or by hand): a copy under another digest. */
    const char gone[] = "0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd";
    char *keep[4], *drop[8];
    int nk = 0, nd = 0;
    keep[nk++] = vmap_path(live, 1, NULL);
    keep[nk++] = vmap_path(live, 2, NULL);
    drop[nd++] = vmap_path(orphan, 1, NULL);
    drop[nd++] = vmap_path(orphan, 2, NULL);
    for (unsigned v = 1; v <= 2; v++) {
        size_t n = 0;
        char *m = tu_read_file(keep[v - 1], &n);
        drop[nd] = vmap_path(gone, v, NULL);
        ck_assert_int_eq(tu_write_file(drop[nd++], m, n), 0);
        free(m);
    }
    /* Temporaries: two of a killed derivation (old), one of a derivation running now (fresh). */
    drop[nd] = vmap_path(live, 2, ".Zz9Yy8");
    ck_assert_int_eq(tu_write_file(drop[nd], "partial", 7), 0);
    set_age(drop[nd++], 7200);
    drop[nd] = vmap_path(live, 1, ".4242.0.tmp");
    ck_assert_int_eq(tu_write_file(drop[nd], "partial", 7), 0);
    set_age(drop[nd++], 7200);
    keep[nk] = vmap_path(live, 2, ".Fresh1");
    ck_assert_int_eq(tu_write_file(keep[nk++], "partial", 7), 0);
    /* Not psdbd's: reported, left alone. */
    keep[nk++] = tu_path(g_data, "valuemaps/NOTES");
    ck_assert_int_eq(tu_write_file(keep[nk - 1], "x", 1), 0);
    set_age(keep[nk - 1], 7200);

    /* psdbd check: the gone blob's maps are notes; with --deep, a map that describes other bytes
     * than its blob's (the live blob's map under the orphan's name) is a problem. */
    char *out = NULL;
    size_t live_n = 0;
    char *live_map = tu_read_file(keep[1], &live_n);
    ck_assert_int_eq(tu_write_file(drop[1], live_map, live_n), 0);
    free(live_map);
    ck_assert_int_eq(run_capture(&out, "%s check --data-dir %s --json", PSDBD_BIN, g_data), 0);
    json_t *cj = json_loads(strrchr(out, '{'), 0, NULL);
    ck_assert_msg(cj != NULL, "check --json: %s", out);
    ck_assert_int_eq(jint(cj, "valuemaps", NULL), 6);
    ck_assert_int_eq(jint(cj, "orphan_valuemaps", NULL), 2);
    json_decref(cj);
    snprintf(p, sizeof(p), "note: value map valuemaps/%s.valuemap has no blob", gone);
    ck_assert_msg(strstr(out, p) != NULL, "check does not note the gone blob's map:\n%s", out);
    free(out);
    ck_assert_int_eq(run_capture(&out, "%s check --data-dir %s --deep", PSDBD_BIN, g_data), 1);
    snprintf(p, sizeof(p), "value map valuemaps/%s.v2.valuemap does not describe blob %s", orphan,
             orphan);
    ck_assert_msg(strstr(out, p) != NULL, "check --deep misses the foreign map:\n%s", out);
    snprintf(p, sizeof(p), "valuemaps/%s.v2.valuemap does not describe", live);
    ck_assert_msg(strstr(out, p) == NULL, "check --deep refuses the live map:\n%s", out);
    free(out);

    /* --dry-run names each of them and removes nothing. */
    ck_assert_int_eq(run_capture(&out, "%s gc --data-dir %s --dry-run", PSDBD_BIN, g_data), 0);
    for (int i = 0; i < nd; i++) {
        char want[200];
        snprintf(want, sizeof(want), "would remove valuemaps/%s", strrchr(drop[i], '/') + 1);
        ck_assert_msg(strstr(out, want) != NULL, "dry run does not report %s:\n%s", drop[i], out);
        ck_assert_int_eq(access(drop[i], F_OK), 0);
    }
    ck_assert_int_eq(access(ob, F_OK), 0);
    ck_assert_ptr_nonnull(strstr(out, "stray "));
    free(out);

    /* gc removes the orphan blob, its maps, the gone blob's maps and the old temporaries. */
    ck_assert_int_eq(run_capture(&out, "%s gc --data-dir %s --json", PSDBD_BIN, g_data), 0);
    json_t *j = json_loads(strrchr(out, '{'), 0, NULL);
    ck_assert_msg(j != NULL, "gc --json: %s", out);
    ck_assert_int_eq(jint(j, "removed", NULL), 1);
    ck_assert_int_eq(jint(j, "valuemaps", NULL), 4);
    ck_assert_int_eq(jint(j, "valuemap_temporaries", NULL), 2);
    json_decref(j);
    free(out);
    ck_assert_int_ne(access(ob, F_OK), 0);
    for (int i = 0; i < nd; i++)
        ck_assert_msg(access(drop[i], F_OK) != 0, "gc left %s", drop[i]);
    for (int i = 0; i < nk; i++)
        ck_assert_msg(access(keep[i], F_OK) == 0, "gc removed %s", keep[i]);
    /* The live blob's map is still served, from its file. */
    long long before = derived_count(2);
    snprintf(p, sizeof(p), "/v1/blobs/%s/valuemap/v2", live);
    expect_status("GET", p, NULL, 200, NULL);
    ck_assert_int_eq(derived_count(2), before);
    ck_assert_int_eq(srv_stop(&g_srv), 0);
    for (int i = 0; i < nd; i++)
        free(drop[i]);
    for (int i = 0; i < nk; i++)
        free(keep[i]);
    free(ob);
    free(sub);
    free(orphan_src);
    free(live);
}
END_TEST

START_TEST(test_server__publish_over_a_damaged_blob_file_drops_its_stale_valuemaps)
{
    srv_start(&g_srv, NULL);
    publish_ok(&base_spec, 1);
    /* A file of another size under the next PSDB's digest (damaged, unindexed), with maps that
     * were derived from it. */
    spec sp = base_spec;
    sp.seed = 91;
    char *path = make_psdb(&sp), sha[65], p[200];
    uint8_t d[32];
    uint64_t size;
    size_t n = 0;
    sha256_file(path, d, &size);
    hex(d, 32, sha);
    char *blob = blob_path(sha), *data = tu_read_file(path, &n), *sub = tu_path(g_data, "blobs");
    snprintf(p, sizeof(p), "%s/%.2s", sub, sha);
    mkdir(p, 0750);
    data = realloc(data, n + 4);
    memcpy(data + n, "junk", 4);
    ck_assert_int_eq(tu_write_file(blob, data, n + 4), 0);
    char *v1 = vmap_path(sha, 1, NULL), *v2 = vmap_path(sha, 2, NULL);
    /* The first publish's map is derived on psdbd's worker, which may not have made the folder
     * yet. */
    snprintf(p, sizeof(p), "%s/valuemaps", g_data);
    mkdir(p, 0750);
    ck_assert_int_eq(tu_write_file(v1, "stale", 5), 0);
    ck_assert_int_eq(tu_write_file(v2, "stale", 5), 0);
    /* The publish replaces the file; the maps of the old bytes go with it. */
    resp r;
    pub_opts o = {.serial = 2};
    publish(&r, path, &o);
    ck_assert_int_eq(r.status, 201);
    resp_free(&r);
    struct stat sb;
    ck_assert_int_eq(stat(blob, &sb), 0);
    ck_assert_uint_eq((uint64_t)sb.st_size, size);
    int fresh = 0;
    for (int i = 0; i < 3000 && !fresh; i++) {
        fresh = is_valuemap(v2, 2);
        if (!fresh)
            usleep(10000);
    }
    ck_assert_msg(fresh, "the version 2 map is still the damaged file's");
    snprintf(p, sizeof(p), "/v1/blobs/%s/valuemap", sha);
    http(&r, "GET", p, NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert(r.body.len > 96 && memcmp(r.body.data, "PSDBVMAP", 8) == 0);
    resp_free(&r);
    ck_assert_int_eq(srv_stop(&g_srv), 0);
    free(v1);
    free(v2);
    free(sub);
    free(data);
    free(blob);
    free(path);
}
END_TEST

START_TEST(test_server__pg_replica_that_did_not_take_the_publish_serves_the_valuemap)
{
    /* Two replicas on one database and one data directory; the publish goes to A. */
    srv a = {0}, b = {0};
    srv_start(&a, NULL);
    srv_start(&b, NULL);
    g_srv = a;
    long long id = publish_ok(&base_spec, 1);
    char *sha = sha_of(id, NULL), *v2 = vmap_path(sha, 2, NULL), p[160];
    ck_assert(tu_wait_file(v2, 30));
    /* B serves A's map without deriving it. */
    g_srv = b;
    snprintf(p, sizeof(p), "/v1/blobs/%s/valuemap/v2", sha);
    expect_status("GET", p, NULL, 200, NULL);
    ck_assert_int_eq(derived_count(2), 0);
    /* A map not there yet (A's worker behind, or its queue full): B derives it on request. */
    ck_assert_int_eq(unlink(v2), 0);
    expect_status("GET", p, NULL, 200, NULL);
    ck_assert_int_eq(derived_count(2), 1);
    ck_assert(is_valuemap(v2, 2));
    snprintf(p, sizeof(p), "/v1/blobs/%s/valuemap", sha);
    expect_status("GET", p, NULL, 200, NULL);
    ck_assert_int_eq(derived_count(1), 1);
    g_srv.pid = 0;
    ck_assert_int_eq(srv_stop(&a), 0);
    ck_assert_int_eq(srv_stop(&b), 0);
    free(v2);
    free(sha);
}
END_TEST

/* ---- the compile farm (schema/HTTP.md, Farm) --------------------------------------------------
 */

/* An SODB of Game (the identity make_psdb gives its PSDBs) at `version`. */
static char *make_sodb(const char *version, unsigned seed)
{
    static int counter;
    char name[64];
    snprintf(name, sizeof(name), "s%d.sodb", counter++);
    char *path = tu_path(g_dir, name);
    ck_assert_int_eq(run_status("%s synth --app Game --app-version %s --pipelines 4 --seed %u "
                                "--exe game.exe --engine Engine:5.0.0.0 --app-id "
                                "a1020304-0506-0708-090a-0b0c0d0e0f10 -o %s >/dev/null",
                                PSDB_TOOL, version, seed, path),
                     0);
    return path;
}

/* POST /v1/sodbs of `path` signed (SODB statement) with key, sent as kid. */
static void publish_sodb(resp *r, const char *path, psdb_key *key, const char *kid, uint64_t serial,
                         const char *tok)
{
    psdb_sodb *s = NULL;
    psdb_sodb_statement st = {0};
    char sig[PSDB_SIGNATURE_B64_SIZE], h_sig[128], h_kid[128], h_serial[64];
    ck_assert_hr(psdb_sodb_open(path, &s), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_get_identity(s, &st.identity), PSDB_S_OK);
    sha256_file(path, st.sha256, &st.size);
    st.serial = serial;
    ck_assert_hr(psdb_sodb_statement_sign(key, &st, sig), PSDB_S_OK);
    psdb_sodb_release(s);
    snprintf(h_sig, sizeof(h_sig), "X-Psdb-Signature: %s", sig);
    snprintf(h_kid, sizeof(h_kid), "X-Psdb-Key-Id: %s", kid);
    snprintf(h_serial, sizeof(h_serial), "X-Psdb-Serial: %llu", (unsigned long long)serial);
    const char *hs[] = {h_sig, h_kid, h_serial, NULL};
    http(r, "POST", "/v1/sodbs", tok, hs, path, NULL, 0);
}

/* A JSON POST. */
static void post_json(resp *r, const char *path, const char *tok, const char *json)
{
    const char *hs[] = {"Content-Type: application/json", NULL};
    http(r, "POST", path, tok, hs, NULL, json, strlen(json));
}

static void claim_body(char *buf, size_t size, const char *worker, unsigned abi, unsigned lease_s)
{
    snprintf(buf, size,
             "{\"worker\":\"%s\",\"target\":{\"family\":\"contoso-gfx9\",\"abi_version\":%u},"
             "\"lease_s\":%u}",
             worker, abi, lease_s);
}

/* SODB publish: valid (201, then 200 for the same), not an SODB (400 invalid_sodb), a signature
 * by another key (403 bad_signature), a key whose scope does not cover the application (403
 * out_of_scope); GET /v1/sodbs lists it. */
START_TEST(test_server__farm_sodb_publish_and_list)
{
    resp r;
    srv_start(&g_srv, NULL);
    char *sodb = make_sodb("1.0.0.0", 1);
    publish_sodb(&r, sodb, g_key, g_kid, 1, g_pub);
    ck_assert_msg(r.status == 201, "%ld %s", r.status, r.body.data);
    ck_assert_str_eq(jstr(r.json, "kind", NULL), "sodb");
    char sha[65];
    snprintf(sha, sizeof(sha), "%s", jstr(r.json, "sha256", NULL));
    resp_free(&r);
    publish_sodb(&r, sodb, g_key, g_kid, 1, g_pub);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    /* The same identity and serial with other bytes: a conflict. */
    char *other = make_sodb("1.0.0.0", 2);
    publish_sodb(&r, other, g_key, g_kid, 1, g_pub);
    ck_assert_int_eq(r.status, 409);
    resp_free(&r);
    publish_sodb(&r, other, g_key2, g_kid, 2, g_pub); /* signed by key2, sent as key1 */
    ck_assert_int_eq(r.status, 403);
    ck_assert_str_eq(jstr(r.json, "error", NULL), "bad_signature");
    resp_free(&r);
    publish_sodb(&r, other, g_key2, g_kid2, 2, g_pub); /* key2's scope is Other* */
    ck_assert_int_eq(r.status, 403);
    ck_assert_str_eq(jstr(r.json, "error", NULL), "out_of_scope");
    resp_free(&r);
    /* A PSDB is no SODB. */
    char *psdb = make_psdb(&base_spec);
    publish_sodb(&r, sodb, g_key, g_kid, 3, g_pub); /* repeat under a new serial: accepted */
    ck_assert_int_eq(r.status, 201);
    resp_free(&r);
    {
        char h_sig[128], h_kid[128];
        snprintf(h_sig, sizeof(h_sig), "X-Psdb-Signature: %.86s==",
                 "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
                 "AAAAAAAA");
        snprintf(h_kid, sizeof(h_kid), "X-Psdb-Key-Id: %s", g_kid);
        const char *hs[] = {h_sig, h_kid, "X-Psdb-Serial: 4", NULL};
        http(&r, "POST", "/v1/sodbs", g_pub, hs, psdb, NULL, 0);
        ck_assert_msg(r.status == 400, "%ld %s", r.status, r.body.data);
        ck_assert_str_eq(jstr(r.json, "error", NULL), "invalid_sodb");
        resp_free(&r);
    }
    /* A reader cannot publish one. */
    publish_sodb(&r, sodb, g_key, g_kid, 5, g_reader);
    ck_assert_int_eq(r.status, 403);
    resp_free(&r);
    http(&r, "GET", "/v1/sodbs?app=Game&app_version=1.0.0.0", g_reader, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    json_t *list = json_object_get(r.json, "sodbs");
    ck_assert_int_eq(json_array_size(list), 2);
    ck_assert_int_eq(jint(json_array_get(list, 0), "serial", NULL), 3); /* newest first */
    ck_assert_str_eq(jstr(json_array_get(list, 1), "sha256", NULL), sha);
    resp_free(&r);
    http(&r, "GET", "/v1/sodbs?app=Game&app_version=2.0.0.0", g_reader, NULL, NULL, NULL, 0);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "sodbs")), 0);
    resp_free(&r);
    free(sodb);
    free(other);
    free(psdb);
}
END_TEST

/* The whole job life: a resolve miss makes a job, a second miss bumps its demand (one job per
 * cell); claim, extend, fail; an expired lease is claimed by another worker and the first
 * worker's done is refused 409 lease_lost; the second publishes a version 2 PSDB and finishes;
 * failures past job-max-attempts hold a job; the trust rules of a compiler's publish. */
START_TEST(test_server__farm_jobs_lease_lifecycle_and_trust)
{
    resp r;
    char body[512], path[128], lease_a[64], lease_b[64];
    srv_start(&g_srv, NULL);
    char *compiler = token("compiler", "*", "--name farm");
    char *sodb = make_sodb("1.0.0.0", 1);
    publish_sodb(&r, sodb, g_key, g_kid, 1, g_pub);
    ck_assert_int_eq(r.status, 201);
    char sodb_sha[65];
    snprintf(sodb_sha, sizeof(sodb_sha), "%s", jstr(r.json, "sha256", NULL));
    resp_free(&r);
    /* A compiler's publish without a published SODB, or without a version 2 statement. */
    char *psdb = make_psdb(&base_spec);
    pub_opts o = {.token = compiler,
                  .serial = 1,
                  .sodb = "00000000000000000000000000000000"
                          "00000000000000000000000000000000"};
    publish(&r, psdb, &o);
    ck_assert_msg(r.status == 403, "%ld %s", r.status, r.body.data);
    ck_assert_str_eq(jstr(r.json, "error", NULL), "sodb_unknown");
    resp_free(&r);
    o.sodb = NULL;
    publish(&r, psdb, &o);
    ck_assert_int_eq(r.status, 403);
    ck_assert_str_eq(jstr(r.json, "error", NULL), "forbidden");
    resp_free(&r);
    for (int i = 0; i < 2; i++) {
        http(&r, "GET",
             "/v1/resolve?app=Game&app_version=1.0.0.0&family=contoso-gfx9&abi_min=7&abi_max=7",
             g_reader, NULL, NULL, NULL, 0);
        ck_assert_int_eq(r.status, 404);
        resp_free(&r);
    }
    http(&r, "GET", "/v1/jobs", g_reader, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "jobs")), 1);
    json_t *job = json_array_get(json_object_get(r.json, "jobs"), 0);
    ck_assert_int_eq(jint(job, "demand", NULL), 2);
    ck_assert_str_eq(jstr(job, "state", NULL), "queued");
    ck_assert_str_eq(jstr(job, "sodb_sha256", NULL), sodb_sha);
    long long id = jint(job, "id", NULL);
    resp_free(&r);
    /* Only a compiler claims. */
    claim_body(body, sizeof(body), "a", 7, 1);
    post_json(&r, "/v1/jobs/claim", g_pub, body);
    ck_assert_int_eq(r.status, 403);
    resp_free(&r);
    post_json(&r, "/v1/jobs/claim", compiler, body);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body.data);
    ck_assert_int_eq(jint(r.json, "job", "id"), id);
    ck_assert_int_eq(jint(r.json, "serial", NULL), 1);
    ck_assert(json_is_null(json_object_get(r.json, "base")));
    snprintf(lease_a, sizeof(lease_a), "%s", jstr(r.json, "lease", NULL));
    resp_free(&r);
    post_json(&r, "/v1/jobs/claim", compiler, body); /* nothing else to do */
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
    snprintf(path, sizeof(path), "/v1/jobs/%lld/extend", id);
    snprintf(body, sizeof(body), "{\"lease\":\"%s\",\"lease_s\":1}", lease_a);
    post_json(&r, path, compiler, body);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    snprintf(path, sizeof(path), "/v1/jobs/%lld/fail", id);
    snprintf(body, sizeof(body), "{\"lease\":\"%s\",\"error\":\"compiler crashed\"}", lease_a);
    post_json(&r, path, compiler, body);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(jstr(r.json, "state", NULL), "queued");
    resp_free(&r);
    /* Claimed again by a; its lease expires; b claims it; a's done is refused. */
    claim_body(body, sizeof(body), "a", 7, 1);
    post_json(&r, "/v1/jobs/claim", compiler, body);
    ck_assert_int_eq(r.status, 200);
    snprintf(lease_a, sizeof(lease_a), "%s", jstr(r.json, "lease", NULL));
    resp_free(&r);
    usleep(2200 * 1000);
    claim_body(body, sizeof(body), "b", 7, 60);
    post_json(&r, "/v1/jobs/claim", compiler, body);
    ck_assert_int_eq(r.status, 200);
    ck_assert_int_eq(jint(r.json, "job", "id"), id);
    ck_assert_int_eq(jint(r.json, "job", "attempts"), 3);
    long long serial = jint(r.json, "serial", NULL);
    snprintf(lease_b, sizeof(lease_b), "%s", jstr(r.json, "lease", NULL));
    resp_free(&r);
    /* b publishes the version 2 PSDB with the compiler's token. */
    o.sodb = sodb_sha;
    o.serial = (uint64_t)serial;
    publish(&r, psdb, &o);
    ck_assert_msg(r.status == 201, "%ld %s", r.status, r.body.data);
    ck_assert_int_eq(jint(r.json, "statement_version", NULL), 2);
    ck_assert_str_eq(jstr(r.json, "sodb_sha256", NULL), sodb_sha);
    long long psdb_id = jint(r.json, "id", NULL);
    resp_free(&r);
    snprintf(path, sizeof(path), "/v1/jobs/%lld/done", id);
    snprintf(body, sizeof(body), "{\"lease\":\"%s\",\"psdb_id\":\"%lld\"}", lease_a, psdb_id);
    post_json(&r, path, compiler, body);
    ck_assert_int_eq(r.status, 409);
    ck_assert_str_eq(jstr(r.json, "error", NULL), "lease_lost");
    resp_free(&r);
    snprintf(body, sizeof(body), "{\"lease\":\"%s\",\"psdb_id\":\"%lld\"}", lease_b, psdb_id);
    post_json(&r, path, compiler, body);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body.data);
    resp_free(&r);
    http(&r, "GET", "/v1/jobs?state=done", g_reader, NULL, NULL, NULL, 0);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "jobs")), 1);
    json_t *w = json_array_get(json_object_get(r.json, "workers"), 1);
    ck_assert_str_eq(jstr(w, "worker", NULL), "b");
    ck_assert_int_eq(jint(w, "jobs_done", NULL), 1);
    resp_free(&r);
    http(&r, "GET",
         "/v1/resolve?app=Game&app_version=1.0.0.0&family=contoso-gfx9&abi_min=7&abi_max=7",
         g_reader, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    /* The dashboard's report: the cell the farm filled, and who built it. */
    http(&r, "GET", "/v1/stats/farm", g_reader, NULL, NULL, NULL, 0);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body.data);
    ck_assert_int_eq(jint(r.json, "jobs", "done"), 1);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "cells")), 1);
    json_t *cell = json_array_get(json_object_get(r.json, "cells"), 0);
    ck_assert_str_eq(jstr(cell, "family", NULL), "contoso-gfx9");
    ck_assert_str_eq(jstr(cell, "app_version", NULL), "1.0.0.0");
    ck_assert_int_eq(jint(cell, "abi_version", NULL), 7);
    ck_assert_str_eq(jstr(cell, "worker", NULL), "b");
    ck_assert_int_eq(atoll(jstr(cell, "newest_id", NULL)), psdb_id);
    resp_free(&r);
    /* A requested job for another family, failed job-max-attempts (3) times: held. */
    post_json(&r, "/v1/jobs", g_pub,
              "{\"app\":\"Game\",\"app_version\":\"1.0.0.0\",\"family\":\"fabrikam\","
              "\"abi_version\":2}");
    ck_assert_msg(r.status == 201, "%ld %s", r.status, r.body.data);
    long long id2 = jint(r.json, "id", NULL);
    resp_free(&r);
    post_json(&r, "/v1/jobs", g_pub,
              "{\"app\":\"Game\",\"app_version\":\"1.0.0.0\",\"family\":\"fabrikam\","
              "\"abi_version\":2}");
    ck_assert_int_eq(r.status, 200); /* the same job */
    ck_assert_int_eq(jint(r.json, "id", NULL), id2);
    resp_free(&r);
    for (int i = 0; i < 3; i++) {
        post_json(&r, "/v1/jobs/claim", compiler,
                  "{\"worker\":\"c\",\"target\":{\"family\":\"fabrikam\",\"abi_version\":2}}");
        ck_assert_int_eq(r.status, 200);
        snprintf(body, sizeof(body), "{\"lease\":\"%s\",\"error\":\"no\"}",
                 jstr(r.json, "lease", NULL));
        resp_free(&r);
        snprintf(path, sizeof(path), "/v1/jobs/%lld/fail", id2);
        post_json(&r, path, compiler, body);
        ck_assert_int_eq(r.status, 200);
        ck_assert_str_eq(jstr(r.json, "state", NULL), i < 2 ? "queued" : "held");
        resp_free(&r);
    }
    post_json(&r, "/v1/jobs/claim", compiler,
              "{\"worker\":\"c\",\"target\":{\"family\":\"fabrikam\",\"abi_version\":2}}");
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
    http(&r, "GET", "/metrics", g_reader, NULL, NULL, NULL, 0);
    ck_assert_ptr_nonnull(strstr(r.body.data, "psdb_jobs{state=\"held\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(r.body.data, "psdb_jobs{state=\"done\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(r.body.data, "psdb_job_failures_total 4\n"));
    ck_assert_ptr_nonnull(strstr(r.body.data, "psdb_job_seconds_count 1\n"));
    resp_free(&r);
    free(compiler);
    free(sodb);
    free(psdb);
}
END_TEST

/* A key registered with --families signs PSDBs of those families only: 403 key_scope. */
START_TEST(test_server__farm_key_family_scope)
{
    resp r;
    char *k = tu_path(g_dir, "famkey"), kid[PSDB_KEY_ID_SIZE];
    psdb_key *key = NULL;
    ck_assert_hr(psdb_keygen(k, kid), PSDB_S_OK);
    ck_assert_hr(psdb_key_load(k, &key), PSDB_S_OK);
    ck_assert_int_eq(run_status("%s key add --data-dir %s --name fam --public-key %s.pub "
                                "--families 'fabrikam-*'",
                                PSDBD_BIN, g_data, k),
                     0);
    srv_start(&g_srv, NULL);
    char *psdb = make_psdb(&base_spec); /* contoso-gfx9 */
    pub_opts o = {.key = key, .kid = kid, .serial = 1};
    publish(&r, psdb, &o);
    ck_assert_msg(r.status == 403, "%ld %s", r.status, r.body.data);
    ck_assert_str_eq(jstr(r.json, "error", NULL), "key_scope");
    resp_free(&r);
    spec sp = base_spec;
    sp.family = "fabrikam-x";
    char *ok = make_psdb(&sp);
    publish(&r, ok, &o);
    ck_assert_int_eq(r.status, 201);
    ck_assert_int_eq(jint(r.json, "statement_version", NULL), 1);
    ck_assert(json_is_null(json_object_get(r.json, "sodb_sha256")));
    resp_free(&r);
    psdb_key_release(key);
    free(k);
    free(psdb);
    free(ok);
}
END_TEST

struct claimer {
    const char *token, *worker;
    long long ids[64];
    int n;
};

/* Claims until 204, without Check's asserts (another thread's failure would be lost). */
static void *claim_loop(void *arg)
{
    struct claimer *cl = arg;
    char body[256], auth[256];
    claim_body(body, sizeof(body), cl->worker, 7, 600);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", cl->token);
    for (;;) {
        CURL *c = curl_easy_init();
        struct curl_slist *h = curl_slist_append(NULL, auth);
        struct buf b = {0};
        char url[512];
        long status = 0;
        snprintf(url, sizeof(url), "%s/v1/jobs/claim", g_srv.base);
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
        CURLcode cc = curl_easy_perform(c);
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        curl_slist_free_all(h);
        curl_easy_cleanup(c);
        json_t *j = b.data ? json_loads(b.data, 0, NULL) : NULL;
        free(b.data);
        if (cc != CURLE_OK || status != 200 || cl->n == 64) {
            json_decref(j);
            if (cc != CURLE_OK || (status != 204 && status != 200))
                cl->n = -1;
            break;
        }
        cl->ids[cl->n++] = jint(j, "job", "id");
        json_decref(j);
    }
    return NULL;
}

/* Eight workers claiming at once never get one job twice, and every job is handed out. */
START_TEST(test_server__farm_concurrent_claims_never_hand_a_job_out_twice)
{
    resp r;
    enum { JOBS = 24, THREADS = 8 };
    srv_start(&g_srv, NULL);
    char *compiler = token("compiler", "*", "--name farm");
    char *sodb = make_sodb("1.0.0.0", 1);
    publish_sodb(&r, sodb, g_key, g_kid, 1, g_pub);
    ck_assert_int_eq(r.status, 201);
    resp_free(&r);
    for (int i = 0; i < JOBS; i++) {
        char body[256];
        snprintf(body, sizeof(body),
                 "{\"app\":\"Game\",\"app_version\":\"1.0.0.0\",\"family\":\"contoso-gfx9\","
                 "\"abi_version\":%d,\"abi_max\":%d}",
                 7 - i % 8, 7 + i);
        post_json(&r, "/v1/jobs", g_pub, body);
        ck_assert_int_eq(r.status, 201);
        resp_free(&r);
    }
    struct claimer cl[THREADS];
    pthread_t th[THREADS];
    char names[THREADS][16];
    for (int i = 0; i < THREADS; i++) {
        snprintf(names[i], sizeof(names[i]), "w%d", i);
        cl[i] = (struct claimer){.token = compiler, .worker = names[i]};
        ck_assert_int_eq(pthread_create(&th[i], NULL, claim_loop, &cl[i]), 0);
    }
    int seen[JOBS + 1] = {0}, total = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_ge(cl[i].n, 0);
        for (int k = 0; k < cl[i].n; k++) {
            long long id = cl[i].ids[k];
            ck_assert(id >= 1 && id <= JOBS);
            ck_assert_msg(seen[id] == 0, "job %lld handed out twice", id);
            seen[id] = 1;
            total++;
        }
    }
    ck_assert_int_eq(total, JOBS);
    free(compiler);
    free(sodb);
}
END_TEST

/* `psdbd job add` on g_data with `args`, its stdout and stderr in out_file; the exit status. */
static int job_add_to(const char *out_file, const char *args)
{
    char *cmd = NULL;
    ck_assert_int_ge(asprintf(&cmd, "%s job add --data-dir %s %s", PSDBD_BIN, g_data, args), 0);
    int rc = tu_run(cmd, out_file);
    free(cmd);
    return rc;
}

/* `psdbd job add` queues the job of a published SODB as POST /v1/jobs does: its id (or --json
 * the JOB), the same job again for the same cell; refused in one line without a published SODB,
 * and on bad arguments. */
START_TEST(test_server__farm_job_add_admin_command)
{
    resp r;
    char *err = tu_path(g_dir, "job-add.err");
    const char *cell = "--app Game --app-version 1.0.0.0 --family fabrikam --abi 3 --abi-max 5";
    ck_assert_int_eq(job_add_to(err, cell), 1);
    char *msg = tu_read_file(err, NULL);
    ck_assert_str_eq(msg, "psdbd job add: Game 1.0.0.0 has no published SODB (publish one: POST "
                          "/v1/sodbs)\n");
    free(msg);
    srv_start(&g_srv, NULL);
    char *sodb = make_sodb("1.0.0.0", 1);
    publish_sodb(&r, sodb, g_key, g_kid, 1, g_pub);
    ck_assert_int_eq(r.status, 201);
    char sodb_sha[65];
    snprintf(sodb_sha, sizeof(sodb_sha), "%s", jstr(r.json, "sha256", NULL));
    resp_free(&r);
    char *line = run_line("%s job add --data-dir %s %s --json", PSDBD_BIN, g_data, cell);
    json_t *job = json_loads(line, 0, NULL);
    ck_assert_msg(job != NULL, "not JSON: %s", line);
    ck_assert(json_is_true(json_object_get(job, "created")));
    ck_assert_str_eq(jstr(job, "state", NULL), "queued");
    ck_assert_str_eq(jstr(job, "sodb_sha256", NULL), sodb_sha);
    ck_assert_int_eq(jint(job, "target", "abi_min"), 3);
    ck_assert_int_eq(jint(job, "target", "abi_max"), 5);
    ck_assert_int_eq(jint(job, "demand", NULL), 0);
    long long id = jint(job, "id", NULL);
    json_decref(job);
    free(line);
    line = run_line("%s job add --data-dir %s %s 2>/dev/null", PSDBD_BIN, g_data, cell);
    ck_assert_int_eq(atoll(line), id); /* the same cell: the same job */
    free(line);
    http(&r, "GET", "/v1/jobs", g_reader, NULL, NULL, NULL, 0);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "jobs")), 1);
    ck_assert_str_eq(jstr(json_array_get(json_object_get(r.json, "jobs"), 0), "target", "family"),
                     "fabrikam");
    resp_free(&r);
    /* Another version has no SODB; bad arguments are refused before the index is opened. */
    ck_assert_int_eq(run_status("%s job add --data-dir %s --app Game --app-version 2 --family f "
                                "--abi 1 2>/dev/null",
                                PSDBD_BIN, g_data),
                     1);
    const char *bad[] = {"--app Game --app-version 1.0.0.0 --family f --abi 5 --abi-max 4",
                         "--app Game --app-version x --family f --abi 5",
                         "--app Game --app-version 1.0.0.0 --family f --abi -1",
                         "--app Game --app-version 1.0.0.0 --abi 1",
                         "--app '' --app-version 1 --family f --abi 1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_int_eq(job_add_to(err, bad[i]), 1);
        msg = tu_read_file(err, NULL);
        ck_assert_msg(strncmp(msg, "psdbd job add: ", 15) == 0 && strchr(msg, '\n') &&
                          strchr(msg, '\n')[1] == '\0',
                      "%s: %s", bad[i], msg);
        free(msg);
    }
    ck_assert_int_eq(run_status("%s job add --help >/dev/null", PSDBD_BIN), 0);
    http(&r, "GET", "/v1/jobs", g_reader, NULL, NULL, NULL, 0);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "jobs")), 1);
    resp_free(&r);
    free(sodb);
    free(err);
}
END_TEST

/* Anonymous misses cannot open jobs without bound: a flood of distinct ABI ranges opens at most
 * job-max-queued-per-family jobs per SODB and family (the rest add to the nearest job), a flood
 * of family names at most job-max-queued-per-sodb; every capped miss is counted. */
START_TEST(test_server__farm_resolve_miss_flood_opens_bounded_jobs)
{
    resp r;
    char path[256];
    const char *extra[] = {"--job-max-queued-per-sodb", "12", NULL};
    srv_start(&g_srv, extra);
    char *sodb = make_sodb("1.0.0.0", 1);
    publish_sodb(&r, sodb, g_key, g_kid, 1, g_pub);
    ck_assert_int_eq(r.status, 201);
    resp_free(&r);
    for (int i = 0; i < 30; i++) { /* the default bound per family: 8 */
        snprintf(path, sizeof(path),
                 "/v1/resolve?app=Game&app_version=1.0.0.0&family=contoso-gfx9&abi_min=%d&"
                 "abi_max=%d",
                 100 + 10 * i, 105 + 10 * i);
        http(&r, "GET", path, NULL, NULL, NULL, NULL, 0);
        ck_assert_int_eq(r.status, 404);
        resp_free(&r);
    }
    for (int i = 0; i < 20; i++) {
        snprintf(path, sizeof(path),
                 "/v1/resolve?app=Game&app_version=1.0.0.0&family=flood-%d&abi_min=1&abi_max=1", i);
        http(&r, "GET", path, NULL, NULL, NULL, NULL, 0);
        ck_assert_int_eq(r.status, 404);
        resp_free(&r);
    }
    http(&r, "GET", "/v1/jobs", g_reader, NULL, NULL, NULL, 0);
    json_t *jobs = json_object_get(r.json, "jobs");
    ck_assert_int_eq(json_array_size(jobs), 12);
    long long contoso = 0, demand = 0;
    for (size_t i = 0; i < json_array_size(jobs); i++) {
        json_t *j = json_array_get(jobs, i);
        if (strcmp(jstr(j, "target", "family"), "contoso-gfx9") == 0) {
            contoso++;
            demand += jint(j, "demand", NULL);
            /* The 22 misses past the bound (180..395) went to the nearest job, 170..175. */
            ck_assert_int_eq(jint(j, "demand", NULL), jint(j, "target", "abi_min") == 170 ? 23 : 1);
        }
    }
    ck_assert_int_eq(contoso, 8);
    ck_assert_int_eq(demand, 30); /* no miss of an open family is lost */
    resp_free(&r);
    http(&r, "GET", "/metrics", g_reader, NULL, NULL, NULL, 0);
    ck_assert_ptr_nonnull(strstr(r.body.data, "psdb_job_demand_capped_total 38\n"));
    resp_free(&r);
    /* Requests and job add are not capped: they are authenticated. */
    post_json(&r, "/v1/jobs", g_pub,
              "{\"app\":\"Game\",\"app_version\":\"1.0.0.0\",\"family\":\"contoso-gfx9\","
              "\"abi_version\":9000}");
    ck_assert_int_eq(r.status, 201);
    resp_free(&r);
    free(sodb);
}
END_TEST

/* DELETE /v1/sodbs/<id> retires an SODB (a publisher whose scope covers it, or an admin): it is
 * no longer listed, its queued jobs are held saying why, misses and requests make jobs of the
 * newest SODB still published, and none once every SODB of the version is retired. */
START_TEST(test_server__farm_sodb_retire)
{
    resp r;
    char path[64];
    srv_start(&g_srv, NULL);
    char *compiler = token("compiler", "*", "--name farm");
    char *other = token("publisher", "Other*", "--name other-pub");
    char *s1 = make_sodb("1.0.0.0", 1), *s2 = make_sodb("1.0.0.0", 2);
    long long id1, id2;
    publish_sodb(&r, s1, g_key, g_kid, 1, g_pub);
    ck_assert_int_eq(r.status, 201);
    id1 = jint(r.json, "id", NULL);
    resp_free(&r);
    publish_sodb(&r, s2, g_key, g_kid, 2, g_pub);
    ck_assert_int_eq(r.status, 201);
    id2 = jint(r.json, "id", NULL);
    resp_free(&r);
    const char *miss =
        "/v1/resolve?app=Game&app_version=1.0.0.0&family=contoso-gfx9&abi_min=7&abi_max=7";
    http(&r, "GET", miss, NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 404);
    resp_free(&r);
    /* Who may retire: not a reader, a compiler or a publisher of other applications. */
    snprintf(path, sizeof(path), "/v1/sodbs/%lld", id2);
    const char *refused[] = {g_reader, compiler, other};
    for (int i = 0; i < 3; i++) {
        http(&r, "DELETE", path, refused[i], NULL, NULL, NULL, 0);
        ck_assert_msg(r.status == 403, "%d: %ld %s", i, r.status, r.body.data);
        resp_free(&r);
    }
    http(&r, "DELETE", "/v1/sodbs/999", g_pub, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 404);
    resp_free(&r);
    http(&r, "DELETE", "/v1/sodbs/x1", g_pub, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 400);
    resp_free(&r);
    for (int i = 0; i < 2; i++) { /* again: the same answer, nothing changed */
        http(&r, "DELETE", path, g_pub, NULL, NULL, NULL, 0);
        ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body.data);
        ck_assert(json_is_true(json_object_get(r.json, "retired")));
        resp_free(&r);
    }
    http(&r, "GET", path, g_reader, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert(json_is_true(json_object_get(r.json, "retired")));
    resp_free(&r);
    http(&r, "GET", "/v1/sodbs?app=Game", g_reader, NULL, NULL, NULL, 0);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "sodbs")), 1);
    ck_assert_int_eq(jint(json_array_get(json_object_get(r.json, "sodbs"), 0), "id", NULL), id1);
    resp_free(&r);
    /* The miss's job (of SODB 2) is held; a new miss makes the job of SODB 1. */
    http(&r, "GET", "/v1/jobs", g_reader, NULL, NULL, NULL, 0);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "jobs")), 1);
    json_t *job = json_array_get(json_object_get(r.json, "jobs"), 0);
    ck_assert_str_eq(jstr(job, "state", NULL), "held");
    ck_assert_str_eq(jstr(job, "last_error", NULL), "its SODB was retired");
    resp_free(&r);
    http(&r, "GET", miss, NULL, NULL, NULL, NULL, 0);
    resp_free(&r);
    http(&r, "GET", "/v1/jobs?state=queued", g_reader, NULL, NULL, NULL, 0);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "jobs")), 1);
    ck_assert_int_eq(jint(json_array_get(json_object_get(r.json, "jobs"), 0), "sodb_id", NULL),
                     id1);
    resp_free(&r);
    /* Every SODB of the version retired: no job from a miss, a request or job add; no claim. */
    snprintf(path, sizeof(path), "/v1/sodbs/%lld", id1);
    http(&r, "DELETE", path, g_admin, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    http(&r, "GET",
         "/v1/resolve?app=Game&app_version=1.0.0.0&family=contoso-gfx9&abi_min=1&"
         "abi_max=1",
         NULL, NULL, NULL, NULL, 0);
    resp_free(&r);
    post_json(&r, "/v1/jobs", g_pub,
              "{\"app\":\"Game\",\"app_version\":\"1.0.0.0\",\"family\":\"f\",\"abi_version\":1}");
    ck_assert_int_eq(r.status, 404);
    resp_free(&r);
    ck_assert_int_eq(job_add_to("/dev/null", "--app Game --app-version 1.0.0.0 --family f --abi 1"),
                     1);
    post_json(&r, "/v1/jobs/claim", compiler,
              "{\"worker\":\"w\",\"target\":{\"family\":\"contoso-gfx9\",\"abi_version\":7}}");
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
    http(&r, "GET", "/v1/jobs", g_reader, NULL, NULL, NULL, 0);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "jobs")), 2);
    resp_free(&r);
    http(&r, "GET", "/v1/sodbs?app=Game", g_reader, NULL, NULL, NULL, 0);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "sodbs")), 0);
    resp_free(&r);
    free(compiler);
    free(other);
    free(s1);
    free(s2);
}
END_TEST

/* Lines of s (each ends with a newline). */
static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* `psdbd sodb list` and `psdbd sodb retire ID` on the data directory of a running psdbd: the
 * list (text and --json, --app, --retired); a retire has the effects of DELETE /v1/sodbs/ID (not
 * listed by the server, its queued jobs held, a miss makes the job of the SODB still
 * published); refused in one line: an unknown ID, one retired already, a bad ID, no ID. */
START_TEST(test_server__farm_sodb_admin_commands)
{
    resp r;
    char *out = NULL;
    srv_start(&g_srv, NULL);
    char *s1 = make_sodb("1.0.0.0", 1), *s2 = make_sodb("1.0.0.0", 2);
    long long id1, id2;
    publish_sodb(&r, s1, g_key, g_kid, 1, g_pub);
    ck_assert_int_eq(r.status, 201);
    id1 = jint(r.json, "id", NULL);
    resp_free(&r);
    publish_sodb(&r, s2, g_key, g_kid, 2, g_pub);
    ck_assert_int_eq(r.status, 201);
    id2 = jint(r.json, "id", NULL);
    resp_free(&r);
    const char *miss =
        "/v1/resolve?app=Game&app_version=1.0.0.0&family=contoso-gfx9&abi_min=7&abi_max=7";
    http(&r, "GET", miss, NULL, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 404);
    resp_free(&r);
    http(&r, "GET", "/v1/jobs", g_reader, NULL, NULL, NULL, 0); /* the miss written */
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "jobs")), 1);
    resp_free(&r);

    /* list: newest serial first, one line each; --json the manifests; --app of no SODB: none. */
    ck_assert_int_eq(run_capture(&out, "%s sodb list --data-dir %s", PSDBD_BIN, g_data), 0);
    char want[128];
    snprintf(want, sizeof(want), "%-6lld Game", id2);
    ck_assert_msg(strncmp(out, want, strlen(want)) == 0, "%s", out);
    ck_assert_int_eq(count_lines(out), 2);
    free(out);
    ck_assert_int_eq(
        run_capture(&out, "%s sodb list --data-dir %s --app Game --app-version 1.0.0.0 --json",
                    PSDBD_BIN, g_data),
        0);
    json_t *list = json_loads(out, 0, NULL);
    ck_assert_msg(list != NULL, "not JSON: %s", out);
    ck_assert_int_eq(json_array_size(json_object_get(list, "sodbs")), 2);
    ck_assert_int_eq(jint(json_array_get(json_object_get(list, "sodbs"), 0), "id", NULL), id2);
    ck_assert_str_eq(jstr(json_array_get(json_object_get(list, "sodbs"), 0), "kind", NULL), "sodb");
    json_decref(list);
    free(out);
    ck_assert_int_eq(run_capture(&out, "%s sodb list --data-dir %s --app Other", PSDBD_BIN, g_data),
                     0);
    ck_assert_str_eq(out, "");
    free(out);

    /* retire: what it retired and the job it held; the server stops listing it at once. */
    ck_assert_int_eq(run_capture(&out, "%s sodb retire --data-dir %s %lld", PSDBD_BIN, g_data, id2),
                     0);
    snprintf(want, sizeof(want), "retired SODB %lld (Game 1.0.0.0, serial 2); 1 queued job held\n",
             id2);
    ck_assert_str_eq(out, want);
    free(out);
    http(&r, "GET", "/v1/sodbs?app=Game", g_reader, NULL, NULL, NULL, 0);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "sodbs")), 1);
    ck_assert_int_eq(jint(json_array_get(json_object_get(r.json, "sodbs"), 0), "id", NULL), id1);
    resp_free(&r);
    http(&r, "GET", "/v1/jobs", g_reader, NULL, NULL, NULL, 0);
    json_t *job = json_array_get(json_object_get(r.json, "jobs"), 0);
    ck_assert_str_eq(jstr(job, "state", NULL), "held");
    ck_assert_str_eq(jstr(job, "last_error", NULL), "its SODB was retired");
    resp_free(&r);
    http(&r, "GET", miss, NULL, NULL, NULL, NULL, 0);
    resp_free(&r);
    http(&r, "GET", "/v1/jobs?state=queued", g_reader, NULL, NULL, NULL, 0);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "jobs")), 1);
    ck_assert_int_eq(jint(json_array_get(json_object_get(r.json, "jobs"), 0), "sodb_id", NULL),
                     id1);
    resp_free(&r);
    /* Listed again only with --retired, marked. */
    ck_assert_int_eq(run_capture(&out, "%s sodb list --data-dir %s", PSDBD_BIN, g_data), 0);
    ck_assert_int_eq(count_lines(out), 1);
    free(out);
    ck_assert_int_eq(run_capture(&out, "%s sodb list --data-dir %s --retired", PSDBD_BIN, g_data),
                     0);
    ck_assert_int_eq(count_lines(out), 2);
    ck_assert_ptr_nonnull(strstr(out, " retired "));
    free(out);
    /* --json: the manifest and the jobs it held. */
    ck_assert_int_eq(
        run_capture(&out, "%s sodb retire --data-dir %s --json %lld", PSDBD_BIN, g_data, id1), 0);
    json_t *m = json_loads(out, 0, NULL);
    ck_assert_msg(m != NULL, "not JSON: %s", out);
    ck_assert(json_is_true(json_object_get(m, "retired")));
    ck_assert_int_eq(jint(m, "jobs_held", NULL), 1);
    json_decref(m);
    free(out);

    /* Refusals, one line each, exit 1. */
    char again[32], again_msg[128];
    snprintf(again, sizeof(again), "%lld", id2);
    snprintf(again_msg, sizeof(again_msg),
             "psdbd sodb retire: SODB %lld (Game 1.0.0.0, serial 2) was retired already, at ", id2);
    struct {
        const char *args, *msg;
    } bad[] = {
        {again, again_msg},
        {"999", "psdbd sodb retire: no SODB with ID 999 (psdbd sodb list --retired shows them)\n"},
        {"x1", "psdbd sodb retire: bad SODB ID 'x1' (a positive decimal number; psdbd sodb list "
               "shows them)\n"},
        {"0", "psdbd sodb retire: bad SODB ID '0' "},
        {"99999999999999999999", "psdbd sodb retire: bad SODB ID '99999999999999999999' "},
        {"", "psdbd sodb retire: the SODB's ID is required (psdbd sodb list shows them)\n"},
        {"1 2", "psdbd sodb retire: unexpected argument '2'\n"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_int_eq(
            run_capture(&out, "%s sodb retire --data-dir %s %s", PSDBD_BIN, g_data, bad[i].args),
            1);
        ck_assert_msg(strncmp(out, bad[i].msg, strlen(bad[i].msg)) == 0 && count_lines(out) == 1,
                      "%s: %s", bad[i].args, out);
        free(out);
    }
    ck_assert_int_eq(
        run_capture(&out, "%s sodb list --data-dir %s --app-version 1", PSDBD_BIN, g_data), 1);
    ck_assert_str_eq(out, "psdbd sodb list: --app-version needs --app\n");
    free(out);
    ck_assert_int_eq(run_status("%s sodb --help >/dev/null", PSDBD_BIN), 0);
    ck_assert_int_eq(run_status("%s sodb retire --help >/dev/null", PSDBD_BIN), 0);
    ck_assert_int_eq(run_status("%s sodb drop 1 2>/dev/null", PSDBD_BIN), 1);
    free(s1);
    free(s2);
}
END_TEST

/* `psdbd job requeue ID`: a held job (failed job-max-attempts times) is queued again with its
 * attempts and error cleared, and a worker claims it; refused in one line: a job not held, an
 * unknown or bad ID, a job held because its SODB was retired. */
START_TEST(test_server__farm_job_requeue_admin_command)
{
    resp r;
    char *out = NULL, path[64], body[256], want[160];
    const char *extra[] = {"--job-max-attempts", "1", NULL};
    srv_start(&g_srv, extra);
    char *compiler = token("compiler", "*", "--name farm");
    char *sodb = make_sodb("1.0.0.0", 1);
    publish_sodb(&r, sodb, g_key, g_kid, 1, g_pub);
    ck_assert_int_eq(r.status, 201);
    long long sodb_id = jint(r.json, "id", NULL);
    resp_free(&r);
    post_json(&r, "/v1/jobs", g_pub,
              "{\"app\":\"Game\",\"app_version\":\"1.0.0.0\",\"family\":\"fabrikam\","
              "\"abi_version\":2}");
    ck_assert_int_eq(r.status, 201);
    long long id = jint(r.json, "id", NULL);
    resp_free(&r);
    const char *claim = "{\"worker\":\"c\",\"target\":{\"family\":\"fabrikam\",\"abi_version\":2}}";
    snprintf(path, sizeof(path), "/v1/jobs/%lld/fail", id);
    post_json(&r, "/v1/jobs/claim", compiler, claim);
    ck_assert_int_eq(r.status, 200);
    snprintf(body, sizeof(body), "{\"lease\":\"%s\",\"error\":\"driver crashed\"}",
             jstr(r.json, "lease", NULL));
    resp_free(&r);
    /* Not held yet: leased. */
    ck_assert_int_eq(run_capture(&out, "%s job requeue --data-dir %s %lld", PSDBD_BIN, g_data, id),
                     1);
    snprintf(want, sizeof(want),
             "psdbd job requeue: job %lld is leased, not held; only a held job is requeued\n", id);
    ck_assert_str_eq(out, want);
    free(out);
    post_json(&r, path, compiler, body);
    ck_assert_str_eq(jstr(r.json, "state", NULL), "held");
    resp_free(&r);
    post_json(&r, "/v1/jobs/claim", compiler, claim);
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);

    ck_assert_int_eq(run_capture(&out, "%s job requeue --data-dir %s %lld", PSDBD_BIN, g_data, id),
                     0);
    snprintf(want, sizeof(want), "requeued job %lld (Game 1.0.0.0, fabrikam:2-2)\n", id);
    ck_assert_str_eq(out, want);
    free(out);
    http(&r, "GET", "/v1/jobs", g_reader, NULL, NULL, NULL, 0);
    json_t *job = json_array_get(json_object_get(r.json, "jobs"), 0);
    ck_assert_str_eq(jstr(job, "state", NULL), "queued");
    ck_assert_int_eq(jint(job, "attempts", NULL), 0);
    ck_assert(json_is_null(json_object_get(job, "last_error")));
    resp_free(&r);
    post_json(&r, "/v1/jobs/claim", compiler, claim); /* a worker takes it again */
    ck_assert_int_eq(r.status, 200);
    ck_assert_int_eq(jint(r.json, "job", "id"), id);
    snprintf(body, sizeof(body), "{\"lease\":\"%s\",\"error\":\"again\"}",
             jstr(r.json, "lease", NULL));
    resp_free(&r);
    post_json(&r, path, compiler, body); /* held again after job-max-attempts (1) more */
    ck_assert_str_eq(jstr(r.json, "state", NULL), "held");
    resp_free(&r);
    /* --json: the JOB. */
    ck_assert_int_eq(
        run_capture(&out, "%s job requeue --data-dir %s --json %lld", PSDBD_BIN, g_data, id), 0);
    job = json_loads(out, 0, NULL);
    ck_assert_msg(job != NULL, "not JSON: %s", out);
    ck_assert_str_eq(jstr(job, "state", NULL), "queued");
    json_decref(job);
    free(out);

    /* Its SODB retired: held for that, and not requeued. */
    snprintf(path, sizeof(path), "/v1/sodbs/%lld", sodb_id);
    http(&r, "DELETE", path, g_pub, NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    ck_assert_int_eq(run_capture(&out, "%s job requeue --data-dir %s %lld", PSDBD_BIN, g_data, id),
                     1);
    snprintf(want, sizeof(want), "psdbd job requeue: job %lld is held because its SODB is retired",
             id);
    ck_assert_msg(strncmp(out, want, strlen(want)) == 0 && count_lines(out) == 1, "%s", out);
    free(out);
    const char *bad[] = {"999", "x", "0", "", "1 2"};
    const char *msg[] = {"psdbd job requeue: no job with ID 999 (psdb jobs lists them)\n",
                         "psdbd job requeue: bad job ID 'x' (a positive decimal number)\n",
                         "psdbd job requeue: bad job ID '0' (a positive decimal number)\n",
                         /* one line, split to fit */
                         ("psdbd job requeue: the job's ID is required (psdb jobs --state held "
                          "lists the held ones)\n"),
                         "psdbd job requeue: unexpected argument '2'\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_int_eq(
            run_capture(&out, "%s job requeue --data-dir %s %s", PSDBD_BIN, g_data, bad[i]), 1);
        ck_assert_str_eq(out, msg[i]);
        free(out);
    }
    free(compiler);
    free(sodb);
}
END_TEST

int main(void)
{
    const char *engine = getenv("PSDB_TEST_INDEX");
    g_pg = engine && strcmp(engine, "postgresql") == 0;
    if (g_pg && !getenv("PSDB_TEST_PG_URL")) {
        fprintf(stderr, "server_api_test on postgresql: skipped: PSDB_TEST_PG_URL is not set "
                        "(start a cluster with: eval \"$(tests/pg/cluster start)\")\n");
        return 77;
    }
    if (!g_pg)
        unsetenv("PSDBD_INDEX"); /* the SQLite run is the SQLite run whatever the shell has */
    Suite *s = suite_create("server");
    TCase *tc = tcase_create("api");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_server__publish_resolve_download);
    tcase_add_test(tc, test_server__A3_resolve_order);
    tcase_add_test(tc, test_server__tokens_and_scopes);
    tcase_add_test(tc, test_server__metrics_name_applications_only_to_readers);
    tcase_add_test(tc, test_server__signatures);
    tcase_add_test(tc, test_server__invalid_bodies_and_conflicts);
    tcase_add_test(tc, test_server__publish_refuses_what_verify_refuses);
    tcase_add_test(tc, test_server__upload_limit_and_broken_uploads);
    tcase_add_test(tc, test_server__hostile_urls_and_headers);
    tcase_add_test(tc, test_server__disk_full_is_507);
    tcase_add_test(tc, test_server__sigterm_finishes_inflight_request);
    tcase_add_test(tc, test_server__kill9_during_publishes);
    tcase_add_test(tc, test_server__check_gc_and_schema_version);
    tcase_add_test(tc, test_server__gc_refuses_an_index_that_does_not_match_the_store);
    tcase_add_test(tc, test_server__tool_keygen_and_publish);
    tcase_add_test(tc, test_server__native_tls_from_config_file);
    tcase_add_test(tc, test_server__client_publish_uses_the_clients_ca_file_and_pin);
    tcase_add_test(tc, test_server__blob_over_4gib);
    suite_add_tcase(s, tc);
    {
        TCase *farm = tcase_create("farm");
        tcase_add_checked_fixture(farm, setup, teardown);
        tcase_set_timeout(farm, 120);
        tcase_add_test(farm, test_server__farm_sodb_publish_and_list);
        tcase_add_test(farm, test_server__farm_jobs_lease_lifecycle_and_trust);
        tcase_add_test(farm, test_server__farm_key_family_scope);
        tcase_add_test(farm, test_server__farm_concurrent_claims_never_hand_a_job_out_twice);
        tcase_add_test(farm, test_server__farm_job_add_admin_command);
        tcase_add_test(farm, test_server__farm_resolve_miss_flood_opens_bounded_jobs);
        tcase_add_test(farm, test_server__farm_sodb_retire);
        tcase_add_test(farm, test_server__farm_sodb_admin_commands);
        tcase_add_test(farm, test_server__farm_job_requeue_admin_command);
        suite_add_tcase(s, farm);
    }
    /* Own cases so that each can be run alone (CK_RUN_CASE=index|scopes|identity|farm). */
    const char *cases[] = {"index", "scopes", "identity"};
    for (int i = 0; i < 3; i++) {
        TCase *t = tcase_create(cases[i]);
        tcase_add_checked_fixture(t, setup, teardown);
        tcase_set_timeout(t, 120);
        if (i == 0 && g_pg) {
            /* The SQLite file's own failures have these PostgreSQL counterparts. */
            tcase_add_test(t, test_server__pg_database_lost_is_503_and_recovers_without_restart);
            tcase_add_test(t, test_server__pg_two_replicas_same_identity_one_201_one_409);
            tcase_add_test(
                t, test_server__pg_publish_and_retire_on_one_replica_reach_anothers_resolve_cache);
            tcase_add_test(t, test_server__pg_start_refuses_blobs_beside_an_empty_database);
        } else if (i == 0) {
            tcase_add_test(t, test_server__index_removed_under_running_server_is_503);
            tcase_add_test(t, test_server__start_refuses_blobs_without_index);
            tcase_add_test(t, test_server__gc_keeps_blobs_while_index_looks_lost);
        } else if (i == 1) {
            tcase_add_test(t, test_server__scopes_on_every_route);
        } else {
            tcase_add_test(t, test_server__identity_control_characters_refused);
            tcase_add_test(t, test_server__names_that_spoof_refused_by_every_route_and_the_tool);
        }
        suite_add_tcase(s, t);
    }
    /* Slow clients, framing and validators: CK_RUN_CASE=hardening runs these alone. */
    tc = tcase_create("hardening");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_server__slowloris_connections_closed_at_request_deadline);
    tcase_add_test(tc, test_server__trickled_body_closed_at_request_deadline);
    tcase_add_test(tc, test_server__per_address_connection_limit);
    tcase_add_test(tc, test_server__connections_over_global_limit_wait_for_deadline);
    tcase_add_test(tc, test_server__headers_over_connection_memory_are_431_and_publishes_get_more);
    tcase_add_test(tc, test_server__encoded_nul_in_path_or_query_is_400);
    tcase_add_test(tc, test_server__error_quoting_bytes_that_are_not_utf8_is_answered);
    tcase_add_test(tc, test_server__repeated_or_conflicting_content_length_is_400);
    tcase_add_test(tc, test_server__blob_validators_if_match_and_dates);
    tcase_add_test(tc, test_server__malformed_publish_headers_refused_before_body);
    tcase_add_test(tc, test_server__early_publish_answers_wait_for_the_body);
    tcase_add_test(tc, test_server__aborted_download_logs_bytes_sent);
    tcase_add_test(tc, test_server__large_upload_hashed_while_it_arrives);
    suite_add_tcase(s, tc);
    /* Value maps: derived at publish, once, and collected by gc (CK_RUN_CASE=valuemap). */
    tc = tcase_create("valuemap");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_server__publish_derives_the_v2_valuemap_without_a_request);
    tcase_add_test(tc, test_server__concurrent_first_valuemap_requests_derive_it_once);
    tcase_add_test(tc, test_server__sigterm_while_deriving_a_valuemap_stops_cleanly);
    tcase_add_test(tc, test_server__valuemap_temporaries_of_a_killed_psdbd_removed_at_start);
    tcase_add_test(tc, test_server__start_derives_the_v2_valuemaps_old_blobs_lack);
    tcase_add_test(tc, test_server__gc_removes_valuemaps_of_removed_and_gone_blobs);
    tcase_add_test(tc, test_server__publish_over_a_damaged_blob_file_drops_its_stale_valuemaps);
    if (g_pg)
        tcase_add_test(tc,
                       test_server__pg_replica_that_did_not_take_the_publish_serves_the_valuemap);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
