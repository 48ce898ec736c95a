/* server_publish_trailer_test.c - the trailer form of a publish (POST /v1/psdbs with a chunked body
 * and the statement in its trailer): libmicrohttpd hands the trailer to the last callback, psdb
 * publish sends it, and psdbd refuses each broken trailer and leaves nothing behind. */
#include "testutil.h"

#include "delivery/publish.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#ifndef PSDBD_BIN
#define PSDBD_BIN "psdbd"
#endif

static const char TRAILER_DECL[] = "Trailer: X-Psdb-Sha256, X-Psdb-Size, X-Psdb-Signature\r\n";

/* ---- a raw HTTP client ----------------------------------------------------------------------- */

static int connect_port(int port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    struct timeval tv = {10, 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_ge(s, 0);
    ck_assert_int_eq(connect(s, (struct sockaddr *)&a, sizeof(a)), 0);
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return s;
}

/* Reads what the server answers until it closes or 10 s pass (requests carry Connection: close);
 * NUL-terminated in out. */
static void read_answer(int s, char *out, size_t out_size)
{
    tu_recv_all(s, out, out_size);
}

/* Sends `parts` (NULL-terminated) on one connection, `pause_ms` apart, then reads the answer.
 * A send the server refuses (it answered and closed early) ends the sending. */
static void send_parts(int port, const char *const *parts, const size_t *lens, int pause_ms,
                       char *out, size_t out_size)
{
    int s = connect_port(port);
    for (int i = 0; parts[i]; i++) {
        if (send(s, parts[i], lens[i], MSG_NOSIGNAL) != (ssize_t)lens[i])
            break;
        if (pause_ms)
            usleep((useconds_t)pause_ms * 1000);
    }
    read_answer(s, out, out_size);
    close(s);
}

/* A chunked message: `head` (the request line and headers, without the blank line), `body` in
 * chunks of `chunk` bytes, the last chunk and `trailer` (field lines, each ending in CRLF, or
 * ""). Malloc'd; *len its size. */
static char *chunked_message(const char *head, const void *body, size_t n, size_t chunk,
                             const char *trailer, size_t *len)
{
    size_t cap = strlen(head) + n + (n / chunk + 2) * 24 + strlen(trailer) + 16, pos = 0;
    char *m = malloc(cap);
    ck_assert_ptr_nonnull(m);
    pos += (size_t)snprintf(m + pos, cap - pos, "%s\r\n", head);
    for (size_t off = 0; off < n; off += chunk) {
        size_t k = n - off < chunk ? n - off : chunk;
        pos += (size_t)snprintf(m + pos, cap - pos, "%zx\r\n", k);
        memcpy(m + pos, (const char *)body + off, k);
        pos += k;
        memcpy(m + pos, "\r\n", 2);
        pos += 2;
    }
    pos += (size_t)snprintf(m + pos, cap - pos, "0\r\n%s\r\n", trailer);
    ck_assert_uint_lt(pos, cap);
    *len = pos;
    return m;
}

/* ---- libmicrohttpd: a chunked request's trailer reaches the last callback -------------------- */

struct probe {
    pthread_mutex_t lock;
    int calls;
    int footer_early; /* a trailer field was visible before the last call */
    int header_saw_footer;
    char last_footer[128]; /* the field's value in the last call, "" when absent */
    size_t body;
};

static enum MHD_Result probe_handler(void *cls, struct MHD_Connection *c, const char *url,
                                     const char *method, const char *version, const char *data,
                                     size_t *size, void **req_cls)
{
    struct probe *p = cls;
    const char *footer = MHD_lookup_connection_value(c, MHD_FOOTER_KIND, "X-Psdb-Signature");
    const char *header = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Psdb-Signature");
    (void)url;
    (void)method;
    (void)version;
    (void)data;
    pthread_mutex_lock(&p->lock);
    p->calls++;
    if (header)
        p->header_saw_footer = 1;
    if (!*req_cls || *size > 0) {
        if (footer)
            p->footer_early = 1;
        p->body += *size;
        *size = 0;
        *req_cls = p;
        pthread_mutex_unlock(&p->lock);
        return MHD_YES;
    }
    snprintf(p->last_footer, sizeof(p->last_footer), "%s", footer ? footer : "");
    pthread_mutex_unlock(&p->lock);
    struct MHD_Response *r = MHD_create_response_from_buffer(2, "ok", MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* The server side of the trailer form rests on this: libmicrohttpd (0.9.75 in Debian 12) parses
 * a chunked request's trailer, keeps it apart from the headers (MHD_FOOTER_KIND), and calls the
 * handler once more after it, with no data, before the request ends; with Expect: 100-continue
 * too, and whichever way the trailer is cut into packets. */
START_TEST(test_mhd__chunked_trailer_reaches_the_last_callback)
{
    struct probe p = {.lock = PTHREAD_MUTEX_INITIALIZER};
    struct MHD_Daemon *d =
        MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC, 0, NULL,
                         NULL, probe_handler, &p, MHD_OPTION_THREAD_POOL_SIZE, 2, MHD_OPTION_END);
    ck_assert_ptr_nonnull(d);
    int port = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT)->port;
    const char *head = "POST /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                       "Transfer-Encoding: chunked\r\nTrailer: X-Psdb-Signature\r\n";
    for (int variant = 0; variant < 3; variant++) {
        char first[512], out[1024];
        snprintf(first, sizeof(first), "%s%s\r\n5\r\nhello\r\n", head,
                 variant == 1 ? "Expect: 100-continue\r\n" : "");
        /* Cut inside the last chunk, the field name and the value. */
        const char *parts[] = {first,       "3\r\nabc\r\n0\r", "\nX-Psdb-Sig",
                               "nature: V", "1\r\n",           "X-Other: 2\r\n\r\n",
                               NULL};
        const char *whole[] = {first, "3\r\nabc\r\n0\r\nX-Psdb-Signature: V1\r\n\r\n", NULL};
        const char *const *send_list = variant == 2 ? whole : parts;
        size_t lens[8];
        for (int i = 0; send_list[i]; i++)
            lens[i] = strlen(send_list[i]);
        p.calls = 0;
        p.body = 0;
        p.last_footer[0] = '\0';
        send_parts(port, send_list, lens, variant == 2 ? 0 : 50, out, sizeof(out));
        ck_assert_msg(strstr(out, "200 OK") != NULL, "variant %d: %.80s", variant, out);
        if (variant == 1)
            ck_assert_msg(strncmp(out, "HTTP/1.1 100", 12) == 0, "100-continue: %.80s", out);
        pthread_mutex_lock(&p.lock);
        ck_assert_uint_eq(p.body, 8);
        ck_assert_str_eq(p.last_footer, "V1");
        ck_assert_int_eq(p.footer_early, 0);
        ck_assert_int_eq(p.header_saw_footer, 0);
        pthread_mutex_unlock(&p.lock);
    }
    MHD_stop_daemon(d);
}
END_TEST

/* ---- psdb_client_publish against a server that records what it gets ------------------------- */

struct capture {
    pthread_mutex_t lock;
    int drop_trailer; /* behave like a proxy that drops request trailers (nginx) */
    int requests, probes;
    char te[64], cl[32], trailer_decl[128], header_sig[128], expect[64];
    char sha[80], size[32], sig[128];
    EVP_MD_CTX *md;
    size_t body;
    uint8_t digest[32];
};

static void copy_value(char *dst, size_t n, const char *v)
{
    snprintf(dst, n, "%s", v ? v : "");
}

static enum MHD_Result capture_handler(void *cls, struct MHD_Connection *c, const char *url,
                                       const char *method, const char *version, const char *data,
                                       size_t *size, void **req_cls)
{
    struct capture *k = cls;
    (void)url;
    (void)method;
    (void)version;
    pthread_mutex_lock(&k->lock);
    if (!*req_cls) {
        *req_cls = k;
        k->requests++;
        copy_value(k->te, sizeof(k->te),
                   MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding"));
        copy_value(k->cl, sizeof(k->cl),
                   MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length"));
        copy_value(k->trailer_decl, sizeof(k->trailer_decl),
                   MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Trailer"));
        copy_value(k->header_sig, sizeof(k->header_sig),
                   MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Psdb-Signature"));
        copy_value(k->expect, sizeof(k->expect),
                   MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Expect"));
        k->md = EVP_MD_CTX_new();
        EVP_DigestInit_ex(k->md, EVP_sha256(), NULL);
        k->body = 0;
        pthread_mutex_unlock(&k->lock);
        return MHD_YES;
    }
    if (*size > 0) {
        EVP_DigestUpdate(k->md, data, *size);
        k->body += *size;
        *size = 0;
        pthread_mutex_unlock(&k->lock);
        return MHD_YES;
    }
    EVP_DigestFinal_ex(k->md, k->digest, NULL);
    EVP_MD_CTX_free(k->md);
    k->md = NULL;
    copy_value(k->sha, sizeof(k->sha),
               k->drop_trailer ? NULL
                               : MHD_lookup_connection_value(c, MHD_FOOTER_KIND, "X-Psdb-Sha256"));
    copy_value(k->size, sizeof(k->size),
               k->drop_trailer ? NULL
                               : MHD_lookup_connection_value(c, MHD_FOOTER_KIND, "X-Psdb-Size"));
    copy_value(k->sig, sizeof(k->sig),
               k->drop_trailer
                   ? NULL
                   : MHD_lookup_connection_value(c, MHD_FOOTER_KIND, "X-Psdb-Signature"));
    /* psdb publish's first request (one byte, a trailer) tells it whether trailers arrive: psdbd
     * answers invalid_psdb when they do (the byte is no PSDB), trailer_missing when not. */
    static const char created[] = "{\"id\": 1}",
                      not_psdb[] = "{\"error\":\"invalid_psdb\",\"message\":\"not a PSDB\"}",
                      missing[] = "{\"error\":\"trailer_missing\",\"message\":\"no trailer\"}";
    const char *answer = created;
    unsigned status = 201;
    if (k->body == 1) {
        k->probes++;
        answer = k->sig[0] ? not_psdb : missing;
        status = 400;
    }
    pthread_mutex_unlock(&k->lock);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(answer), (void *)answer, MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static char *g_dir, *g_data, *g_log;
static psdb_key *g_key, *g_key2;
static char g_kid[PSDB_KEY_ID_SIZE], *g_key_path;

/* A PSDB of about `payload` bytes of values; malloc'd path. */
static char *make_psdb(const char *app, size_t payload, unsigned seed)
{
    static int counter;
    char name[64];
    snprintf(name, sizeof(name), "p%d.psdb", counter++);
    char *path = tu_path(g_dir, name);
    psdb_app_identity id = {.desc = {.exe_filename = "game.exe",
                                     .name = app,
                                     .version = PSDB_VERSION(1, 0, 0, 0),
                                     .engine_name = "Engine",
                                     .engine_version = PSDB_VERSION(5, 0, 0, 0)},
                            .app_id = {0xa1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}};
    psdb_target t = {.family = "contoso-gfx9",
                     .abi_version = 7,
                     .compiler_version = PSDB_VERSION(1, 0, 0, 0),
                     .profile_version = PSDB_VERSION(1, 2, 0, 0)};
    psdb_writer *w = NULL;
    ck_assert_hr(psdb_writer_create(path, &id, &t, &w), PSDB_S_OK);
    uint8_t buf[4096];
    unsigned x = seed * 2654435761u + 1;
    for (size_t k = 0, left = payload; left > 0; k++) {
        size_t n = left < sizeof(buf) ? left : sizeof(buf);
        for (size_t i = 0; i < n; i++) {
            x = x * 1103515245u + 12345u;
            buf[i] = (uint8_t)(x >> 16);
        }
        char key[16];
        snprintf(key, sizeof(key), "k%06zu", k);
        ck_assert_hr(psdb_writer_put_value(w, key, strlen(key), PSDB_VALUE_OBJECT_CODE, buf, n),
                     PSDB_S_OK);
        left -= n;
    }
    ck_assert_hr(psdb_writer_finish(w), PSDB_S_OK);
    psdb_writer_release(w);
    return path;
}

/* The statement of the file at `path` with `serial`, signed by `key`; digest and size are the
 * file's unless `sha` is given (then that digest is signed). */
static void sign_file(const char *path, psdb_key *key, uint64_t serial, const uint8_t *sha,
                      char sig[PSDB_SIGNATURE_B64_SIZE], char hex[65], uint64_t *size)
{
    psdb_file *f = NULL;
    psdb_file_info info;
    psdb_statement st = {0};
    size_t n = 0;
    unsigned len = 32;
    char *data = tu_read_file(path, &n);
    ck_assert_ptr_nonnull(data);
    EVP_Digest(data, n, st.sha256, &len, EVP_sha256(), NULL);
    free(data);
    if (sha)
        memcpy(st.sha256, sha, 32);
    ck_assert_hr(psdb_file_open(path, NULL, &f), PSDB_S_OK);
    ck_assert_hr(psdb_file_get_info(f, &info), PSDB_S_OK);
    st.size = n;
    st.identity = info.identity;
    st.target = info.target;
    st.serial = serial;
    ck_assert_hr(psdb_statement_sign(key, &st, sig), PSDB_S_OK);
    psdb_file_release(f);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", st.sha256[i]);
    *size = n;
}

static void setup(void)
{
    g_dir = tu_mkdtemp();
    g_data = tu_path(g_dir, "data");
    g_log = tu_path(g_dir, "psdbd.log");
    g_key_path = tu_path(g_dir, "key");
    char *k2 = tu_path(g_dir, "key2"), kid2[PSDB_KEY_ID_SIZE];
    ck_assert_hr(psdb_keygen(g_key_path, g_kid), PSDB_S_OK);
    ck_assert_hr(psdb_keygen(k2, kid2), PSDB_S_OK);
    ck_assert_hr(psdb_key_load(g_key_path, &g_key), PSDB_S_OK);
    ck_assert_hr(psdb_key_load(k2, &g_key2), PSDB_S_OK);
    free(k2);
    unsetenv("PSDB_PUBLISH_STATEMENT");
    unsetenv("PSDBD_INDEX");
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void teardown(void)
{
    psdb_key_release(g_key);
    psdb_key_release(g_key2);
    g_key = g_key2 = NULL;
    if (getenv("PSDB_KEEP_TEST_DIR") == NULL)
        tu_rmtree(g_dir);
    free(g_dir);
    free(g_data);
    free(g_log);
    free(g_key_path);
    unsetenv("PSDB_PUBLISH_STATEMENT");
    curl_global_cleanup();
}

/* Publishes `path` through libpsdb to an in-process server that records the request. */
static void publish_to_capture(const char *path, struct capture *k, long *status)
{
    struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, 0,
                                            NULL, NULL, capture_handler, k, MHD_OPTION_END);
    ck_assert_ptr_nonnull(d);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d",
             MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT)->port);
    psdb_client_desc cd = {.server_url = url, .token = "t", .max_retries = 1};
    psdb_client *c = NULL;
    psdb_publish_result *res = NULL;
    psdb_publish_desc pd = {.key_path = g_key_path, .psdb_path = path, .serial = 3};
    ck_assert_hr(psdb_client_create(&cd, &c), PSDB_S_OK);
    ck_assert_hr(psdb_client_publish(c, &pd, &res), PSDB_S_OK);
    *status = res->http_status;
    psdb_publish_result_free(res);
    psdb_client_release(c);
    MHD_stop_daemon(d);
}

static void capture_reset(struct capture *k, int drop_trailer)
{
    memset(k, 0, sizeof(*k));
    pthread_mutex_init(&k->lock, NULL);
    k->drop_trailer = drop_trailer;
}

/* psdb_client_publish (and so psdb publish) asks first, with a publish of one byte whose trailer
 * describes it, whether trailers reach the server, and then sends the trailer form: a
 * chunked body with Expect: 100-continue, a Trailer header naming the three fields, and a trailer
 * whose digest and size are those of the bytes sent and whose signature verifies over their
 * statement. Where the trailer does not arrive (a proxy drops it) it sends today's header form;
 * PSDB_PUBLISH_STATEMENT=trailer or =header forces a form without asking; another value is
 * refused. */
START_TEST(test_publish_trailer__client_sends_statement_in_trailer_when_it_arrives)
{
    char *path = make_psdb("Game", 3u << 20, 1); /* several MiB: many chunks */
    char sig[PSDB_SIGNATURE_B64_SIZE], hex[65], size_text[32], got_hex[65];
    uint64_t size = 0;
    long status = 0;
    struct capture k;
    sign_file(path, g_key, 3, NULL, sig, hex, &size);
    snprintf(size_text, sizeof(size_text), "%llu", (unsigned long long)size);

    for (int forced = 0; forced < 2; forced++) {
        if (forced)
            setenv("PSDB_PUBLISH_STATEMENT", "trailer", 1);
        capture_reset(&k, 0);
        publish_to_capture(path, &k, &status);
        ck_assert_int_eq(status, 201);
        ck_assert_int_eq(k.requests, forced ? 1 : 2);
        ck_assert_int_eq(k.probes, forced ? 0 : 1);
        ck_assert_str_eq(k.te, "chunked");
        ck_assert_str_eq(k.cl, "");
        ck_assert_str_eq(k.expect, "100-continue");
        ck_assert_str_eq(k.trailer_decl, "X-Psdb-Sha256, X-Psdb-Size, X-Psdb-Signature");
        ck_assert_str_eq(k.header_sig, "");
        ck_assert_uint_eq(k.body, size);
        for (int i = 0; i < 32; i++)
            snprintf(got_hex + 2 * i, 3, "%02x", k.digest[i]);
        ck_assert_str_eq(k.sha, got_hex);
        ck_assert_str_eq(k.sha, hex);
        ck_assert_str_eq(k.size, size_text);
        ck_assert_str_eq(k.sig, sig); /* Ed25519 is deterministic: same statement, same bytes */
    }

    /* A server the trailer does not reach: the header form, after the one empty request. */
    unsetenv("PSDB_PUBLISH_STATEMENT");
    capture_reset(&k, 1);
    publish_to_capture(path, &k, &status);
    ck_assert_int_eq(status, 201);
    ck_assert_int_eq(k.requests, 2);
    ck_assert_int_eq(k.probes, 1);
    ck_assert_str_eq(k.te, "");
    ck_assert_str_eq(k.cl, size_text);
    ck_assert_str_eq(k.trailer_decl, "");
    ck_assert_str_eq(k.header_sig, sig);
    ck_assert_uint_eq(k.body, size);

    setenv("PSDB_PUBLISH_STATEMENT", "header", 1);
    capture_reset(&k, 0);
    publish_to_capture(path, &k, &status);
    ck_assert_int_eq(status, 201);
    ck_assert_int_eq(k.requests, 1);
    ck_assert_str_eq(k.te, "");
    ck_assert_str_eq(k.cl, size_text);
    ck_assert_str_eq(k.trailer_decl, "");
    ck_assert_str_eq(k.header_sig, sig);
    ck_assert_str_eq(k.sig, "");
    ck_assert_uint_eq(k.body, size);

    setenv("PSDB_PUBLISH_STATEMENT", "footer", 1);
    psdb_client_desc cd = {.server_url = "http://127.0.0.1:9", .token = "t"};
    psdb_client *c = NULL;
    psdb_publish_result *res = NULL;
    psdb_publish_desc pd = {.key_path = g_key_path, .psdb_path = path, .serial = 3};
    ck_assert_hr(psdb_client_create(&cd, &c), PSDB_S_OK);
    ck_assert_hr(psdb_client_publish(c, &pd, &res), PSDB_E_INVALIDARG);
    ck_assert_ptr_nonnull(strstr(res->message, "PSDB_PUBLISH_STATEMENT"));
    ck_assert_ptr_nonnull(strstr(res->message, "footer"));
    psdb_publish_result_free(res);
    psdb_client_release(c);
    free(path);
}
END_TEST

/* ---- psdbd ------------------------------------------------------------------------------------
 */

typedef struct srv {
    pid_t pid;
    int port;
    char base[64];
} srv;

static srv g_srv;
static char *g_pub, *g_reader;

static char *run_line(const char *cmd)
{
    char buf[1024] = {0};
    FILE *p = popen(cmd, "r");
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

static char *token(const char *role)
{
    char *cmd = NULL;
    ck_assert_int_ge(asprintf(&cmd, "%s token create --data-dir %s --role %s --name %s", PSDBD_BIN,
                              g_data, role, role),
                     0);
    char *t = run_line(cmd);
    free(cmd);
    ck_assert_ptr_nonnull(t);
    return t;
}

/* Starts psdbd on 127.0.0.1:0 with `extra` flags (NULL-terminated), a publisher and a reader
 * token, and the test's key registered. */
static void srv_start(const char *const *extra)
{
    int fds[2];
    char line[256], *cmd = NULL;
    size_t n = 0;
    g_pub = token("publisher");
    g_reader = token("reader");
    ck_assert_int_ge(asprintf(&cmd, "%s key add --data-dir %s --name main --public-key %s.pub",
                              PSDBD_BIN, g_data, g_key_path),
                     0);
    ck_assert_int_eq(tu_run(cmd, NULL), 0);
    free(cmd);
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        const char *argv[24] = {PSDBD_BIN,   "--listen", "127.0.0.1:0", "--data-dir", g_data,
                                "--threads", "2"};
        int argc = 7;
        for (int i = 0; extra && extra[i] && argc < 22; i++)
            argv[argc++] = extra[i];
        argv[argc] = NULL;
        dup2(fds[1], 1);
        int lf = open(g_log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (lf >= 0)
            dup2(lf, 2);
        close(fds[0]);
        execv(PSDBD_BIN, (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    while (n < sizeof(line) - 1 && read(fds[0], line + n, 1) == 1 && line[n] != '\n')
        n++;
    line[n] = '\0';
    close(fds[0]);
    char *colon = strrchr(line, ':');
    ck_assert_msg(colon && strstr(line, "listening on"), "psdbd did not start; see %s", g_log);
    g_srv.pid = pid;
    g_srv.port = (int)strtol(colon + 1, NULL, 10);
    snprintf(g_srv.base, sizeof(g_srv.base), "http://127.0.0.1:%d", g_srv.port);
}

static void srv_stop(void)
{
    int st;
    if (g_srv.pid > 0) {
        kill(g_srv.pid, SIGTERM);
        waitpid(g_srv.pid, &st, 0);
    }
    g_srv.pid = 0;
    free(g_pub);
    free(g_reader);
    g_pub = g_reader = NULL;
}

static void srv_teardown(void)
{
    srv_stop();
    teardown();
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

/* Waits (bounded) until tmp/ is empty: a refused upload is removed when its request ends. */
static int wait_tmp_empty(void)
{
    for (int i = 0; i < 500; i++) {
        if (count_dir("tmp") == 0)
            return 1;
        usleep(10000);
    }
    return 0;
}

/* The head of a trailer-form publish with `extra` header lines (each ending in CRLF). */
static char *trailer_head(const char *tok, const char *extra)
{
    char *h = NULL;
    ck_assert_int_ge(asprintf(&h,
                              "POST /v1/psdbs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                              "Authorization: Bearer %s\r\nTransfer-Encoding: chunked\r\n"
                              "X-Psdb-Serial: 1\r\nX-Psdb-Key-Id: %s\r\n%s",
                              tok, g_kid, extra),
                     0);
    return h;
}

/* Sends a trailer-form publish of `body` with `trailer`; the answer goes to out. */
static void send_trailer_publish(const char *head, const void *body, size_t n, const char *trailer,
                                 char *out, size_t out_size)
{
    size_t len = 0;
    char *m = chunked_message(head, body, n, 65536, trailer, &len);
    const char *parts[] = {m, NULL};
    send_parts(g_srv.port, parts, &len, 0, out, out_size);
    free(m);
}

/* The status and the error code of a raw answer. */
static void expect_answer(const char *out, int status, const char *code, const char *what)
{
    char want[32], want_code[64];
    const char *body = strstr(out, "\r\n\r\n");
    snprintf(want, sizeof(want), "HTTP/1.1 %d", status);
    snprintf(want_code, sizeof(want_code), "\"error\":\"%s\"", code);
    ck_assert_msg(strncmp(out, want, strlen(want)) == 0, "%s: want %d, got: %.300s", what, status,
                  out);
    ck_assert_msg(body && strstr(body, want_code), "%s: want %s, got: %.300s", what, code, out);
}

/* A GET with the reader token; returns the status, the body in *body (malloc'd). */
static long get(const char *path, char **body, size_t *len)
{
    char url[256];
    char *data = NULL;
    size_t n = 0;
    FILE *mem = open_memstream(&data, &n);
    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL;
    char auth[256];
    long status = 0;
    snprintf(url, sizeof(url), "%s%s", g_srv.base, path);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", g_reader);
    h = curl_slist_append(h, auth);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, mem);
    ck_assert_int_eq(curl_easy_perform(c), CURLE_OK);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    fclose(mem);
    *body = data;
    if (len)
        *len = n;
    return status;
}

/* Nothing of a refused publish is left: no blob, no upload file, no application indexed. */
static void expect_nothing_published(const char *what)
{
    char *body = NULL;
    ck_assert_msg(wait_tmp_empty(), "%s: an upload file was left in tmp/", what);
    ck_assert_msg(count_dir("blobs") == 0, "%s: a blob was stored", what);
    ck_assert_int_eq(get("/v1/apps", &body, NULL), 200);
    json_t *doc = json_loads(body, 0, NULL);
    ck_assert_msg(json_array_size(json_object_get(doc, "apps")) == 0, "%s: indexed: %s", what,
                  body);
    json_decref(doc);
    free(body);
}

/* psdb publish (the trailer form, by default) publishes a PSDB that resolves and downloads as the
 * same bytes; the header form (PSDB_PUBLISH_STATEMENT=header) still does; a second publish of the
 * same statement in the other form is the same PSDB (200). */
START_TEST(test_publish_trailer__tool_publish_resolves_and_downloads)
{
    srv_start(NULL);
    char *path = make_psdb("Game", (5u << 20) + 777, 2);
    char sig[PSDB_SIGNATURE_B64_SIZE], hex[65], *cmd = NULL, *out = NULL, *body = NULL;
    uint64_t size = 0;
    size_t n = 0, file_len = 0;
    sign_file(path, g_key, 7, NULL, sig, hex, &size);
    ck_assert_int_ge(asprintf(&cmd, "%s publish --server %s --token %s --key %s --serial 7 %s",
                              PSDB_TOOL, g_srv.base, g_pub, g_key_path, path),
                     0);
    out = run_line(cmd);
    ck_assert_msg(out && strncmp(out, "published id 1 sha256 ", 22) == 0, "%s", out);
    ck_assert_ptr_nonnull(strstr(out, hex));
    free(out);
    /* Its first request asked whether the trailer arrives (answered 400), then the upload came. */
    size_t log_len = 0;
    char *log = tu_read_file(g_log, &log_len);
    ck_assert_ptr_nonnull(log);
    char *probe = strstr(log, "access POST /v1/psdbs 400 ");
    ck_assert_msg(probe && strstr(probe, "access POST /v1/psdbs 201 "), "log: %s", log);
    free(log);
    ck_assert_int_eq(get("/v1/resolve?app=Game&app_version=1.0.0.0&family=contoso-gfx9&abi_min=7"
                         "&abi_max=7",
                         &body, NULL),
                     200);
    json_t *m = json_loads(body, 0, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(m, "sha256")), hex);
    ck_assert_str_eq(json_string_value(json_object_get(m, "signature")), sig);
    ck_assert_int_eq(json_integer_value(json_object_get(m, "size")), (long long)size);
    json_decref(m);
    free(body);
    char blob[128];
    snprintf(blob, sizeof(blob), "/v1/blobs/%s", hex);
    ck_assert_int_eq(get(blob, &body, &n), 200);
    char *file = tu_read_file(path, &file_len);
    ck_assert_uint_eq(n, file_len);
    ck_assert_int_eq(memcmp(body, file, n), 0);
    free(file);
    free(body);
    /* The header form of the same statement: already there. */
    setenv("PSDB_PUBLISH_STATEMENT", "header", 1);
    out = run_line(cmd);
    ck_assert_msg(out && strncmp(out, "already published id 1", 22) == 0, "%s", out);
    free(out);
    free(cmd);
    /* The header form of a new serial, then the trailer form of it: 201, then 200. */
    ck_assert_int_ge(asprintf(&cmd, "%s publish --server %s --token %s --key %s --serial 8 %s",
                              PSDB_TOOL, g_srv.base, g_pub, g_key_path, path),
                     0);
    out = run_line(cmd);
    ck_assert_msg(out && strncmp(out, "published id 2", 14) == 0, "%s", out);
    free(out);
    unsetenv("PSDB_PUBLISH_STATEMENT");
    out = run_line(cmd);
    ck_assert_msg(out && strncmp(out, "already published id 2", 22) == 0, "%s", out);
    free(out);
    free(cmd);
    /* The trailer form forced: published as a PSDB of its own, which resolves. */
    setenv("PSDB_PUBLISH_STATEMENT", "trailer", 1);
    ck_assert_int_ge(asprintf(&cmd, "%s publish --server %s --token %s --key %s --serial 9 %s",
                              PSDB_TOOL, g_srv.base, g_pub, g_key_path, path),
                     0);
    out = run_line(cmd);
    ck_assert_msg(out && strncmp(out, "published id 3", 14) == 0, "%s", out);
    free(out);
    free(cmd);
    unsetenv("PSDB_PUBLISH_STATEMENT");
    ck_assert_int_eq(get("/v1/resolve?app=Game&app_version=1.0.0.0&family=contoso-gfx9&abi_min=7"
                         "&abi_max=7",
                         &body, NULL),
                     200);
    m = json_loads(body, 0, NULL);
    ck_assert_int_eq(json_integer_value(json_object_get(m, "serial")), 9);
    json_decref(m);
    free(body);
    ck_assert(wait_tmp_empty());
    free(path);
}
END_TEST

/* Every broken trailer-form publish is refused with a 4xx that says why, and leaves nothing
 * indexed, stored or staged: a missing trailer or field, a malformed field, a field twice, a
 * header-only field in the trailer, a size or digest that is not what arrived, a signature that
 * does not verify; and a well-formed one of the same file is then published. */
START_TEST(test_publish_trailer__broken_trailers_refused_and_nothing_left)
{
    srv_start(NULL);
    char *path = make_psdb("Game", 200 * 1024, 3);
    char sig[PSDB_SIGNATURE_B64_SIZE], hex[65], other_sig[PSDB_SIGNATURE_B64_SIZE], other_hex[65],
        key2_sig[PSDB_SIGNATURE_B64_SIZE], out[8192];
    uint64_t size = 0;
    size_t n = 0;
    uint8_t wrong[32];
    memset(wrong, 0x5a, sizeof(wrong));
    sign_file(path, g_key, 1, NULL, sig, hex, &size);
    sign_file(path, g_key, 1, wrong, other_sig, other_hex, &size); /* signed, over another digest */
    sign_file(path, g_key2, 1, NULL, key2_sig, hex, &size);        /* not the registered key */
    char upper[65];
    snprintf(upper, sizeof(upper), "%s", hex);
    for (char *q = upper; *q; q++)
        if (*q >= 'a' && *q <= 'f')
            *q = (char)(*q - 32);
    char *body = tu_read_file(path, &n);
    char *head = trailer_head(g_pub, TRAILER_DECL);
    struct {
        const char *what;
        int status;
        const char *code, *needle;
        char trailer[512];
    } cases[] = {
        {"no trailer", 400, "trailer_missing", "proxy", ""},
        {"no signature", 400, "bad_request", "no X-Psdb-Signature", ""},
        {"no size", 400, "bad_request", "no X-Psdb-Size", ""},
        {"uppercase digest", 400, "bad_request", "64 lowercase hex", ""},
        {"short digest", 400, "bad_request", "64 lowercase hex", ""},
        {"hex size", 400, "bad_request", "decimal", ""},
        {"word size", 400, "bad_request", "decimal", ""},
        {"signature not base64", 400, "bad_request", "88-character", ""},
        {"signature twice", 400, "bad_request", "more than one X-Psdb-Signature", ""},
        {"serial in trailer", 400, "bad_request", "not a trailer field", ""},
        {"size not what arrived", 400, "statement_mismatch", "X-Psdb-Size", ""},
        {"digest not what arrived", 400, "statement_mismatch", "X-Psdb-Sha256", ""},
        {"signed by another key", 403, "bad_signature", "trailer", ""},
        {"signed over another serial", 403, "bad_signature", "trailer", ""},
    };
    char good_sha[128], good_size[64], good_sig[160];
    snprintf(good_sha, sizeof(good_sha), "X-Psdb-Sha256: %s\r\n", hex);
    snprintf(good_size, sizeof(good_size), "X-Psdb-Size: %zu\r\n", n);
    snprintf(good_sig, sizeof(good_sig), "X-Psdb-Signature: %s\r\n", sig);
#define TR(i, ...) snprintf(cases[i].trailer, sizeof(cases[i].trailer), __VA_ARGS__)
    TR(1, "%s%s", good_sha, good_size);
    TR(2, "%s%s", good_sha, good_sig);
    TR(3, "X-Psdb-Sha256: %s\r\n%s%s", upper, good_size, good_sig);
    TR(4, "X-Psdb-Sha256: %.63s\r\n%s%s", hex, good_size, good_sig);
    TR(5, "%sX-Psdb-Size: 0x%zx\r\n%s", good_sha, n, good_sig);
    TR(6, "%sX-Psdb-Size: many\r\n%s", good_sha, good_sig);
    TR(7, "%s%sX-Psdb-Signature: %.86s!!\r\n", good_sha, good_size, sig);
    TR(8, "%s%s%s%s", good_sha, good_size, good_sig, good_sig);
    TR(9, "%s%s%sX-Psdb-Serial: 1\r\n", good_sha, good_size, good_sig);
    TR(10, "%sX-Psdb-Size: %zu\r\n%s", good_sha, n + 1, good_sig);
    TR(11, "X-Psdb-Sha256: %s\r\n%sX-Psdb-Signature: %s\r\n", other_hex, good_size, other_sig);
    TR(12, "%s%sX-Psdb-Signature: %s\r\n", good_sha, good_size, key2_sig);
#undef TR
    {
        /* A valid signature, but over serial 2 while the header says 1. */
        char s2[PSDB_SIGNATURE_B64_SIZE], h2[65];
        uint64_t z;
        sign_file(path, g_key, 2, NULL, s2, h2, &z);
        snprintf(cases[13].trailer, sizeof(cases[13].trailer), "%s%sX-Psdb-Signature: %s\r\n",
                 good_sha, good_size, s2);
    }
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        send_trailer_publish(head, body, n, cases[i].trailer, out, sizeof(out));
        expect_answer(out, cases[i].status, cases[i].code, cases[i].what);
        ck_assert_msg(strstr(out, cases[i].needle), "%s: the message does not say '%s': %.300s",
                      cases[i].what, cases[i].needle, out);
        expect_nothing_published(cases[i].what);
    }
    /* An empty body: refused, after its trailer is read. */
    char empty_trailer[512];
    snprintf(empty_trailer, sizeof(empty_trailer), "X-Psdb-Sha256: %s\r\nX-Psdb-Size: 0\r\n%s", hex,
             good_sig);
    send_trailer_publish(head, body, 0, empty_trailer, out, sizeof(out));
    expect_answer(out, 400, "invalid_psdb", "empty body with its trailer");
    send_trailer_publish(head, body, 0, "", out, sizeof(out));
    expect_answer(out, 400, "trailer_missing", "empty body without a trailer");
    /* psdb publish's first request: one byte and a trailer that describes it, which psdbd
     * checks before it finds that the byte is no PSDB; without the trailer, trailer_missing. */
    char byte_trailer[512];
    snprintf(byte_trailer, sizeof(byte_trailer),
             "X-Psdb-Sha256: "
             "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d\r\n"
             "X-Psdb-Size: 1\r\n%s",
             good_sig);
    send_trailer_publish(head, "", 1, byte_trailer, out, sizeof(out));
    expect_answer(out, 400, "invalid_psdb", "one byte with its trailer");
    /* ... and the very lines psdb publish sends: a probe that psdbd refused for its form would
     * make every publish fall back to the header form. */
    char probe[512];
    snprintf(probe, sizeof(probe), "%s\r\n%s\r\n%s\r\n", psdb__publish_probe_trailer[0],
             psdb__publish_probe_trailer[1], psdb__publish_probe_trailer[2]);
    send_trailer_publish(head, "\0", 1, probe, out, sizeof(out));
    expect_answer(out, 400, "invalid_psdb", "psdb publish's probe");
    send_trailer_publish(head, "", 1, "", out, sizeof(out));
    expect_answer(out, 400, "trailer_missing", "one byte without a trailer");
    expect_nothing_published("empty and one-byte bodies");
    /* The same request with a good trailer is published (field names in any case and order). */
    char good[512];
    snprintf(good, sizeof(good), "x-psdb-signature: %s\r\nX-PSDB-SIZE: %zu\r\n%s", sig, n,
             good_sha);
    send_trailer_publish(head, body, n, good, out, sizeof(out));
    ck_assert_msg(strncmp(out, "HTTP/1.1 201", 12) == 0, "good trailer: %.300s", out);
    ck_assert(wait_tmp_empty());
    ck_assert_int_eq(count_dir("blobs"), 1);
    free(head);
    free(body);
    free(path);
}
END_TEST

/* Refused from the headers alone, before any body byte (no 100 Continue to a client that asks for
 * one): a chunked publish without a Trailer header (411, as before the trailer form), a Trailer
 * header that leaves out a field, the statement both in a header and in the trailer, a bad token
 * (authentication comes before the body in both forms), a Transfer-Encoding other than chunked. */
START_TEST(test_publish_trailer__refused_before_the_body)
{
    srv_start(NULL);
    char sig_header[200], well_formed[PSDB_SIGNATURE_B64_SIZE], out[4096];
    memset(well_formed, 'A', 86);
    memcpy(well_formed + 86, "==", 3);
    snprintf(sig_header, sizeof(sig_header), "%sX-Psdb-Signature: %s\r\n", TRAILER_DECL,
             well_formed);
    char size_header[160];
    snprintf(size_header, sizeof(size_header), "%sX-Psdb-Size: 10\r\n", TRAILER_DECL);
    struct {
        const char *what, *tok, *extra;
        int status;
        const char *code, *needle;
    } cases[] = {
        {"no Trailer header", NULL, "", 411, "length_required", "Trailer"},
        {"Trailer without the size", NULL, "Trailer: X-Psdb-Sha256, X-Psdb-Signature\r\n", 400,
         "bad_request", "X-Psdb-Size is missing"},
        {"Trailer naming other fields", NULL, "Trailer: Expires\r\n", 400, "bad_request",
         "X-Psdb-Sha256 is missing"},
        {"signature header and trailer", NULL, sig_header, 400, "bad_request",
         "both a header and a trailer"},
        {"size header and trailer", NULL, size_header, 400, "bad_request",
         "both a header and a trailer"},
        {"bad token", "nope", TRAILER_DECL, 401, "unauthorized", "token"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *extra = NULL;
        ck_assert_int_ge(asprintf(&extra, "%sExpect: 100-continue\r\n", cases[i].extra), 0);
        char *head = trailer_head(cases[i].tok ? cases[i].tok : g_pub, extra);
        char *h = NULL;
        ck_assert_int_ge(asprintf(&h, "%s\r\n", head), 0);
        const char *parts[] = {h, NULL};
        size_t lens[] = {strlen(h)};
        send_parts(g_srv.port, parts, lens, 0, out, sizeof(out));
        expect_answer(out, cases[i].status, cases[i].code, cases[i].what);
        ck_assert_msg(strstr(out, cases[i].needle), "%s: the message does not say '%s': %.300s",
                      cases[i].what, cases[i].needle, out);
        ck_assert_msg(strstr(out, "100 Continue") == NULL, "%s: 100 sent", cases[i].what);
        free(h);
        free(head);
        free(extra);
    }
    /* Another transfer coding is not the trailer form either. */
    char *h = NULL;
    ck_assert_int_ge(asprintf(&h,
                              "POST /v1/psdbs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                              "Authorization: Bearer %s\r\nTransfer-Encoding: gzip\r\n%s"
                              "X-Psdb-Serial: 1\r\nX-Psdb-Key-Id: %s\r\n\r\n",
                              g_pub, TRAILER_DECL, g_kid),
                     0);
    const char *parts[] = {h, NULL};
    size_t lens[] = {strlen(h)};
    send_parts(g_srv.port, parts, lens, 0, out, sizeof(out));
    ck_assert_msg(strncmp(out, "HTTP/1.1 4", 10) == 0, "gzip coding: %.200s", out);
    free(h);
    ck_assert_int_eq(count_dir("tmp"), 0);
}
END_TEST

/* A chunked body has no length to check up front: psdbd counts it as it arrives, stores nothing
 * past max-upload, answers 413 after the last chunk and leaves nothing behind; the tool's
 * publish of a file over the limit fails with that 413. */
START_TEST(test_publish_trailer__chunked_body_over_the_limit_is_413)
{
    const char *extra[] = {"--max-upload", "64K", NULL};
    srv_start(extra);
    char *path = make_psdb("Game", 300 * 1024, 4);
    char sig[PSDB_SIGNATURE_B64_SIZE], hex[65], trailer[512], out[4096];
    uint64_t size = 0;
    size_t n = 0;
    sign_file(path, g_key, 1, NULL, sig, hex, &size);
    char *body = tu_read_file(path, &n);
    snprintf(trailer, sizeof(trailer),
             "X-Psdb-Sha256: %s\r\nX-Psdb-Size: %zu\r\nX-Psdb-Signature: %s\r\n", hex, n, sig);
    char *head = trailer_head(g_pub, TRAILER_DECL);
    send_trailer_publish(head, body, n, trailer, out, sizeof(out));
    expect_answer(out, 413, "too_large", "chunked body over max-upload");
    ck_assert_ptr_nonnull(strstr(out, "65536 bytes"));
    expect_nothing_published("chunked body over max-upload");
    /* At the limit exactly the body is stored and checked (here: not the size its trailer
     * states). */
    send_trailer_publish(head, body, 65536, trailer, out, sizeof(out));
    ck_assert_msg(strncmp(out, "HTTP/1.1 400", 12) == 0, "64 KiB: %.200s", out);
    expect_nothing_published("64 KiB body");
    char *cmd = NULL, *msg = NULL;
    ck_assert_int_ge(asprintf(&cmd, "%s publish --server %s --token %s --key %s %s 2>&1", PSDB_TOOL,
                              g_srv.base, g_pub, g_key_path, path),
                     0);
    msg = run_line(cmd); /* NULL: the tool failed */
    ck_assert_ptr_null(msg);
    free(cmd);
    ck_assert_int_ge(asprintf(&cmd, "%s publish --server %s --token %s --key %s %s 2>&1; true",
                              PSDB_TOOL, g_srv.base, g_pub, g_key_path, path),
                     0);
    msg = run_line(cmd);
    ck_assert_msg(msg && strstr(msg, "413") && strstr(msg, "upload limit"), "tool: %s", msg);
    free(msg);
    free(cmd);
    expect_nothing_published("tool publish over max-upload");
    free(head);
    free(body);
    free(path);
}
END_TEST

/* A chunked publish earns its receive time as its bytes arrive (request-timeout plus what it has
 * sent at upload-min-rate): one that trickles is closed at its deadline, though max-upload would
 * allow a large body, and its upload file goes. */
START_TEST(test_publish_trailer__trickled_chunked_body_closed_at_deadline)
{
    const char *extra[] = {"--request-timeout", "1", "--upload-min-rate", "1K", NULL};
    srv_start(extra);
    char *head = trailer_head(g_pub, TRAILER_DECL), *h = NULL;
    ck_assert_int_ge(asprintf(&h, "%s\r\n", head), 0);
    int s = connect_port(g_srv.port);
    ck_assert_int_eq(send(s, h, strlen(h), MSG_NOSIGNAL), (ssize_t)strlen(h));
    int closed = -1;
    char chunk[600];
    /* 512 bytes a second, half the minimum rate: the deadline (1 s + received / 1 KiB/s + 1 s)
     * falls behind the clock after about 5 s. */
    memcpy(chunk, "200\r\n", 5);
    memset(chunk + 5, 'x', 512);
    memcpy(chunk + 517, "\r\n", 2);
    int answered = 0, staged = 0;
    for (int sec = 0; sec < 15 && closed < 0; sec++) {
        char b;
        ssize_t got;
        if (send(s, chunk, 519, MSG_NOSIGNAL) != 519 || (got = recv(s, &b, 1, MSG_DONTWAIT)) == 0)
            closed = sec;
        else if (got > 0)
            answered = 1;
        if (sec == 1)
            staged = count_dir("tmp");
        sleep(1);
    }
    /* Taken as a publish (its upload staged, no early answer), then closed unanswered. */
    ck_assert_int_eq(staged, 1);
    ck_assert_msg(!answered, "the trickled chunked publish got an answer");
    ck_assert_msg(closed >= 2 && closed <= 9, "trickled chunked publish closed at %d s", closed);
    close(s);
    ck_assert(wait_tmp_empty());
    free(h);
    free(head);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("publish_trailer");
    TCase *tc = tcase_create("mhd");
    tcase_add_test(tc, test_mhd__chunked_trailer_reaches_the_last_callback);
    suite_add_tcase(s, tc);
    tc = tcase_create("client");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_publish_trailer__client_sends_statement_in_trailer_when_it_arrives);
    suite_add_tcase(s, tc);
    tc = tcase_create("psdbd");
    tcase_add_checked_fixture(tc, setup, srv_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_publish_trailer__tool_publish_resolves_and_downloads);
    tcase_add_test(tc, test_publish_trailer__broken_trailers_refused_and_nothing_left);
    tcase_add_test(tc, test_publish_trailer__refused_before_the_body);
    tcase_add_test(tc, test_publish_trailer__chunked_body_over_the_limit_is_413);
    tcase_add_test(tc, test_publish_trailer__trickled_chunked_body_closed_at_deadline);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
