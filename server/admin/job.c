/* job.c - `psdbd job add|requeue`: queues a compile farm job for an application version's SODB,
 * as POST /v1/jobs does, or queues a held job again, for an operator on the data directory
 * (schema/HTTP.md, Farm). */
#include "admin_int.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common.h"

struct job_opts {
    const char *app, *family;
    const char *app_version, *abi, *abi_max, *profile; /* as given, parsed after the options */
};

static void job_usage(void *ctx)
{
    (void)ctx;
    printf("usage: psdbd job add --data-dir DIR [--index URL] --app NAME --app-version V\n"
           "                     --family FAMILY --abi N [--abi-max M] [--profile-version V]\n"
           "                     [--json]\n"
           "       psdbd job requeue --data-dir DIR [--index URL] [--json] ID\n\n"
           "add: queues the compile farm job of the newest published SODB of NAME at version V\n"
           "for the adapter family and the ABI range N..M (default M = N), as POST /v1/jobs\n"
           "does; a job of that cell that exists is left as it is. Prints the job's id (--json:\n"
           "the job, schema/HTTP.md, Farm). Refused when that version has no published SODB.\n"
           "requeue: queues held job ID again (held: it failed job-max-attempts times; psdb jobs\n"
           "--state held lists them with their last error), its attempts at 0 and its error\n"
           "cleared, for the next worker of its target to claim. Prints what it requeued (--json:\n"
           "the job). Refused: an ID that is not a positive number, no job with that ID, a job\n"
           "that is not held, one held because its SODB is retired.\n");
}

static int job_option(int val, const char *arg, void *ctx)
{
    struct job_opts *o = ctx;
    switch (val) {
    case 'a':
        o->app = arg;
        break;
    case 'v':
        o->app_version = arg;
        break;
    case 'f':
        o->family = arg;
        break;
    case 'n':
        o->abi = arg;
        break;
    case 'm':
        o->abi_max = arg;
        break;
    case 'p':
        o->profile = arg;
        break;
    default:
        assert(0 && "an option job add does not declare");
        return 1;
    }
    return 0;
}

/* Parses o's texts into k (whose names point into o). 0, or 1 after a message. */
static int job_key(const struct job_opts *o, psdbd_job_key *k)
{
    int rc = 1;
    if (!o->app || !o->app_version || !o->family || !o->abi)
        admin_fail("job add", "--app, --app-version, --family and --abi are required (see --help)");
    else if (!*o->app || !*o->family)
        admin_fail("job add", "--app and --family must not be empty");
    else if (admin_bad_text("job add", "--app", o->app) ||
             admin_bad_text("job add", "--family", o->family)) {
        /* admin_bad_text said why */
    } else if (psdb__parse_version(o->app_version, &k->app_version) != 0)
        admin_fail("job add", "bad --app-version '%s' (a.b.c.d or a number)", o->app_version);
    else if (psdb__parse_u64(o->abi, &k->abi_min) != 0 || k->abi_min > INT64_MAX)
        admin_fail("job add", "bad --abi '%s'", o->abi);
    else if (o->abi_max && (psdb__parse_u64(o->abi_max, &k->abi_max) != 0 ||
                            k->abi_max > INT64_MAX || k->abi_max < k->abi_min))
        admin_fail("job add", "bad --abi-max '%s' (a number, at least --abi)", o->abi_max);
    else if (o->profile && psdb__parse_version(o->profile, &k->profile_version) != 0)
        admin_fail("job add", "bad --profile-version '%s' (a.b.c.d or a number)", o->profile);
    else {
        k->app = o->app;
        k->family = o->family;
        if (!o->abi_max)
            k->abi_max = k->abi_min;
        rc = 0;
    }
    return rc;
}

static int job_add(int argc, char **argv)
{
    static const struct option opts[] = {{"app", required_argument, NULL, 'a'},
                                         {"app-version", required_argument, NULL, 'v'},
                                         {"family", required_argument, NULL, 'f'},
                                         {"abi", required_argument, NULL, 'n'},
                                         {"abi-max", required_argument, NULL, 'm'},
                                         {"profile-version", required_argument, NULL, 'p'},
                                         {NULL, 0, NULL, 0}};
    struct job_opts o = {0};
    psdbd_job_key k = {0};
    admin_args a = {0};
    psdbd_store store = {0};
    psdbd_index *ix = NULL;
    json_t *job = NULL;
    int created = 0, rc;
    if ((rc = admin_parse("job add", argc, argv, ADMIN_DATA_DIR | ADMIN_JSON, opts, job_option, &o,
                          job_usage, &a)) != ADMIN_GO_ON)
        goto cleanup;
    rc = 1;
    if (job_key(&o, &k) != 0 || admin_open_data("job add", &a, 0, &store, &ix) != 0)
        goto cleanup;
    switch (psdbd_index_job_demand(ix, &k, 0, NULL, &created, &job)) {
    case PSDBD_OK:
        break;
    case PSDBD_NOT_FOUND:
        rc = admin_fail("job add", "%s %s has no published SODB (publish one: POST /v1/sodbs)",
                        o.app, o.app_version);
        goto cleanup;
    default:
        rc = admin_fail("job add", "the index cannot be written");
        goto cleanup;
    }
    if (a.json) {
        json_object_set_new(job, "created", json_boolean(created));
        json_dumpf(job, stdout, JSON_COMPACT);
        fputc('\n', stdout);
    } else {
        if (!created)
            fprintf(stderr, "psdbd job add: job %lld of this cell exists (%s); left as it is\n",
                    (long long)json_integer_value(json_object_get(job, "id")),
                    json_string_value(json_object_get(job, "state")));
        printf("%lld\n", (long long)json_integer_value(json_object_get(job, "id")));
    }
    rc = fflush(stdout) == 0 ? 0 : 1;
cleanup:
    json_decref(job);
    psdbd_index_close(ix);
    psdbd_store_close(&store);
    admin_args_free(&a);
    return rc;
}

/* A job id: a positive decimal number that fits the index's integers. 0, or 1 after a message. */
static int parse_job_id(const char *text, int64_t *id)
{
    uint64_t v = 0;
    if (!text)
        return admin_fail("job requeue", "the job's ID is required (psdb jobs --state held "
                                         "lists the held ones)");
    if (!*text || strlen(text) > 19 || text[strspn(text, "0123456789")] != '\0' ||
        psdb__parse_u64(text, &v) != 0 || v == 0 || v > INT64_MAX)
        return admin_fail("job requeue", "bad job ID '%s' (a positive decimal number)", text);
    *id = (int64_t)v;
    return 0;
}

static int job_requeue(int argc, char **argv)
{
    admin_args a = {0};
    psdbd_store store = {0};
    psdbd_index *ix = NULL;
    json_t *job = NULL;
    const char *state = NULL;
    int64_t id = 0;
    psdbd_rc irc;
    int rc;
    if ((rc = admin_parse("job requeue", argc, argv, ADMIN_DATA_DIR | ADMIN_JSON | ADMIN_OPERAND,
                          NULL, NULL, NULL, job_usage, &a)) != ADMIN_GO_ON)
        goto cleanup;
    rc = 1;
    if (parse_job_id(a.operand, &id) != 0 ||
        admin_open_data("job requeue", &a, 0, &store, &ix) != 0)
        goto cleanup;
    irc = psdbd_index_job_requeue(ix, id, &job);
    state = json_string_value(json_object_get(job, "state"));
    switch (irc) {
    case PSDBD_OK:
        break;
    case PSDBD_NOT_FOUND:
        admin_fail("job requeue", "no job with ID %lld (psdb jobs lists them)", (long long)id);
        goto cleanup;
    case PSDBD_CONFLICT:
        if (state && strcmp(state, "held") == 0)
            admin_fail("job requeue",
                       "job %lld is held because its SODB is retired; publish a new SODB of "
                       "the version (its misses make a new job)",
                       (long long)id);
        else
            admin_fail("job requeue", "job %lld is %s, not held; only a held job is requeued",
                       (long long)id, state ? state : "in an unknown state");
        goto cleanup;
    default:
        admin_fail("job requeue", "index: cannot requeue job %lld (the log above says why)",
                   (long long)id);
        goto cleanup;
    }
    if (a.json) {
        json_dumpf(job, stdout, JSON_COMPACT);
        fputc('\n', stdout);
    } else {
        const json_t *app = json_object_get(job, "app"), *t = json_object_get(job, "target");
        printf("requeued job %lld (%s %s, %s:%lld-%lld)\n", (long long)id,
               json_string_value(json_object_get(app, "name")),
               json_string_value(json_object_get(app, "version")),
               json_string_value(json_object_get(t, "family")),
               (long long)json_integer_value(json_object_get(t, "abi_min")),
               (long long)json_integer_value(json_object_get(t, "abi_max")));
    }
    rc = fflush(stdout) == 0 ? 0 : 1;
cleanup:
    json_decref(job);
    psdbd_index_close(ix);
    psdbd_store_close(&store);
    admin_args_free(&a);
    return rc;
}

int psdbd_cmd_job(int argc, char **argv)
{
    static const admin_verb verbs[] = {{"add", job_add}, {"requeue", job_requeue}};
    return admin_verb_command("job", verbs, sizeof(verbs) / sizeof(verbs[0]), job_usage, argc,
                              argv);
}
