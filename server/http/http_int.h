/* http_int.h - what the files of psdbd's HTTP layer share: the per-connection and per-request
 * state, and the response, access, route and publish functions the router calls.
 *
 * DESIGN
 * router.c owns the libmicrohttpd callbacks and hands each request to one route: upload.c
 * (publishes: the protocol, around the publish service of publish.h), blobs.c (blob downloads),
 * valuemap.c, stats_api.c or routes.c (the other reads). Those answer through reply.c, whose one
 * table turns an outcome (verdict.h) into its status and error code, and which records what the
 * access log and the metrics report; they check tokens through access.c. daemon.c starts and
 * stops the workers (a libmicrohttpd daemon each) and the threads that serve them; acceptor.c
 * accepts the connections and gives each to the least loaded worker. */
#ifndef PSDBD_HTTP_INT_H
#define PSDBD_HTTP_INT_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <jansson.h>
#include <microhttpd.h>

#include "psdb/psdb.h"

#include "auth.h"
#include "common.h"
#include "http.h"
#include "verdict.h"

#define JSON_TYPE "application/json"
#define BLOB_TYPE "application/octet-stream"

/* One client connection (its socket context): the deadline by which the request now being read
 * must have arrived, enforced by the reaper thread. */
struct conn {
    struct conn *prev, *next; /* in srv->conns */
    int fd;
    atomic_uint_fast64_t deadline_ns; /* psdbd_now_ns() time; 0 while a response is sent */
    atomic_int timed_out;             /* the reaper shut the socket down */
};

/* ---- acceptor.c: the listening socket and the thread that hands connections to the workers ---
 */

/* One worker: a libmicrohttpd daemon with one polling thread and no listening socket. */
typedef struct http_worker {
    psdbd_server *srv;
    struct MHD_Daemon *daemon;
    atomic_uint load; /* connections handed to it and not yet reported closed */
} http_worker;

typedef struct http_acceptor http_acceptor;
/* Binds and listens on ss (cfg->listen, parsed): 0 with *out and the bound *port, or -1 with a
 * one-line message in err and *out NULL. Nothing is accepted before http_acceptor_start. */
int http_acceptor_open(const psdbd_config *cfg, const struct sockaddr_storage *ss, socklen_t len,
                       http_acceptor **out, uint16_t *port, char *err, size_t err_size);
/* Starts the thread that accepts and gives each connection to the least loaded worker of its
 * group: workers[0, num_readers) for connections that do not begin with "POST", the
 * num_uploaders after them (0: none, the readers take all) for those that do. The workers'
 * daemons are running. 0, or -1 with err. */
int http_acceptor_start(http_acceptor *a, http_worker *workers, unsigned num_readers,
                        unsigned num_uploaders, char *err, size_t err_size);
/* A worker's connection from addr (NULL: unknown) closed: called from its notification. */
void http_acceptor_closed(http_acceptor *a, http_worker *w, const struct sockaddr *addr);
/* Stops accepting: the thread ends and the listening socket is shut down and closed, so new
 * clients are refused. Connections already handed over stay the workers'. NULL is a no-op. */
void http_acceptor_stop(http_acceptor *a);
/* Stops it if needed and frees it, after the workers' daemons are stopped. NULL is a no-op. */
void http_acceptor_free(http_acceptor *a);

/* ---- upload_hash.c: the SHA-256 of an upload, computed by a thread that reads the file back ----
 */

typedef struct upload_hasher upload_hasher;
/* Starts a thread hashing what is written to fd from offset 0; NULL without memory or a thread
 * (the caller then hashes in line). */
upload_hasher *http_upload_hasher_start(int fd);
/* n more bytes were written to the file. */
void http_upload_hasher_wrote(upload_hasher *h, size_t n);
/* Waits for the thread to hash every byte written, ends it and frees h: 0 with the digest, or the
 * errno of a failed read-back. */
int http_upload_hasher_finish(upload_hasher *h, uint8_t digest[32]);
/* Ends the thread without waiting for the rest and frees h. NULL is a no-op. */
void http_upload_hasher_cancel(upload_hasher *h);

struct req {
    uint64_t start_ns;
    psdbd_route route;
    unsigned status;
    uint64_t bytes; /* response body bytes queued */
    int started;    /* the access handler has seen the request */
    int bad_uri;    /* the raw request target encodes a NUL */
    struct conn *cx;
    /* For the bytes of an aborted response: what had been written to the socket before it was
     * queued, and the size of its header (estimated as libmicrohttpd writes it). */
    int sent_known;
    uint64_t sent_base, header_bytes;
    char method[16];
    char *path;
    char *stats_app; /* a blob response: the application its PSDB is of, for /metrics */
    psdbd_principal who;
    /* publish only */
    int publishing;
    int fd;
    char *tmp_path;
    psdb__sha256_ctx *sha; /* the body's digest, when no hasher thread computes it */
    upload_hasher *hasher; /* the thread that computes it (upload_hash.c), or NULL */
    uint64_t expected, received;
    uint64_t writeback_from; /* the upload bytes below this offset are being written back */
    int write_errno;
    uint64_t serial;
    char key_id[65];
    char signature[PSDB_SIGNATURE_B64_SIZE];
    /* The trailer form (a chunked body, the statement in its trailer): the digest the trailer
     * states, and the receive deadline before the body's allowance (which grows as it arrives). */
    int trailer_form;
    int too_large; /* a chunked body went over max-upload: the rest is only counted */
    char trailer_sha256[65];
    uint64_t deadline_base_ns;
    char *key_pem, *key_scope, *key_families;
    int has_sodb; /* a PSDB publish with X-Psdb-Sodb-Sha256: its version 2 statement's SODB */
    char sodb_sha256[65];
    /* a farm request's JSON body (http/farm.c), read whole up to FARM_BODY_MAX */
    char *body;
    size_t body_len;
    int body_too_large;
    /* the end of a publish runs on its own thread while the connection is suspended, and its
     * verdict waits here until the connection is resumed */
    int finishing;
    psdbd_verdict result;
    struct MHD_Connection *conn;
    struct req *next; /* in the finishers' queue */
    /* An answer decided before the body (http_queue): held until the body is read and dropped,
     * while body_to_come (the access handler's first call of a request whose body may be held
     * for). */
    int body_to_come;
    struct MHD_Response *held;
    psdbd_outcome held_outcome;
    uint64_t held_bytes;
};

/* The largest Content-Length an early answer waits for (the body read and dropped first). */
#define HTTP_HOLD_BODY_MAX (64u << 20)

/* Seconds as nanoseconds, saturating well below UINT64_MAX so that "now + this" cannot wrap. */
static inline uint64_t http_seconds_ns(uint64_t s)
{
    return s > UINT64_MAX / 1000000000u / 2 ? UINT64_MAX / 2 : s * 1000000000u;
}

/* ---- reply.c: every answer goes through http_queue, which records status and sizes in r ----
 *
 * Each takes the outcome of the request (verdict.h); the one table in reply.c gives its status. */

/* The status line an outcome is answered with. */
unsigned http_status(psdbd_outcome o);
/* The status libmicrohttpd answered a request with on its own (a malformed or oversized header),
 * or 0. */
unsigned http_status_sent(struct MHD_Connection *c);
/* Bytes the application has written to a TCP socket so far; 0, or -1 when unknown. */
int http_socket_written(int fd, uint64_t *out);
/* Queues `resp` (destroyed here; NULL gives MHD_NO) with `body_bytes` for the access log; in
 * the first call of a request whose body is worth waiting for (r->body_to_come), holds it in
 * r->held instead, for http_queue_held once the body is read. */
enum MHD_Result http_queue(struct MHD_Connection *c, struct req *r, psdbd_outcome o,
                           struct MHD_Response *resp, uint64_t body_bytes);
enum MHD_Result http_queue_held(struct MHD_Connection *c, struct req *r);
/* Sends `body` (malloc'd, freed by libmicrohttpd or here) with `type`, uncached. */
enum MHD_Result http_reply_buffer(struct MHD_Connection *c, struct req *r, psdbd_outcome o,
                                  const char *type, char *body, size_t len);
/* The compact text of a JSON value with a newline (malloc'd, NUL-terminated); *len excludes
 * the NUL. Out of memory ends the daemon. */
char *http_json_text(const json_t *v, size_t *len);
/* The body of a failed verdict, {"error": code, "message": ...}, as http_json_text makes it. */
char *http_verdict_text(const psdbd_verdict *v, size_t *len);
/* Sends `body` (its reference is taken) as JSON. */
enum MHD_Result http_reply_json(struct MHD_Connection *c, struct req *r, psdbd_outcome o,
                                json_t *body);
/* The one reply of a verdict: a success sends its body (whose reference is taken from v; none
 * gives MHD_NO), a failure {"error": code, "message": v->message}. */
enum MHD_Result http_reply_verdict(struct MHD_Connection *c, struct req *r, psdbd_verdict *v);
/* A failure verdict made here (psdbd_verdict_fail), through http_reply_verdict. */
enum MHD_Result http_reply_error(struct MHD_Connection *c, struct req *r, psdbd_outcome o,
                                 const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* The answer for an index failure (psdbd_verdict_index): 503 for a lost index, 507 for a full
 * disk, else 500. */
enum MHD_Result http_reply_index_error(struct MHD_Connection *c, struct req *r, psdbd_rc rc);
/* A name from the request (a query argument or a path part) checked by psdb's one rule for names
 * (psdb__name_check), before anything looks it up or records it: 0 when it is a name; otherwise
 * bad_request "<label> contains U+202E (a Unicode format character)" was queued, *ret says how
 * to return, and 1 is returned. */
int http_bad_name(struct MHD_Connection *c, struct req *r, const char *label, const char *name,
                  enum MHD_Result *ret);

/* ---- access.c ----------------------------------------------------------------------------- */

/* Checks the token when `need` is not NONE. Returns 0 when the request may go on; otherwise an
 * error response was queued and *ret says how to return. `app` non-NULL: the token's scope must
 * cover it. */
int http_authorize(psdbd_server *srv, struct MHD_Connection *c, struct req *r, psdbd_role need,
                   const char *app, enum MHD_Result *ret);
/* http_authorize for the farm's worker routes: a compiler's or an admin's token (a publisher's
 * is refused: psdbd_role). */
int http_authorize_compiler(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                            enum MHD_Result *ret);
/* The role the read routes need: READER when readers need a token, else NONE. */
psdbd_role http_reader_role(const psdbd_server *srv);
/* True when the request's token limits which applications it sees. */
int http_scoped(const struct req *r);
/* Removes the entries of a listing ({"name": ...} objects) the token's scope does not cover. */
void http_drop_out_of_scope(const struct req *r, json_t *list);

/* ---- upload.c: POST /v1/psdbs ------------------------------------------------------------- */

/* The first callback: checks token, framing (a Content-Length, or a chunked body with the
 * statement in its trailer), the statement headers and the key id, and opens the upload file. */
enum MHD_Result http_publish_begin(psdbd_server *srv, struct MHD_Connection *c, struct req *r);
/* Hashes and appends one body chunk; a write failure is kept in r->write_errno, a chunked body
 * over max-upload in r->too_large. */
void http_publish_chunk(psdbd_server *srv, struct req *r, const char *data, size_t n);
/* The body is in: checks the trailer of the trailer form, then suspends the connection and
 * queues the rest for a finisher thread. */
enum MHD_Result http_publish_defer(psdbd_server *srv, struct MHD_Connection *c, struct req *r);
/* Closes and removes the upload's temporary file, if any. */
void http_publish_discard(struct req *r);
/* A finisher thread's body (arg: the psdbd_server). */
void *http_finisher(void *arg);

/* ---- blobs.c, routes.c -------------------------------------------------------------------- */

/* valuemap.c: GET /v1/blobs/<sha256>/valuemap (version 1) and .../valuemap/v2 (version 2); tail
 * starts with the 64 hex digits. */
enum MHD_Result http_serve_valuemap(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                                    const char *tail, unsigned version);
enum MHD_Result http_serve_blob(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                                const char *digest);
enum MHD_Result http_resolve(psdbd_server *srv, struct MHD_Connection *c, struct req *r);
/* GET (retire 0) or DELETE (retire 1) /v1/psdbs/<id>. */
enum MHD_Result http_psdb_by_id(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                                const char *id_text, int retire);
/* GET /v1/apps/<name>/psdbs; `tail` is the path after /v1/apps/. */
enum MHD_Result http_app_psdbs(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                               const char *tail);
enum MHD_Result http_apps(psdbd_server *srv, struct MHD_Connection *c, struct req *r);
enum MHD_Result http_readyz(psdbd_server *srv, struct MHD_Connection *c, struct req *r);
enum MHD_Result http_metrics(psdbd_server *srv, struct MHD_Connection *c, struct req *r);

/* ---- stats_api.c: the dashboard and /v1/stats/ ------------------------------------------- */

/* GET / (the page), /dashboard.js, /dashboard.css: `url` is the path. */
enum MHD_Result http_dashboard(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                               const char *url);
/* GET /v1/stats/<report>; `tail` is the report name. */
enum MHD_Result http_stats(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                           const char *tail);

/* ---- farm.c: the compile farm (schema/HTTP.md, Farm) ------------------------------------- */

/* The largest JSON body a farm request may send. */
#define FARM_BODY_MAX 65536
/* GET /v1/sodbs. */
enum MHD_Result http_sodbs_list(psdbd_server *srv, struct MHD_Connection *c, struct req *r);
/* GET /v1/sodbs/<id> (reader): the SODB's manifest; DELETE (publisher, scope): retires it. */
enum MHD_Result http_sodb_by_id(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                                const char *id_text);
/* /v1/jobs..., /v1/workers (`tail`: the path after "/v1/"); a POST's body is in r->body. */
enum MHD_Result http_farm(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                          const char *tail);
/* A resolve that missed: creates or bumps the job of its cell when the application version has a
 * published SODB (failures are logged, never the resolve's). */
void http_farm_resolve_miss(psdbd_server *srv, const psdbd_query *q);

/* ---- router.c: the libmicrohttpd callbacks ------------------------------------------------ */

void *http_on_uri(void *cls, const char *uri, struct MHD_Connection *c);
enum MHD_Result http_on_request(void *cls, struct MHD_Connection *c, const char *url,
                                const char *method, const char *version, const char *upload_data,
                                size_t *upload_data_size, void **req_cls);
void http_on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                       enum MHD_RequestTerminationCode toe);

#endif
