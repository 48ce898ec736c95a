/* main.c - psdbd: the PSDB index and delivery server (serve, and the admin commands). */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "psdb/psdb.h"

#include "admin.h"
#include "backup.h"
#include "cache.h"
#include "common.h"
#include "config.h"
#include "http.h"
#include "index.h"
#include "stats.h"
#include "store.h"
#include "valuemaps.h"

static void usage(void)
{
    printf("usage: psdbd [serve] [--listen ADDR:PORT] [--data-dir DIR] [--config FILE] [...]\n"
           "       psdbd token create --data-dir DIR --role admin|publisher|compiler|reader "
           "[--scope APP_PATTERN]\n"
           "       psdbd key add --data-dir DIR --name NAME --public-key FILE.pub "
           "[--scope APP_PATTERN] [--families FAMILY_PATTERN]\n"
           "       psdbd gc --data-dir DIR [--dry-run] [--force]\n"
           "       psdbd check --data-dir DIR [--deep]\n"
           "       psdbd job add --data-dir DIR --app NAME --app-version V --family FAMILY "
           "--abi N\n"
           "       psdbd job requeue --data-dir DIR ID\n"
           "       psdbd sodb list --data-dir DIR [--app NAME] [--retired]\n"
           "       psdbd sodb retire --data-dir DIR ID\n"
           "       (token, key, gc, check, job, sodb: --index URL for a PostgreSQL index)\n"
           "       psdbd backup --data-dir DIR --out BACKUPDIR | restore --from BACKUPDIR "
           "--data-dir NEWDIR\n\n"
           "Serves the PSDB index and blobs over HTTP (schema/HTTP.md). With no arguments it\n"
           "serves 127.0.0.1:8470 from its default data directory. The first stdout line is\n"
           "\"psdbd: listening on http://ADDR:PORT\". SIGTERM or SIGINT stop it after in-flight\n"
           "requests finish; SIGUSR1 writes the demand statistics now (the dashboard at /).\n"
           "Each command has --help.\n\n");
    psdbd_config_usage();
}

/* Reads the config file, then the flags over it, into cfg. 0 to serve, -1 when --help or
 * --version answered (success), 1 after a message. */
static int parse_serve_args(int argc, char **argv, psdbd_config *cfg)
{
    static const struct option opts[] = {{"listen", required_argument, NULL, 1},
                                         {"data-dir", required_argument, NULL, 1},
                                         {"index", required_argument, NULL, 1},
                                         {"index-pool", required_argument, NULL, 1},
                                         {"index-statement-timeout", required_argument, NULL, 1},
                                         {"config", required_argument, NULL, 2},
                                         {"threads", required_argument, NULL, 1},
                                         {"max-upload", required_argument, NULL, 1},
                                         {"max-connections", required_argument, NULL, 1},
                                         {"max-connections-per-ip", required_argument, NULL, 1},
                                         {"timeout", required_argument, NULL, 1},
                                         {"request-timeout", required_argument, NULL, 1},
                                         {"upload-min-rate", required_argument, NULL, 1},
                                         {"shutdown-timeout", required_argument, NULL, 1},
                                         {"connection-memory", required_argument, NULL, 1},
                                         {"upload-connection-memory", required_argument, NULL, 1},
                                         {"readers-need-token", optional_argument, NULL, 1},
                                         {"metrics-need-token", optional_argument, NULL, 1},
                                         {"log-requests", optional_argument, NULL, 1},
                                         {"tls-cert", required_argument, NULL, 1},
                                         {"tls-key", required_argument, NULL, 1},
                                         {"stats", optional_argument, NULL, 1},
                                         {"stats-flush-interval", required_argument, NULL, 1},
                                         {"stats-retention-days", required_argument, NULL, 1},
                                         {"stats-max-keys", required_argument, NULL, 1},
                                         {"stats-top-apps", required_argument, NULL, 1},
                                         {"stats-max-names", required_argument, NULL, 1},
                                         {"stats-max-day-bytes", required_argument, NULL, 1},
                                         {"stats-max-memory", required_argument, NULL, 1},
                                         {"job-max-attempts", required_argument, NULL, 1},
                                         {"job-max-queued-per-family", required_argument, NULL, 1},
                                         {"job-max-queued-per-sodb", required_argument, NULL, 1},
                                         {"help", no_argument, NULL, 'h'},
                                         {"version", no_argument, NULL, 'V'},
                                         {NULL, 0, NULL, 0}};
    char err[1024];
    int c, idx = 0;
    /* The config file is read first so that flags override it wherever they appear. */
    for (int i = 1; i < argc; i++) {
        const char *file = NULL;
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            file = argv[i + 1];
        else if (strncmp(argv[i], "--config=", 9) == 0)
            file = argv[i] + 9;
        if (file && psdbd_config_load(cfg, file, err, sizeof(err)) != 0) {
            fprintf(stderr, "psdbd: %s\n", err);
            return 1;
        }
    }
    optind = 1;
    while ((c = getopt_long(argc, argv, "hV", opts, &idx)) != -1) {
        if (c == 'h') {
            usage();
            return -1;
        }
        if (c == 'V') {
            printf("psdbd %s\n", psdb_version());
            return -1;
        }
        if (c == 2)
            continue;
        if (c != 1) {
            fprintf(stderr, "psdbd: bad arguments (try psdbd --help)\n");
            return 1;
        }
        const char *value = optarg;
        int b = 0;
        /* Boolean flags: "--flag", "--flag=false" or "--flag false". */
        if (!value && opts[idx].has_arg == optional_argument) {
            if (optind < argc && psdbd_parse_bool(argv[optind], &b) == 0)
                value = argv[optind++];
            else
                value = "true";
        }
        if (psdbd_config_set(cfg, opts[idx].name, value, err, sizeof(err)) != 0) {
            fprintf(stderr, "psdbd: %s\n", err);
            return 1;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "psdbd: unexpected argument '%s' (try psdbd --help)\n", argv[optind]);
        return 1;
    }
    return 0;
}

static int serve(int argc, char **argv)
{
    psdbd_config cfg;
    psdbd_server srv;
    char err[1024];
    int rc = 1, lock_fd = -1, sig = 0, alone = 1;
    sigset_t set;

    memset(&srv, 0, sizeof(srv));
    psdbd_config_defaults(&cfg);
    if ((rc = parse_serve_args(argc, argv, &cfg)) != 0) {
        rc = rc < 0 ? 0 : 1;
        goto cleanup;
    }
    rc = 1;

    /* Signals are blocked before any thread starts, so every libmicrohttpd worker inherits the
     * mask and only sigwait below ever sees them. */
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN); /* a file-size limit surfaces as EFBIG, answered with 507 */

    if (psdbd_store_open(&srv.store, cfg.data_dir, 0, err, sizeof(err)) != 0) {
        fprintf(stderr, "psdbd: %s\n", err);
        goto cleanup;
    }
    /* On SQLite one server owns the data directory. Replicas on a PostgreSQL index share its blob
     * store: each holds the lock shared, and only one that starts alone clears tmp/. */
    if (cfg.index && *cfg.index)
        lock_fd = psdbd_lock_data_dir_shared(cfg.data_dir, &alone, err, sizeof(err));
    else
        lock_fd = psdbd_lock_data_dir(cfg.data_dir, err, sizeof(err));
    if (lock_fd < 0) {
        fprintf(stderr, "psdbd: %s\n", err);
        goto cleanup;
    }
    /* Holding the lock alone, no other server can be writing uploads: leftovers are garbage. */
    psdbd_store_close(&srv.store);
    if (psdbd_store_open(&srv.store, cfg.data_dir, alone, err, sizeof(err)) != 0) {
        fprintf(stderr, "psdbd: %s\n", err);
        goto cleanup;
    }
    if (psdbd_data_open_index_at(&srv.store, cfg.index, psdbd_config_index_pool(&cfg),
                                 cfg.index_statement_timeout, 1, &srv.ix, err, sizeof(err)) != 0) {
        fprintf(stderr, "psdbd: %s\n", err);
        goto cleanup;
    }
    /* Replicas' publishes and retires reach this server's resolve cache. */
    if (psdbd_index_watch(srv.ix, psdbd_cache_invalidate, err, sizeof(err)) != 0) {
        fprintf(stderr, "psdbd: %s\n", err);
        goto cleanup;
    }
    srv.cfg = &cfg;
    if (cfg.stats) {
        psdbd_stats_options so = {cfg.stats_flush_interval, cfg.stats_retention_days,
                                  cfg.stats_max_keys,       cfg.stats_top_apps,
                                  cfg.stats_max_names,      cfg.stats_max_day_bytes,
                                  cfg.stats_max_memory};
        srv.stats = psdbd_stats_create(&so);
        if (psdbd_stats_start(srv.stats, srv.ix, err, sizeof(err)) != 0) {
            fprintf(stderr, "psdbd: %s\n", err);
            goto cleanup;
        }
    }
    {
        const psdbd_job_bounds b = {cfg.job_max_queued_per_family, cfg.job_max_queued_per_sodb};
        if (!(srv.farm_demand = psdbd_farm_demand_start(srv.ix, &b, err, sizeof(err)))) {
            fprintf(stderr, "psdbd: %s\n", err);
            goto cleanup;
        }
    }
    /* Alone, no other psdbd can be deriving a map: temporaries in valuemaps/ are a kill's. */
    if (!(srv.vmaps = psdbd_valuemaps_start(&srv.store, alone, err, sizeof(err)))) {
        fprintf(stderr, "psdbd: %s\n", err);
        goto cleanup;
    }
    /* Blobs published before maps were derived at publish get theirs now, in the background. */
    psdbd_valuemaps_backfill(srv.vmaps);
    if (psdbd_http_start(&srv, err, sizeof(err)) != 0) {
        fprintf(stderr, "psdbd: %s\n", err);
        goto cleanup;
    }
    {
        const char *scheme = cfg.tls_cert ? "https" : "http";
        char host[256];
        const char *colon =
            cfg.listen[0] == '[' ? strchr(cfg.listen, ']') + 1 : strrchr(cfg.listen, ':');
        snprintf(host, sizeof(host), "%.*s", (int)(colon - cfg.listen), cfg.listen);
        printf("psdbd: listening on %s://%s:%u\n", scheme, host, (unsigned)srv.port);
        fflush(stdout);
        psdbd_log("serving %s on %s://%s:%u with %u threads", cfg.data_dir, scheme, host,
                  (unsigned)srv.port, cfg.threads);
    }
    for (;;) {
        if (sigwait(&set, &sig) != 0)
            continue;
        if (sig == SIGHUP)
            continue; /* reserved for log reopening; settings need a restart */
        if (sig == SIGUSR1) {
            /* An operator's (or a test's) "write the demand counts now". */
            psdbd_farm_demand_flush(srv.farm_demand);
            if (srv.stats)
                psdbd_log("stats: %s", psdbd_stats_flush(srv.stats) == 0
                                           ? "flushed on SIGUSR1"
                                           : "flush on SIGUSR1 failed; counts kept");
            continue;
        }
        break;
    }
    psdbd_log("%s: finishing in-flight requests, then stopping", strsignal(sig));
    psdbd_http_stop(&srv);
    rc = 0;
cleanup:
    /* After the last request: nothing waits for a map any more. */
    psdbd_valuemaps_stop(srv.vmaps);
    /* After the last request: the final flush sees every count. */
    psdbd_farm_demand_stop(srv.farm_demand);
    psdbd_stats_free(srv.stats);
    if (rc == 0)
        psdbd_log("stopped");
    psdbd_index_close(srv.ix);
    psdbd_store_close(&srv.store);
    if (lock_fd >= 0)
        close(lock_fd);
    psdbd_config_free(&cfg);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc >= 2) {
        const char *cmd = argv[1];
        if (strcmp(cmd, "serve") == 0)
            return serve(argc - 1, argv + 1);
        if (strcmp(cmd, "token") == 0)
            return psdbd_cmd_token(argc - 1, argv + 1);
        if (strcmp(cmd, "key") == 0)
            return psdbd_cmd_key(argc - 1, argv + 1);
        if (strcmp(cmd, "gc") == 0)
            return psdbd_cmd_gc(argc - 1, argv + 1);
        if (strcmp(cmd, "check") == 0)
            return psdbd_cmd_check(argc - 1, argv + 1);
        if (strcmp(cmd, "job") == 0)
            return psdbd_cmd_job(argc - 1, argv + 1);
        if (strcmp(cmd, "sodb") == 0)
            return psdbd_cmd_sodb(argc - 1, argv + 1);
        if (strcmp(cmd, "backup") == 0)
            return psdbd_cmd_backup(argc - 1, argv + 1);
        if (strcmp(cmd, "restore") == 0)
            return psdbd_cmd_restore(argc - 1, argv + 1);
        if (cmd[0] != '-') {
            fprintf(stderr, "psdbd: unknown command '%s' (try psdbd --help)\n", cmd);
            return 2;
        }
    }
    return serve(argc, argv);
}
