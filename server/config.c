/* config.c - psdbd settings: defaults, the key = value config file, command-line flags. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "index.h"
#include "stats.h"

char *psdbd_default_data_dir(void)
{
    const char *env = getenv("PSDBD_DATA_DIR");
    if (env && *env)
        return xstrdup(env);
    env = getenv("XDG_DATA_HOME");
    if (env && *env == '/')
        return xasprintf("%s/psdbd", env);
    env = getenv("HOME");
    if (env && *env == '/')
        return xasprintf("%s/.local/share/psdbd", env);
    return xstrdup("./psdbd-data");
}

char *psdbd_default_index(void)
{
    const char *env = getenv("PSDBD_INDEX");
    return env && *env ? xstrdup(env) : NULL;
}

void psdbd_config_defaults(psdbd_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->listen = xstrdup("127.0.0.1:8470");
    cfg->data_dir = psdbd_default_data_dir();
    cfg->threads = 4;
    cfg->max_upload = 8ull << 30;
    cfg->max_connections = 1024;
    cfg->timeout = 60;
    cfg->request_timeout = 30;
    cfg->upload_min_rate = 64 * 1024;
    cfg->shutdown_timeout = 30;
    cfg->connection_memory = 8 * 1024;
    cfg->upload_connection_memory = 64 * 1024;
    cfg->log_requests = 1;
    cfg->stats = 1;
    cfg->stats_flush_interval = 60;
    cfg->stats_retention_days = 90;
    cfg->stats_max_keys = 100000;
    cfg->stats_top_apps = 10;
    cfg->stats_max_names = PSDBD_STATS_MAX_NAMES_DEFAULT;
    cfg->stats_max_day_bytes = PSDBD_STATS_MAX_DAY_BYTES_DEFAULT;
    cfg->stats_max_memory = PSDBD_STATS_MAX_MEMORY_DEFAULT;
    cfg->index = psdbd_default_index();
    cfg->index_pool = 0; /* by threads: psdbd_config_index_pool */
    cfg->index_statement_timeout = PSDBD_INDEX_PG_STATEMENT_TIMEOUT_MS_DEFAULT;
    cfg->job_max_attempts = 3;
    cfg->job_max_queued_per_family = 8;
    cfg->job_max_queued_per_sodb = 64;
}

unsigned psdbd_config_index_pool(const psdbd_config *cfg)
{
    unsigned by_threads = cfg->threads > 1022 ? 1024 : cfg->threads + 2;
    if (cfg->index_pool)
        return cfg->index_pool;
    return by_threads > PSDBD_INDEX_PG_POOL_DEFAULT ? by_threads : PSDBD_INDEX_PG_POOL_DEFAULT;
}

void psdbd_config_free(psdbd_config *cfg)
{
    if (!cfg)
        return;
    free(cfg->listen);
    free(cfg->data_dir);
    free(cfg->tls_cert);
    free(cfg->tls_key);
    free(cfg->index);
    memset(cfg, 0, sizeof(*cfg));
}

/* A connection's memory pool: libmicrohttpd needs a few KiB for the smallest request and its
 * answer's header; 16 MiB is far past any use. */
static int set_pool_size(unsigned *dst, const char *v)
{
    uint64_t size = 0;
    if (psdbd_parse_size(v, &size) != 0 || size < 4096 || size > (16u << 20))
        return -1;
    *dst = (unsigned)size;
    return 0;
}

static int set_uint(unsigned *dst, const char *v, uint64_t min, uint64_t max)
{
    uint64_t x = 0;
    if (psdb__parse_u64(v, &x) != 0 || x < min || x > max)
        return -1;
    *dst = (unsigned)x;
    return 0;
}

/* A size with an optional K, M, G or T suffix, within [min, max]. */
static int set_size(uint64_t *dst, const char *v, uint64_t min, uint64_t max)
{
    uint64_t x = 0;
    if (psdbd_parse_size(v, &x) != 0 || x < min || x > max)
        return -1;
    *dst = x;
    return 0;
}

static void set_str(char **dst, const char *v)
{
    free(*dst);
    *dst = xstrdup(v);
}

int psdbd_config_set(psdbd_config *cfg, const char *key, const char *value, char *err,
                     size_t err_size)
{
    int rc = 0;
    uint64_t size = 0;
    if (!value) {
        snprintf(err, err_size, "%s: missing value", key);
        return -1;
    }
    if (strcmp(key, "listen") == 0)
        set_str(&cfg->listen, value);
    else if (strcmp(key, "data-dir") == 0)
        set_str(&cfg->data_dir, value);
    else if (strcmp(key, "index") == 0) {
        if (*value && !psdbd_index_is_url(value)) {
            snprintf(err, err_size, "index: '%s' is not a postgresql:// or postgres:// URL", value);
            return -1;
        }
        set_str(&cfg->index, value);
    } else if (strcmp(key, "index-pool") == 0)
        rc = set_uint(&cfg->index_pool, value, 1, 1024);
    else if (strcmp(key, "index-statement-timeout") == 0)
        rc = set_uint(&cfg->index_statement_timeout, value, 0, 3600 * 1000);
    else if (strcmp(key, "job-max-attempts") == 0 || strcmp(key, "job_max_attempts") == 0)
        rc = set_uint(&cfg->job_max_attempts, value, 1, 1000);
    else if (strcmp(key, "job-max-queued-per-family") == 0)
        rc = set_uint(&cfg->job_max_queued_per_family, value, 0, 1000000);
    else if (strcmp(key, "job-max-queued-per-sodb") == 0)
        rc = set_uint(&cfg->job_max_queued_per_sodb, value, 0, 1000000);
    else if (strcmp(key, "tls-cert") == 0)
        set_str(&cfg->tls_cert, value);
    else if (strcmp(key, "tls-key") == 0)
        set_str(&cfg->tls_key, value);
    else if (strcmp(key, "threads") == 0)
        rc = set_uint(&cfg->threads, value, 1, 1024);
    else if (strcmp(key, "max-connections") == 0)
        rc = set_uint(&cfg->max_connections, value, 1, 1000000);
    else if (strcmp(key, "max-connections-per-ip") == 0)
        rc = set_uint(&cfg->max_connections_per_ip, value, 0, 1000000);
    else if (strcmp(key, "timeout") == 0)
        rc = set_uint(&cfg->timeout, value, 0, 86400);
    else if (strcmp(key, "request-timeout") == 0)
        rc = set_uint(&cfg->request_timeout, value, 0, 86400);
    else if (strcmp(key, "upload-min-rate") == 0)
        rc = psdbd_parse_size(value, &cfg->upload_min_rate);
    else if (strcmp(key, "shutdown-timeout") == 0)
        rc = set_uint(&cfg->shutdown_timeout, value, 0, 86400);
    else if (strcmp(key, "connection-memory") == 0)
        rc = set_pool_size(&cfg->connection_memory, value);
    else if (strcmp(key, "upload-connection-memory") == 0)
        rc = set_pool_size(&cfg->upload_connection_memory, value);
    else if (strcmp(key, "max-upload") == 0) {
        rc = psdbd_parse_size(value, &size);
        if (rc == 0 && (size == 0 || size > INT64_MAX))
            rc = -1;
        if (rc == 0)
            cfg->max_upload = size;
    } else if (strcmp(key, "readers-need-token") == 0)
        rc = psdbd_parse_bool(value, &cfg->readers_need_token);
    else if (strcmp(key, "metrics-need-token") == 0)
        rc = psdbd_parse_bool(value, &cfg->metrics_need_token);
    else if (strcmp(key, "log-requests") == 0)
        rc = psdbd_parse_bool(value, &cfg->log_requests);
    else if (strcmp(key, "stats") == 0)
        rc = psdbd_parse_bool(value, &cfg->stats);
    else if (strcmp(key, "stats-flush-interval") == 0)
        rc = set_uint(&cfg->stats_flush_interval, value, 1, 86400);
    else if (strcmp(key, "stats-retention-days") == 0)
        rc = set_uint(&cfg->stats_retention_days, value, 1, 36500);
    else if (strcmp(key, "stats-max-keys") == 0)
        rc = set_uint(&cfg->stats_max_keys, value, 1, 100000000);
    else if (strcmp(key, "stats-top-apps") == 0)
        rc = set_uint(&cfg->stats_top_apps, value, 0, 1000);
    else if (strcmp(key, "stats-max-names") == 0)
        rc = set_uint(&cfg->stats_max_names, value, 1, 10000000);
    else if (strcmp(key, "stats-max-day-bytes") == 0)
        rc = set_size(&cfg->stats_max_day_bytes, value, 4096, 64ull << 30);
    else if (strcmp(key, "stats-max-memory") == 0)
        rc = set_size(&cfg->stats_max_memory, value, 4096, 64ull << 30);
    else {
        snprintf(err, err_size, "unknown setting '%s'", key);
        return -1;
    }
    if (rc != 0)
        snprintf(err, err_size, "%s: bad value '%s'", key, value);
    return rc;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

int psdbd_config_load(psdbd_config *cfg, const char *path, char *err, size_t err_size)
{
    int rc = 0;
    char line[4096];
    unsigned lineno = 0;
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, err_size, "open %s: %s", path, strerror(errno));
        return -1;
    }
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            snprintf(err, err_size, "%s:%u: line too long", path, lineno);
            rc = -1;
            goto cleanup;
        }
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *s = trim(line);
        if (!*s)
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            snprintf(err, err_size, "%s:%u: expected 'key = value'", path, lineno);
            rc = -1;
            goto cleanup;
        }
        *eq = '\0';
        char *key = trim(s), *value = trim(eq + 1), sub[512];
        if (psdbd_config_set(cfg, key, value, sub, sizeof(sub)) != 0) {
            snprintf(err, err_size, "%s:%u: %s", path, lineno, sub);
            rc = -1;
            goto cleanup;
        }
    }
    if (ferror(f)) {
        snprintf(err, err_size, "read %s: %s", path, strerror(errno));
        rc = -1;
    }
cleanup:
    fclose(f);
    return rc;
}

void psdbd_config_usage(void)
{
    printf(
        "settings (flag --KEY VALUE, or 'KEY = VALUE' in the --config file; flags win):\n"
        "  listen ADDR:PORT            address to serve (default 127.0.0.1:8470; port 0: any\n"
        "                              free port, printed on the first stdout line)\n"
        "  data-dir DIR                index and blobs (default $PSDBD_DATA_DIR, else\n"
        "                              $XDG_DATA_HOME/psdbd, else ~/.local/share/psdbd)\n"
        "  index URL                   a PostgreSQL index shared by replicas\n"
        "                              (postgresql://USER@HOST/DB; default $PSDBD_INDEX,\n"
        "                              else DIR/index.sqlite)\n"
        "  index-pool N                PostgreSQL connections at most, 1..1024 (default\n"
        "                              threads + 2, at least 8)\n"
        "  index-statement-timeout MS  a PostgreSQL statement's limit, kept by the server and\n"
        "                              by psdbd (a frozen database answers 503 within it\n"
        "                              + 1 s), 0 none (default 10000)\n"
        "  threads N                   worker threads (default 4); as many again take the\n"
        "                              connections that begin with a POST when\n"
        "                              upload-connection-memory differs\n"
        "  max-upload SIZE             largest PSDB accepted, K/M/G/T suffixes (default 8G)\n"
        "  max-connections N           concurrent connections; more wait to be accepted\n"
        "                              (default 1024)\n"
        "  max-connections-per-ip N    per client address, 0 unlimited (default 0); over\n"
        "                              it new connections from that address are closed\n"
        "  timeout SECONDS             idle connection timeout, 0 none (default 60)\n"
        "  request-timeout SECONDS     time to send a request's line, headers and body,\n"
        "                              from connect or the previous response; 0 none\n"
        "                              (default 30)\n"
        "  upload-min-rate SIZE        a publish body gets its length at this rate on top\n"
        "                              of request-timeout, bytes/s, 0 unlimited (default 64K)\n"
        "  shutdown-timeout SECONDS    grace for in-flight requests on SIGTERM (default 30)\n"
        "  connection-memory SIZE      per-connection buffer, 4K..16M: bounds the request\n"
        "                              headers; what a download holds (default 8K)\n"
        "  upload-connection-memory SIZE  the same for connections whose first request is\n"
        "                              a POST (a publish), and the size of its body's\n"
        "                              chunks (default 64K)\n"
        "  readers-need-token BOOL     reader endpoints need a token (default false)\n"
        "  metrics-need-token BOOL     /metrics needs a token (default false)\n"
        "  log-requests BOOL           one line per request on stderr (default true)\n"
        "  tls-cert FILE, tls-key FILE serve HTTPS natively (PEM; needs GnuTLS in\n"
        "                              libmicrohttpd)\n"
        "  stats BOOL                  record demand (resolves, misses, downloads) per day\n"
        "                              for the dashboard and /v1/stats/ (default true)\n"
        "  stats-flush-interval SECONDS  write the demand counts this often; a crash loses\n"
        "                              at most this much (default 60; SIGUSR1: now)\n"
        "  stats-retention-days N      days of demand statistics kept (default 90)\n"
        "  stats-max-keys N            distinct counters held between two flushes; past it\n"
        "                              new ones are summed in the day's aggregate\n"
        "                              (default 100000)\n"
        "  stats-max-memory SIZE       bytes of counters held between two flushes; past it\n"
        "                              the same (default 8M)\n"
        "  stats-max-names N           distinct application and family names stored per day;\n"
        "                              new keys past it go to the day's aggregate (default 1000)\n"
        "  stats-max-day-bytes SIZE    bytes of new keys stored per day (twice their names\n"
        "                              plus 128 each); past it the same (default 4M)\n"
        "  stats-top-apps N            applications named in /metrics demand series; the\n"
        "                              rest are app=\"other\" (default 10)\n"
        "  job-max-attempts N          compile farm: claims of a job before a failure (or an\n"
        "                              expired lease) holds it (default 3; also\n"
        "                              job_max_attempts)\n"
        "  job-max-queued-per-family N compile farm: open (queued or leased) jobs resolve\n"
        "                              misses may make per SODB and adapter family; a miss\n"
        "                              past it adds to the nearest open job (default 8; 0: no\n"
        "                              bound)\n"
        "  job-max-queued-per-sodb N   the same per SODB over every family (default 64)\n");
}
