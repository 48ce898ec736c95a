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
 * The workers come in two groups that differ in their connections' memory pool, which in
 * libmicrohttpd 0.9.75 is both what a connection holds and the most an upload's chunk can be:
 * readers (connection-memory, small: a download holds about its pool's half plus 6 KiB) and,
 * when upload-connection-memory differs, uploaders (large: a publish is received in chunks of
 * nearly its size, and each chunk costs a recv, a write and an epoll_wait). A connection whose
 * first bytes are "POST" goes to the uploaders, any other to the readers. Its first bytes are
 * looked at (MSG_PEEK) when it is accepted; one that has sent none yet waits here, in this
 * thread's epoll set, until it sends them or CLASSIFY_WAIT_MS pass, then goes to the readers.
 * A TLS connection's first bytes say nothing: with TLS there is one group.
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
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"
#include "common/status_map.h"

#define ADDR_BUCKETS 256
/* Accepted per wake-up before the limit is looked at again by epoll_wait: bounds the time the
 * thread spends on one burst without mattering to its balance (each one goes to the least loaded).
 */
#define ACCEPT_BURST 64
/* How long accepting pauses when the process or the system is out of descriptors or memory. */
#define PAUSE_MS 100
/* How long a new connection that has sent nothing may wait for its first bytes before it goes to
 * the readers: far longer than the gap between a client's handshake and its request, short
 * enough that the request deadline, counted from the hand-over, starts nearly at the accept. */
#define CLASSIFY_WAIT_MS 200

/* A connection accepted but not yet given to a worker: its first bytes have not arrived. */
struct pending {
    struct pending *prev, *next; /* in arrival order, which is deadline order */
    int fd;
    socklen_t len;
    struct sockaddr_storage ss;
    uint64_t until_ns; /* past it, it goes to the readers */
};

/* Open connections from one client address (max-connections-per-ip). */
struct addr_count {
    struct addr_count *next;
    uint8_t key[17]; /* the family (4 or 6), then the address */
    unsigned n;
};

struct http_acceptor {
    int fd;        /* the listening socket */
    int wake;      /* eventfd: stop, or a connection closed while the thread waits for one */
    int ep;        /* epoll: wake, the listening socket while accepting, the pending connections */
    int listening; /* the listening socket is in ep's interest */
    /* workers[0, num_readers) take the connections that do not begin with "POST", the
     * num_uploaders after them those that do; next[g]: where group g's search starts. */
    http_worker *workers;
    unsigned num_readers, num_uploaders, next[2];
    struct pending *first, *last;
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
    if (write(a->wake, &one, sizeof(one)) < 0 && !psdb__errno_is(errno, PSDB__ERRNO_WOULD_BLOCK))
        psdbd_log("acceptor: wake: %s", strerror(errno));
}

/* The worker of group g (0 readers, 1 uploaders) with the fewest connections; ties go round,
 * so that equal workers take turns. */
static http_worker *least_loaded(http_acceptor *a, int g)
{
    http_worker *w = g ? a->workers + a->num_readers : a->workers;
    unsigned n = g ? a->num_uploaders : a->num_readers;
    unsigned best = a->next[g] % n;
    unsigned best_load = atomic_load(&w[best].load);
    for (unsigned i = 1; i < n; i++) {
        unsigned k = (a->next[g] + i) % n;
        unsigned load = atomic_load(&w[k].load);
        if (load < best_load) {
            best = k;
            best_load = load;
        }
    }
    a->next[g] = best + 1;
    return &w[best];
}

/* Takes back the counts of a connection that closes before a worker has it. */
static void uncount(http_acceptor *a, const struct sockaddr_storage *ss)
{
    if (a->per_ip)
        addr_del(a, (const struct sockaddr *)ss);
    atomic_fetch_sub(&a->open, 1);
}

/* Gives an accepted (and counted) connection to the least loaded worker of group g. */
static void hand_over(http_acceptor *a, int g, int fd, struct sockaddr_storage *ss, socklen_t len)
{
    http_worker *w = least_loaded(a, g);
    atomic_fetch_add(&w->load, 1);
    /* The socket is libmicrohttpd's from here, closed by it on failure too. */
    if (MHD_add_connection(w->daemon, fd, (struct sockaddr *)ss, len) != MHD_YES) {
        int e = errno;
        atomic_fetch_sub(&w->load, 1);
        uncount(a, ss);
        psdbd_log("accept: a worker did not take the connection: %s", strerror(e));
    }
}

/* Which group a connection goes to by the bytes it has sent: 1 uploaders ("POST"), 0 readers,
 * -1 not known yet (nothing, or a beginning of "POST"; `late`: known, the readers), -2 closed or
 * broken (the caller closes it). */
static int group_of(int fd, int late)
{
    char b[4];
    ssize_t n = recv(fd, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && !psdb__errno_is(errno, PSDB__ERRNO_WOULD_BLOCK) &&
                   !psdb__errno_is(errno, PSDB__ERRNO_INTERRUPTED)))
        return -2;
    if (n == (ssize_t)sizeof(b))
        return memcmp(b, "POST", sizeof(b)) == 0;
    if (n > 0 && memcmp(b, "POST", (size_t)n) != 0)
        return 0;
    return late ? 0 : -1;
}

static void pending_unlink(http_acceptor *a, struct pending *p)
{
    if (p->prev)
        p->prev->next = p->next;
    else
        a->first = p->next;
    if (p->next)
        p->next->prev = p->prev;
    else
        a->last = p->prev;
    epoll_ctl(a->ep, EPOLL_CTL_DEL, p->fd, NULL);
}

/* A pending connection sent something, or its wait is over (late): it goes to its group. */
static void pending_decide(http_acceptor *a, struct pending *p, int late)
{
    int g = group_of(p->fd, late);
    if (g == -1)
        return;
    pending_unlink(a, p);
    if (g == -2) {
        close(p->fd);
        uncount(a, &p->ss);
    } else {
        hand_over(a, g, p->fd, &p->ss, p->len);
    }
    free(p);
}

/* A new connection: to its group now when its first bytes are there, else it waits for them. */
static void classify(http_acceptor *a, int fd, struct sockaddr_storage *ss, socklen_t len)
{
    int g = a->num_uploaders ? group_of(fd, 0) : 0;
    if (g >= 0) {
        hand_over(a, g, fd, ss, len);
        return;
    }
    if (g == -2) {
        close(fd);
        uncount(a, ss);
        return;
    }
    struct pending *p = xcalloc(1, sizeof(*p));
    /* Edge-triggered: a beginning of "POST" stays readable (it is only peeked at), and waits
     * for the bytes after it rather than waking the thread again at once. */
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = p};
    p->fd = fd;
    p->ss = *ss;
    p->len = len;
    p->until_ns = psdbd_now_ns() + (uint64_t)CLASSIFY_WAIT_MS * 1000000u;
    if (epoll_ctl(a->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        free(p);
        hand_over(a, 0, fd, ss, len); /* cannot wait for it: the readers take it as it is */
        return;
    }
    p->prev = a->last;
    if (a->last)
        a->last->next = p;
    else
        a->first = p;
    a->last = p;
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
            if (psdb__errno_is(errno, PSDB__ERRNO_WOULD_BLOCK))
                return 0;
            if (psdb__errno_is(errno, PSDB__ERRNO_INTERRUPTED) ||
                psdb__errno_is(errno, PSDB__ERRNO_PEER_GONE))
                continue;
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
        atomic_fetch_add(&a->open, 1);
        classify(a, fd, &ss, len);
    }
    return 0;
}

/* Puts the listening socket in or out of the epoll set: out while accepting must wait. */
static void listen_on(http_acceptor *a, int on)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &a->fd};
    if (on == a->listening)
        return;
    if (epoll_ctl(a->ep, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, a->fd, &ev) != 0)
        psdbd_log("acceptor: epoll_ctl: %s", strerror(errno));
    else
        a->listening = on;
}

static void *accept_loop(void *arg)
{
    http_acceptor *a = arg;
    int paused = 0, logged = 0;
    while (!atomic_load(&a->stop)) {
        struct epoll_event evs[64];
        int blocked = paused, timeout = paused ? PAUSE_MS : -1, n;
        if (!blocked && atomic_load(&a->open) >= a->max) {
            /* Full: wait for a close. Said before looking again, so that a close between the
             * look and the wait still wakes the thread (http_acceptor_closed). */
            atomic_store(&a->waiting, 1);
            blocked = atomic_load(&a->open) >= a->max;
        }
        listen_on(a, !blocked);
        if (a->first) {
            uint64_t now = psdbd_now_ns();
            int ms = a->first->until_ns > now
                         ? (int)((a->first->until_ns - now + 999999u) / 1000000u)
                         : 0;
            timeout = timeout < 0 || ms < timeout ? ms : timeout;
        }
        n = epoll_wait(a->ep, evs, (int)(sizeof(evs) / sizeof(evs[0])), timeout);
        if (n < 0 && !psdb__errno_is(errno, PSDB__ERRNO_INTERRUPTED)) {
            psdbd_log("acceptor: epoll_wait: %s", strerror(errno));
            paused = 1;
            continue;
        }
        atomic_store(&a->waiting, 0);
        paused = 0;
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == &a->wake) {
                uint64_t v;
                if (read(a->wake, &v, sizeof(v)) < 0 &&
                    !psdb__errno_is(errno, PSDB__ERRNO_WOULD_BLOCK))
                    psdbd_log("acceptor: wake: %s", strerror(errno));
            } else if (evs[i].data.ptr == &a->fd) {
                if (!blocked)
                    paused = accept_burst(a, &logged);
            } else {
                pending_decide(a, evs[i].data.ptr, 0);
            }
        }
        for (uint64_t now = psdbd_now_ns(); a->first && a->first->until_ns <= now;)
            pending_decide(a, a->first, 1);
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
    a->fd = a->wake = a->ep = -1;
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
    a->ep = epoll_create1(EPOLL_CLOEXEC);
    if (a->wake < 0 || a->ep < 0) {
        snprintf(err, err_size, "cannot start the acceptor: %s: %s",
                 a->wake < 0 ? "eventfd" : "epoll_create1", strerror(errno));
        goto cleanup;
    }
    {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &a->wake};
        if (epoll_ctl(a->ep, EPOLL_CTL_ADD, a->wake, &ev) != 0) {
            snprintf(err, err_size, "cannot start the acceptor: epoll_ctl: %s", strerror(errno));
            goto cleanup;
        }
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

int http_acceptor_start(http_acceptor *a, http_worker *workers, unsigned num_readers,
                        unsigned num_uploaders, char *err, size_t err_size)
{
    int e;
    assert(num_readers > 0);
    a->workers = workers;
    a->num_readers = num_readers;
    a->num_uploaders = num_uploaders;
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
    while (a->first) {
        struct pending *p = a->first;
        pending_unlink(a, p);
        close(p->fd);
        uncount(a, &p->ss);
        free(p);
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
    if (a->ep >= 0)
        close(a->ep);
    for (size_t b = 0; b < ADDR_BUCKETS; b++)
        while (a->addrs[b]) {
            struct addr_count *e = a->addrs[b];
            a->addrs[b] = e->next;
            free(e);
        }
    pthread_mutex_destroy(&a->addrs_lock);
    free(a);
}
