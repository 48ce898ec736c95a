/* daemon.c - starting and stopping psdbd's libmicrohttpd workers (one daemon each) and their
 * acceptor: listen address, TLS, finisher threads, the connection list and the reaper that
 * enforces receive deadlines. */
#include "http_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "common.h"
#include "metrics.h"

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    http_worker *w = cls;
    psdbd_server *srv = w->srv;
    struct conn *cx = *socket_context;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        cx = xcalloc(1, sizeof(*cx));
        cx->fd = ci ? ci->connect_fd : -1;
        atomic_init(&cx->deadline_ns,
                    srv->cfg->request_timeout
                        ? psdbd_now_ns() + http_seconds_ns(srv->cfg->request_timeout)
                        : 0);
        atomic_init(&cx->timed_out, 0);
        pthread_mutex_lock(&srv->conns_lock);
        cx->next = srv->conns;
        if (srv->conns)
            srv->conns->prev = cx;
        srv->conns = cx;
        pthread_mutex_unlock(&srv->conns_lock);
        *socket_context = cx;
        psdbd_metrics_connection(1);
        return;
    }
    {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        http_acceptor_closed(srv->acceptor, w, ci ? ci->client_addr : NULL);
    }
    if (!cx)
        return;
    /* Unlinked before libmicrohttpd closes the socket: the reaper never sees a reused fd. */
    pthread_mutex_lock(&srv->conns_lock);
    if (cx->prev)
        cx->prev->next = cx->next;
    else
        srv->conns = cx->next;
    if (cx->next)
        cx->next->prev = cx->prev;
    pthread_mutex_unlock(&srv->conns_lock);
    free(cx);
    *socket_context = NULL;
    psdbd_metrics_connection(-1);
}

/* The reaper: libmicrohttpd's timeout counts idle time only, so a client that sends a byte now
 * and then would hold its connection (and, with enough of them, the server) forever. Each
 * connection carries a deadline for receiving its current request (request-timeout, plus the
 * upload's time at upload-min-rate for a publish); past it, the socket is shut down, which
 * libmicrohttpd sees as the client going away, and the access log says aborted=timeout. */
static void *reaper(void *arg)
{
    psdbd_server *srv = arg;
    struct timespec next;
    pthread_mutex_lock(&srv->conns_lock);
    while (!srv->reaper_stop) {
        uint64_t now = psdbd_now_ns();
        for (struct conn *cx = srv->conns; cx; cx = cx->next) {
            uint64_t d = atomic_load(&cx->deadline_ns);
            if (d && now > d && cx->fd >= 0 && !atomic_exchange(&cx->timed_out, 1)) {
                psdbd_metrics_request_timeout();
                shutdown(cx->fd, SHUT_RDWR);
            }
        }
        clock_gettime(CLOCK_REALTIME, &next);
        next.tv_nsec += 250 * 1000 * 1000;
        if (next.tv_nsec >= 1000000000) {
            next.tv_sec++;
            next.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&srv->reaper_wake, &srv->conns_lock, &next);
    }
    pthread_mutex_unlock(&srv->conns_lock);
    return NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    (void)cls;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    psdbd_log("libmicrohttpd: %s", msg);
}

/* ---- start and stop -------------------------------------------------------------------------- */

static int parse_listen(const char *listen, struct sockaddr_storage *ss, socklen_t *len, char *err,
                        size_t err_size)
{
    char host[256];
    const char *colon, *port;
    struct addrinfo hints = {0}, *res = NULL;
    int rc;
    if (listen[0] == '[') {
        const char *end = strchr(listen, ']');
        if (!end || end[1] != ':' || (size_t)(end - listen - 1) >= sizeof(host))
            goto bad;
        memcpy(host, listen + 1, (size_t)(end - listen - 1));
        host[end - listen - 1] = '\0';
        port = end + 2;
    } else {
        colon = strrchr(listen, ':');
        if (!colon || (size_t)(colon - listen) >= sizeof(host))
            goto bad;
        memcpy(host, listen, (size_t)(colon - listen));
        host[colon - listen] = '\0';
        port = colon + 1;
    }
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
    rc = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
    if (rc != 0) {
        snprintf(err, err_size, "listen address '%s': %s", listen, gai_strerror(rc));
        return -1;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
bad:
    snprintf(err, err_size, "listen address '%s': expected HOST:PORT or [IPV6]:PORT", listen);
    return -1;
}

static char *read_pem(const char *path, char *err, size_t err_size)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t n = 0;
    if (!f) {
        snprintf(err, err_size, "open %s: %s", path, strerror(errno));
        return NULL;
    }
    buf = xmalloc(1 << 20);
    n = fread(buf, 1, (1 << 20) - 1, f);
    fclose(f);
    if (n == 0 || n == (1 << 20) - 1) {
        snprintf(err, err_size, "%s: empty or too large for a PEM file", path);
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

/* Tells the finisher threads to end once the queue is empty and joins them. Called with
 * srv->lock held; returns with it released. */
static void stop_finishers(psdbd_server *srv)
{
    srv->stopping = 1;
    pthread_cond_broadcast(&srv->work);
    pthread_mutex_unlock(&srv->lock);
    for (unsigned i = 0; i < srv->num_finishers; i++)
        pthread_join(srv->finishers[i], NULL);
    free(srv->finishers);
    srv->finishers = NULL;
}

/* Stops the workers' daemons that were started. */
static void stop_workers(psdbd_server *srv)
{
    for (unsigned i = 0; i < srv->num_workers; i++)
        if (srv->workers[i].daemon)
            MHD_stop_daemon(srv->workers[i].daemon);
    free(srv->workers);
    srv->workers = NULL;
    srv->num_workers = 0;
}

int psdbd_http_start(psdbd_server *srv, char *err, size_t err_size)
{
    struct sockaddr_storage ss;
    socklen_t sslen = 0;
    char *cert = NULL, *key = NULL;
    int rc = -1;
    /* No listening socket: the acceptor hands each worker its connections (acceptor.c). */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG |
                     MHD_USE_ITC | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_NO_LISTEN_SOCKET;
    const psdbd_config *cfg = srv->cfg;
    unsigned threads = cfg->threads ? cfg->threads : 1, uploaders = 0;
    pthread_mutex_init(&srv->lock, NULL);
    pthread_cond_init(&srv->idle, NULL);
    pthread_cond_init(&srv->work, NULL);
    pthread_mutex_init(&srv->conns_lock, NULL);
    pthread_cond_init(&srv->reaper_wake, NULL);
    atomic_init(&srv->active, 0);
    atomic_init(&srv->draining, 0);
    if (parse_listen(cfg->listen, &ss, &sslen, err, err_size) != 0)
        goto cleanup;
    if ((cfg->tls_cert != NULL) != (cfg->tls_key != NULL)) {
        snprintf(err, err_size, "tls-cert and tls-key must be given together");
        goto cleanup;
    }
    if (cfg->tls_cert) {
        if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
            snprintf(err, err_size,
                     "this libmicrohttpd was built without TLS (GnuTLS): serve "
                     "plain HTTP behind a TLS proxy instead");
            goto cleanup;
        }
        if (!(cert = read_pem(cfg->tls_cert, err, err_size)) ||
            !(key = read_pem(cfg->tls_key, err, err_size)))
            goto cleanup;
        flags |= MHD_USE_TLS;
    }
    if (http_acceptor_open(cfg, &ss, sslen, &srv->acceptor, &srv->port, err, err_size) != 0)
        goto cleanup;
    srv->finishers = xcalloc(cfg->threads < 2 ? 2 : cfg->threads, sizeof(pthread_t));
    for (unsigned i = 0; i < (cfg->threads < 2 ? 2 : cfg->threads); i++) {
        int e = pthread_create(&srv->finishers[i], NULL, http_finisher, srv);
        if (e != 0) {
            snprintf(err, err_size, "cannot start finisher threads: %s", strerror(e));
            goto cleanup;
        }
        srv->num_finishers = i + 1;
    }
    if (MHD_is_feature_supported(MHD_FEATURE_LARGE_FILE) != MHD_YES)
        psdbd_log("warning: this libmicrohttpd cannot serve files over 2 GiB");
    /* Readers, then as many uploaders for the connections that begin with a POST, when their
     * memory differs; a TLS connection cannot be told by its first bytes (acceptor.c). */
    uploaders = cfg->upload_connection_memory != cfg->connection_memory && !cert ? threads : 0;
    srv->workers = xcalloc(threads + uploaders, sizeof(*srv->workers));
    for (unsigned i = 0; i < threads + uploaders; i++) {
        http_worker *w = &srv->workers[i];
        w->srv = srv;
        atomic_init(&w->load, 0);
        srv->num_workers = i + 1;
        /* The acceptor keeps max-connections and max-connections-per-ip for all the daemons
         * together; a daemon's own limit is only a bound, and twice the setting: a daemon counts
         * a closed connection until it has cleaned it up, after its notification let the
         * acceptor hand over the next (at the limit, the daemon would close that one). */
        struct MHD_OptionItem ops[] = {
            {MHD_OPTION_CONNECTION_LIMIT, (intptr_t)cfg->max_connections * 2 + 16, NULL},
            {MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)cfg->timeout, NULL},
            {MHD_OPTION_CONNECTION_MEMORY_LIMIT,
             (intptr_t)(i < threads ? cfg->connection_memory : cfg->upload_connection_memory),
             NULL},
            {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)http_on_completed, srv},
            {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, w},
            {MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)http_on_uri, srv},
            /* TLS entries last: cut off by MHD_OPTION_END when serving plain HTTP */
            {cert ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, cert},
            {MHD_OPTION_HTTPS_MEM_KEY, 0, key},
            {MHD_OPTION_END, 0, NULL}};
        /* The logger goes first: MHD reports option errors through it. */
        w->daemon =
            MHD_start_daemon(flags, 0, NULL, NULL, http_on_request, srv, MHD_OPTION_EXTERNAL_LOGGER,
                             on_mhd_log, NULL, MHD_OPTION_ARRAY, ops, MHD_OPTION_END);
        if (!w->daemon) {
            snprintf(err, err_size, "cannot start worker %u of %u (bad settings; see above)", i + 1,
                     threads + uploaders);
            goto cleanup;
        }
    }
    {
        int e = pthread_create(&srv->reaper_thread, NULL, reaper, srv);
        if (e != 0) {
            snprintf(err, err_size, "cannot start the connection reaper thread: %s", strerror(e));
            goto cleanup;
        }
        srv->reaper_started = 1;
    }
    if (http_acceptor_start(srv->acceptor, srv->workers, threads, uploaders, err, err_size) != 0)
        goto cleanup;
    rc = 0;
cleanup:
    if (rc != 0) {
        if (srv->reaper_started) {
            pthread_mutex_lock(&srv->conns_lock);
            srv->reaper_stop = 1;
            pthread_cond_broadcast(&srv->reaper_wake);
            pthread_mutex_unlock(&srv->conns_lock);
            pthread_join(srv->reaper_thread, NULL);
            srv->reaper_started = 0;
        }
        http_acceptor_stop(srv->acceptor);
        stop_workers(srv);
        http_acceptor_free(srv->acceptor);
        srv->acceptor = NULL;
        if (srv->finishers) {
            pthread_mutex_lock(&srv->lock);
            stop_finishers(srv);
        }
    }
    if (key) {
        memset(key, 0, strlen(key));
        free(key);
    }
    free(cert);
    return rc;
}

void psdbd_http_stop(psdbd_server *srv)
{
    struct timespec deadline;
    if (!srv->workers)
        return;
    /* New connections are refused from here on (the listening socket is shut down); the
     * workers keep serving the ones they have. */
    http_acceptor_stop(srv->acceptor);
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += srv->cfg->shutdown_timeout;
    atomic_store(&srv->draining, 1);
    pthread_mutex_lock(&srv->lock);
    while (atomic_load(&srv->active) > 0) {
        if (pthread_cond_timedwait(&srv->idle, &srv->lock, &deadline) == ETIMEDOUT) {
            psdbd_log("shutdown: %u requests still running after %u s, closing them",
                      atomic_load(&srv->active), srv->cfg->shutdown_timeout);
            break;
        }
    }
    /* A suspended connection must not meet MHD_stop_daemon: finishing publishes always end. */
    while (srv->jobs > 0)
        pthread_cond_wait(&srv->idle, &srv->lock);
    /* A publish resumed just now is still suspended until its worker picks it up: give the
     * worker a moment to answer it. */
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 2;
    while (atomic_load(&srv->active) > 0 &&
           pthread_cond_timedwait(&srv->idle, &srv->lock, &deadline) != ETIMEDOUT) {
    }
    stop_finishers(srv);
    pthread_mutex_lock(&srv->conns_lock);
    srv->reaper_stop = 1;
    pthread_cond_broadcast(&srv->reaper_wake);
    pthread_mutex_unlock(&srv->conns_lock);
    if (srv->reaper_started)
        pthread_join(srv->reaper_thread, NULL);
    srv->reaper_started = 0;
    stop_workers(srv);
    http_acceptor_free(srv->acceptor);
    srv->acceptor = NULL;
    pthread_cond_destroy(&srv->reaper_wake);
    pthread_mutex_destroy(&srv->conns_lock);
    pthread_cond_destroy(&srv->work);
    pthread_cond_destroy(&srv->idle);
    pthread_mutex_destroy(&srv->lock);
}
