/* acceptor.c - psdbd's listening socket, and the thread that accepts on it and hands each new
 * connection to the worker holding the fewest, within max-connections and max-connections-per-ip.
 *
 * DESIGN
 * libmicrohttpd's thread pool has every worker poll the listening socket and accept up to ten
 * connections at a time, so the clients of a burst land on whichever worker woke first: 64
 * keep-alive clients connecting at once were measured split 0/189/178/173 and 145/157/110/19
 * (CPU ticks of four workers), and the requests on the busiest worker's connections wait longest,
 * which is the resolve p99 (tests/bench/server_results.md). Here every worker is a libmicrohttpd
 * daemon of its own with one polling thread and no listening socket, and this thread accepts and
 * gives each connection to the worker with the fewest open (MHD_add_connection; ties rotate), so
 * the workers stay within one connection of each other however the clients arrive.
 *
 * The daemons being separate, the limits libmicrohttpd would keep per daemon are kept here, for
 * all workers together: at max-connections the thread stops accepting until a connection closes,
 * so new clients wait in the listen backlog; over max-connections-per-ip a new connection is
 * closed unanswered. A connection counts from its accept until libmicrohttpd reports it closed
 * (http_acceptor_closed). One that libmicrohttpd drops before reporting it started, which it does
 * only when it cannot allocate the connection's memory pool, stays counted. */
#include "http_int.h"

#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

#define ADDR_BUCKETS 256
/* Accepted per wake-up before the limit is looked at again by poll: bounds the time the thread
 * spends on one burst without mattering to its balance (each one goes to the least loaded). */
#define ACCEPT_BURST 64
/* How long accepting pauses when the process or the system is out of descriptors or memory. */
#define PAUSE_MS 100

/* Open connections from one client address (max-connections-per-ip). */
struct addr_count {
    struct addr_count *next;
    uint8_t key[17]; /* the family (4 or 6), then the address */
    unsigned n;
};

struct http_acceptor {
    int fd;   /* the listening socket */
    int wake; /* eventfd: stop, or a connection closed while the thread waits for one */
    http_worker *workers;
    unsigned num_workers, next; /* next: where the search for the least loaded starts */
    unsigned max, per_ip;
    atomic_uint open;   /* accepted and not yet reported closed */
    atomic_int waiting; /* the thread waits for a connection to close */
    atomic_int stop;
    pthread_t thread;
    int started;
    pthread_mutex_t addrs_lock;
    struct addr_count *addrs[ADDR_BUCKETS];
};

/* The per-address key of a client address; -1 for a family other than IPv4 and IPv6, which is
 * not limited (libmicrohttpd let those through too). */
static int addr_key(const struct sockaddr *sa, uint8_t key[17], size_t *bucket)
{
    uint64_t h = 0xcbf29ce484222325ull;
    memset(key, 0, 17);
    if (sa->sa_family == AF_INET) {
        key[0] = 4;
        memcpy(key + 1, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6) {
        key[0] = 6;
        memcpy(key + 1, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
    } else {
        return -1;
    }
    for (size_t i = 0; i < 17; i++)
        h = (h ^ key[i]) * 0x100000001b3ull;
    *bucket = (size_t)(h % ADDR_BUCKETS);
    return 0;
}

/* Counts one more connection from sa: 0, or -1 when the address already has per_ip of them. */
static int addr_add(http_acceptor *a, const struct sockaddr *sa)
{
    uint8_t key[17];
    size_t b = 0;
    struct addr_count *e;
    int rc = 0;
    if (addr_key(sa, key, &b) != 0)
        return 0;
    pthread_mutex_lock(&a->addrs_lock);
    for (e = a->addrs[b]; e && memcmp(e->key, key, sizeof(key)) != 0; e = e->next) {
    }
    if (!e) {
        e = xcalloc(1, sizeof(*e));
        memcpy(e->key, key, sizeof(key));
        e->next = a->addrs[b];
        a->addrs[b] = e;
    }
    if (e->n >= a->per_ip)
        rc = -1;
    else
        e->n++;
    pthread_mutex_unlock(&a->addrs_lock);
    return rc;
}

static void addr_del(http_acceptor *a, const struct sockaddr *sa)
{
    uint8_t key[17];
    size_t b = 0;
    struct addr_count **p, *e;
    if (addr_key(sa, key, &b) != 0)
        return;
    pthread_mutex_lock(&a->addrs_lock);
    for (p = &a->addrs[b]; *p && memcmp((*p)->key, key, sizeof(key)) != 0; p = &(*p)->next) {
    }
    e = *p;
    assert(e && e->n > 0);
    if (e && --e->n == 0) {
        *p = e->next;
        free(e);
    }
    pthread_mutex_unlock(&a->addrs_lock);
}

static void wake_thread(http_acceptor *a)
{
    uint64_t one = 1;
    /* A full counter (never, at one write per close) or EAGAIN still leaves it readable. */
    if (write(a->wake, &one, sizeof(one)) < 0 && errno != EAGAIN)
        psdbd_log("acceptor: wake: %s", strerror(errno));
}

/* The worker with the fewest connections; ties go round, so that equal workers take turns. */
static http_worker *least_loaded(http_acceptor *a)
{
    unsigned best = a->next % a->num_workers;
    unsigned best_load = atomic_load(&a->workers[best].load);
    for (unsigned i = 1; i < a->num_workers; i++) {
        unsigned k = (a->next + i) % a->num_workers;
        unsigned load = atomic_load(&a->workers[k].load);
        if (load < best_load) {
            best = k;
            best_load = load;
        }
    }
    a->next = best + 1;
    return &a->workers[best];
}

/* Accepts what is waiting, up to the limit and ACCEPT_BURST. 0, or 1 when accepting must pause
 * (out of descriptors or memory). */
static int accept_burst(http_acceptor *a, int *logged)
{
    for (unsigned i = 0; i < ACCEPT_BURST && atomic_load(&a->open) < a->max; i++) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        int fd = accept4(a->fd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
                continue; /* the client went away before it was accepted */
            if (!*logged)
                psdbd_log("accept: %s (pausing new connections for %d ms)", strerror(errno),
                          PAUSE_MS);
            *logged = 1;
            return 1;
        }
        *logged = 0;
        if (len > sizeof(ss) || (a->per_ip && addr_add(a, (struct sockaddr *)&ss) != 0)) {
            close(fd);
            continue;
        }
        http_worker *w = least_loaded(a);
        atomic_fetch_add(&a->open, 1);
        atomic_fetch_add(&w->load, 1);
        /* The socket is libmicrohttpd's from here, closed by it on failure too. */
        if (MHD_add_connection(w->daemon, fd, (struct sockaddr *)&ss, len) != MHD_YES) {
            int e = errno;
            atomic_fetch_sub(&w->load, 1);
            atomic_fetch_sub(&a->open, 1);
            if (a->per_ip)
                addr_del(a, (struct sockaddr *)&ss);
            psdbd_log("accept: a worker did not take the connection: %s", strerror(e));
        }
    }
    return 0;
}

static void *accept_loop(void *arg)
{
    http_acceptor *a = arg;
    int paused = 0, logged = 0;
    while (!atomic_load(&a->stop)) {
        struct pollfd p[2] = {{.fd = a->wake, .events = POLLIN}, {.fd = a->fd, .events = POLLIN}};
        int blocked = paused;
        if (!blocked && atomic_load(&a->open) >= a->max) {
            /* Full: wait for a close. Said before looking again, so that a close between the
             * look and the wait still wakes the thread (http_acceptor_closed). */
            atomic_store(&a->waiting, 1);
            blocked = atomic_load(&a->open) >= a->max;
        }
        if (poll(p, blocked ? 1 : 2, paused ? PAUSE_MS : -1) < 0 && errno != EINTR) {
            psdbd_log("acceptor: poll: %s", strerror(errno));
            paused = 1;
            continue;
        }
        if (p[0].revents & POLLIN) {
            uint64_t v;
            if (read(a->wake, &v, sizeof(v)) < 0 && errno != EAGAIN)
                psdbd_log("acceptor: wake: %s", strerror(errno));
        }
        atomic_store(&a->waiting, 0);
        paused = 0;
        if (!blocked && (p[1].revents & POLLIN))
            paused = accept_burst(a, &logged);
    }
    return NULL;
}

int http_acceptor_open(const psdbd_config *cfg, const struct sockaddr_storage *ss, socklen_t len,
                       http_acceptor **out, uint16_t *port, char *err, size_t err_size)
{
    http_acceptor *a = xcalloc(1, sizeof(*a));
    struct sockaddr_storage bound;
    socklen_t blen = sizeof(bound);
    int one = 1, rc = -1;
    a->fd = a->wake = -1;
    pthread_mutex_init(&a->addrs_lock, NULL);
    a->max = cfg->max_connections;
    a->per_ip = cfg->max_connections_per_ip;
    a->fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (a->fd < 0) {
        snprintf(err, err_size, "cannot serve on %s: socket: %s", cfg->listen, strerror(errno));
        goto cleanup;
    }
    /* As libmicrohttpd did: a restart binds again while old connections are in TIME_WAIT, and an
     * IPv6 address takes IPv6 clients only. */
    if (setsockopt(a->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        (ss->ss_family == AF_INET6 &&
         setsockopt(a->fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) != 0)) {
        snprintf(err, err_size, "cannot serve on %s: setsockopt: %s", cfg->listen, strerror(errno));
        goto cleanup;
    }
    if (bind(a->fd, (const struct sockaddr *)ss, len) != 0) {
        snprintf(err, err_size, "cannot serve on %s: bind: %s", cfg->listen, strerror(errno));
        goto cleanup;
    }
    if (listen(a->fd, 1024) != 0 || getsockname(a->fd, (struct sockaddr *)&bound, &blen) != 0) {
        snprintf(err, err_size, "cannot serve on %s: listen: %s", cfg->listen, strerror(errno));
        goto cleanup;
    }
    a->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (a->wake < 0) {
        snprintf(err, err_size, "cannot start the acceptor: eventfd: %s", strerror(errno));
        goto cleanup;
    }
    *port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)(void *)&bound)->sin6_port
                                              : ((struct sockaddr_in *)(void *)&bound)->sin_port);
    rc = 0;
cleanup:
    if (rc != 0) {
        http_acceptor_free(a);
        a = NULL;
    }
    *out = a;
    return rc;
}

int http_acceptor_start(http_acceptor *a, http_worker *workers, unsigned num_workers, char *err,
                        size_t err_size)
{
    int e;
    assert(num_workers > 0);
    a->workers = workers;
    a->num_workers = num_workers;
    e = pthread_create(&a->thread, NULL, accept_loop, a);
    if (e != 0) {
        snprintf(err, err_size, "cannot start the acceptor thread: %s", strerror(e));
        return -1;
    }
    a->started = 1;
    return 0;
}

void http_acceptor_closed(http_acceptor *a, http_worker *w, const struct sockaddr *addr)
{
    atomic_fetch_sub(&w->load, 1);
    if (a->per_ip && addr)
        addr_del(a, addr);
    atomic_fetch_sub(&a->open, 1);
    if (atomic_load(&a->waiting))
        wake_thread(a);
}

void http_acceptor_stop(http_acceptor *a)
{
    if (!a)
        return;
    if (a->started) {
        atomic_store(&a->stop, 1);
        wake_thread(a);
        pthread_join(a->thread, NULL);
        a->started = 0;
    }
    /* Shut down, not only closed: the connections waiting in the backlog are refused now rather
     * than left to time out. */
    if (a->fd >= 0) {
        shutdown(a->fd, SHUT_RDWR);
        close(a->fd);
        a->fd = -1;
    }
}

void http_acceptor_free(http_acceptor *a)
{
    if (!a)
        return;
    http_acceptor_stop(a);
    if (a->wake >= 0)
        close(a->wake);
    for (size_t b = 0; b < ADDR_BUCKETS; b++)
        while (a->addrs[b]) {
            struct addr_count *e = a->addrs[b];
            a->addrs[b] = e->next;
            free(e);
        }
    pthread_mutex_destroy(&a->addrs_lock);
    free(a);
}
