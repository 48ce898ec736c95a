/* server_admin_test.c - the argument parsing every psdbd admin command shares (admin_parse):
 * shared options, the command's own, --help, and the refusals each command used to write itself;
 * where the index is (--index, $PSDBD_INDEX, the index settings). */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "admin_int.h"
#include "config.h"
#include "index.h"
#include "index_pg_int.h"

struct seen {
    int calls, last_val;
    char last_arg[64];
    int fail_on; /* an option val whose handler refuses it */
};

static int on_opt(int val, const char *arg, void *ctx)
{
    struct seen *s = ctx;
    s->calls++;
    s->last_val = val;
    snprintf(s->last_arg, sizeof(s->last_arg), "%s", arg ? arg : "");
    return val == s->fail_on ? admin_fail("test", "refused") : 0;
}

static int usage_calls;
static void usage(void *ctx)
{
    (void)ctx;
    usage_calls++;
}

static const struct option opts[] = {{"name", required_argument, NULL, 'n'},
                                     {"dry-run", no_argument, NULL, 'r'},
                                     {NULL, 0, NULL, 0}};

static int parse(unsigned flags, struct seen *s, admin_args *a, int argc, char **argv)
{
    return admin_parse("test", argc, argv, flags, opts, on_opt, s, usage, a);
}

START_TEST(test_server_admin__parse_shared_and_own_options)
{
    char *argv[] = {"gc", "--data-dir", "/d", "--json", "--name", "x", "--dry-run", NULL};
    struct seen s = {0};
    admin_args a = {0};
    ck_assert_int_eq(parse(ADMIN_DATA_DIR | ADMIN_JSON, &s, &a, 7, argv), ADMIN_GO_ON);
    ck_assert_str_eq(a.dir, "/d");
    ck_assert_int_eq(a.json, 1);
    ck_assert_int_eq(s.calls, 2);
    ck_assert_int_eq(s.last_val, 'r');
    free(a.dir);
}
END_TEST

START_TEST(test_server_admin__parse_defaults_and_flags_off)
{
    char *argv[] = {"check", NULL};
    char *argv_dir[] = {"backup", "--data-dir", "/d", NULL};
    struct seen s = {0};
    admin_args a = {0};
    /* With ADMIN_DATA_DIR the default data directory stands in for a missing --data-dir. */
    ck_assert_int_eq(parse(ADMIN_DATA_DIR, &s, &a, 1, argv), ADMIN_GO_ON);
    ck_assert_ptr_nonnull(a.dir);
    ck_assert_int_eq(a.json, 0);
    free(a.dir);
    /* Without the flags, --data-dir and --json are not options of the command. */
    ck_assert_int_eq(parse(0, &s, &a, 3, argv_dir), 1);
    ck_assert_ptr_null(a.dir);
}
END_TEST

START_TEST(test_server_admin__index_option_and_PSDBD_INDEX_default)
{
    char *with[] = {"gc", "--index", "postgresql://u@h/db", NULL};
    char *without[] = {"gc", NULL};
    struct seen s = {0};
    admin_args a = {0};
    unsetenv("PSDBD_INDEX");
    ck_assert_int_eq(parse(ADMIN_DATA_DIR, &s, &a, 1, without), ADMIN_GO_ON);
    ck_assert_ptr_null(a.index); /* DIR/index.sqlite */
    admin_args_free(&a);
    setenv("PSDBD_INDEX", "postgresql://env@h/db", 1);
    ck_assert_int_eq(parse(ADMIN_DATA_DIR, &s, &a, 1, without), ADMIN_GO_ON);
    ck_assert_str_eq(a.index, "postgresql://env@h/db");
    admin_args_free(&a);
    ck_assert_int_eq(parse(ADMIN_DATA_DIR, &s, &a, 3, with), ADMIN_GO_ON);
    ck_assert_str_eq(a.index, "postgresql://u@h/db"); /* the flag wins */
    admin_args_free(&a);
    /* A command without a data directory (backup, restore) has no --index either. */
    ck_assert_int_eq(parse(0, &s, &a, 3, with), 1);
    ck_assert_ptr_null(a.index);
    unsetenv("PSDBD_INDEX");
}
END_TEST

START_TEST(test_server_admin__index_setting_must_be_a_postgresql_url)
{
    psdbd_config cfg;
    char err[256];
    psdbd_config_defaults(&cfg);
    ck_assert_int_eq(psdbd_index_is_url("postgresql://u@h/db"), 1);
    ck_assert_int_eq(psdbd_index_is_url("postgres://u@h/db"), 1);
    ck_assert_int_eq(psdbd_index_is_url("/var/lib/psdbd/index.sqlite"), 0);
    ck_assert_int_eq(psdbd_index_is_url("mysql://u@h/db"), 0);
    ck_assert_int_eq(psdbd_config_set(&cfg, "index", "sqlite:///x", err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "not a postgresql://"));
    ck_assert_int_eq(psdbd_config_set(&cfg, "index", "postgresql://u@h/db", err, sizeof(err)), 0);
    ck_assert_str_eq(cfg.index, "postgresql://u@h/db");
    ck_assert_int_eq(psdbd_config_set(&cfg, "index-pool", "0", err, sizeof(err)), -1);
    ck_assert_int_eq(psdbd_config_set(&cfg, "index-pool", "32", err, sizeof(err)), 0);
    ck_assert_int_eq(cfg.index_pool, 32);
    ck_assert_int_eq(psdbd_config_set(&cfg, "index-statement-timeout", "0", err, sizeof(err)), 0);
    ck_assert_int_eq(cfg.index_statement_timeout, 0);
    psdbd_config_free(&cfg);
}
END_TEST

START_TEST(test_server_admin__index_pool_follows_threads_unless_set)
{
    /* Unset, the pool is a connection per worker thread and two for psdbd's own threads, at
     * least the default; set, it is what was set, below threads too. */
    psdbd_config cfg;
    char err[256];
    psdbd_config_defaults(&cfg);
    ck_assert_int_eq(psdbd_config_index_pool(&cfg), PSDBD_INDEX_PG_POOL_DEFAULT);
    ck_assert_int_eq(psdbd_config_set(&cfg, "threads", "16", err, sizeof(err)), 0);
    ck_assert_int_eq(psdbd_config_index_pool(&cfg), 18);
    ck_assert_int_eq(psdbd_config_set(&cfg, "threads", "1024", err, sizeof(err)), 0);
    ck_assert_int_eq(psdbd_config_index_pool(&cfg), 1024);
    ck_assert_int_eq(psdbd_config_set(&cfg, "index-pool", "4", err, sizeof(err)), 0);
    ck_assert_int_eq(psdbd_config_index_pool(&cfg), 4);
    psdbd_config_free(&cfg);
}
END_TEST

START_TEST(test_server_admin__pg_connect_failure_names_the_database_without_its_password)
{
    psdbd_index *ix = NULL;
    char err[512];
    /* Nothing listens on this socket directory: the message names the URL, never the password. */
    ck_assert_int_eq(psdbd_index_connect("postgresql://u:s3cret@/db?host=/nonexistent-psdb-dir", 1,
                                         1000, 1, &ix, err, sizeof(err)),
                     -1);
    ck_assert_ptr_null(ix);
    ck_assert_ptr_nonnull(strstr(err, "connect to postgresql://u@/db?host=/nonexistent-psdb-dir"));
    ck_assert_ptr_null(strstr(err, "s3cret"));
}
END_TEST

START_TEST(test_server_admin__index_option_never_meets_a_commands_own_letter)
{
    /* token create's --expires-in has val 'i': --index must be a shared option of its own. */
    static const struct option own[] = {{"expires-in", required_argument, NULL, 'i'},
                                        {NULL, 0, NULL, 0}};
    char *argv[] = {"token", "--expires-in", "5", "--index", "postgresql://u@h/db", NULL};
    struct seen s = {0};
    admin_args a = {0};
    unsetenv("PSDBD_INDEX");
    ck_assert_int_eq(admin_parse("test", 5, argv, ADMIN_DATA_DIR, own, on_opt, &s, usage, &a),
                     ADMIN_GO_ON);
    ck_assert_int_eq(s.calls, 1);
    ck_assert_int_eq(s.last_val, 'i');
    ck_assert_str_eq(s.last_arg, "5");
    ck_assert_str_eq(a.index, "postgresql://u@h/db");
    admin_args_free(&a);
}
END_TEST

START_TEST(test_server_admin__pg_int_reads_every_bigint)
{
    /* The biased u64 columns use the whole signed range: both ends must come back exactly. */
    ck_assert(psdbd__pg_int("-9223372036854775808") == INT64_MIN);
    ck_assert(psdbd__pg_int("9223372036854775807") == INT64_MAX);
    ck_assert(psdbd__pg_int("-1") == -1);
    ck_assert(psdbd__pg_int("0") == 0);
    ck_assert(psdbd__pg_int("42") == 42);
    ck_assert(psdbd__pg_int("") == 0); /* NULL */
    ck_assert(psdbd__pg_int("9223372036854775808") == 0);
    ck_assert(psdbd__pg_int("-9223372036854775809") == 0);
    ck_assert(psdbd__pg_int("12x") == 0);
    ck_assert(psdbd__pg_int("--1") == 0);
}
END_TEST

START_TEST(test_server_admin__parse_refuses_operands_and_bad_options)
{
    char *extra[] = {"gc", "--dry-run", "stray", NULL};
    char *unknown[] = {"gc", "--bogus", NULL};
    char *missing[] = {"gc", "--name", NULL};
    char *refused[] = {"gc", "--name", "x", NULL};
    struct seen s = {0};
    admin_args a = {0};
    ck_assert_int_eq(parse(0, &s, &a, 3, extra), 1);
    ck_assert_int_eq(parse(0, &s, &a, 2, unknown), 1);
    ck_assert_int_eq(parse(0, &s, &a, 2, missing), 1);
    s.fail_on = 'n';
    ck_assert_int_eq(parse(0, &s, &a, 3, refused), 1);
    ck_assert_str_eq(s.last_arg, "x");
}
END_TEST

START_TEST(test_server_admin__parse_help_succeeds_without_going_on)
{
    char *argv[] = {"gc", "--help", "stray", NULL};
    char *shortv[] = {"gc", "-h", NULL};
    struct seen s = {0};
    admin_args a = {0};
    usage_calls = 0;
    /* --help wins over what follows it and is the command's success. */
    ck_assert_int_eq(parse(ADMIN_DATA_DIR, &s, &a, 3, argv), 0);
    free(a.dir);
    ck_assert_int_eq(parse(0, &s, &a, 2, shortv), 0);
    ck_assert_int_eq(usage_calls, 2);
    ck_assert_int_eq(s.calls, 0);
}
END_TEST

/* `psdbd job add` checks its arguments before it opens the data directory: each bad one is
 * refused (1) and nothing is created; --help succeeds; a verb other than add is refused. */
START_TEST(test_server_admin__job_add_refuses_bad_arguments_before_opening_anything)
{
    char *dir = tu_mkdtemp(), *data = tu_path(dir, "data");
    char *bad[][12] = {
        {"job", "add", "--data-dir", data, "--app-version", "1", "--family", "f", "--abi", "1"},
        {"job", "add", "--data-dir", data, "--app", "G", "--app-version", "x.y", "--family", "f",
         "--abi", "1"},
        {"job", "add", "--data-dir", data, "--app", "G", "--app-version", "1", "--family", "f",
         "--abi", "-3"},
        {"job", "add", "--data-dir", data, "--app", "G", "--app-version", "1", "--family",
         "f\u202e", "--abi", "1"},
        {"job", "add", "--data-dir", data, "--app", "", "--app-version", "1", "--family", "f",
         "--abi", "1"},
    };
    char *bad_max[] = {"job",           "add", "--data-dir", data, "--app", "G",
                       "--app-version", "1",   "--family",   "f",  "--abi", "5",
                       "--abi-max",     "4",   NULL};
    char *help[] = {"job", "add", "--help", NULL};
    char *top_help[] = {"job", "--help", NULL};
    char *verb[] = {"job", "list", NULL};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int argc = 0;
        while (argc < 12 && bad[i][argc])
            argc++;
        ck_assert_msg(psdbd_cmd_job(argc, bad[i]) == 1, "case %zu", i);
    }
    ck_assert_int_eq(psdbd_cmd_job(14, bad_max), 1);
    ck_assert_int_eq(access(data, F_OK), -1); /* refused before the data directory was opened */
    ck_assert_int_eq(psdbd_cmd_job(3, help), 0);
    ck_assert_int_eq(psdbd_cmd_job(2, top_help), 0);
    ck_assert_int_eq(psdbd_cmd_job(2, verb), 1);
    rmdir(dir);
    free(data);
    free(dir);
}
END_TEST

/* ADMIN_OPERAND: one word after the options (anywhere among them: getopt permutes) is the
 * command's operand; none leaves it NULL for the command to refuse; a second one, or one without
 * the flag, is refused. */
START_TEST(test_server_admin__parse_takes_one_operand_when_asked)
{
    char *after[] = {"retire", "--data-dir", "/d", "7", NULL};
    char *before[] = {"retire", "7", "--json", NULL};
    char *none[] = {"retire", "--json", NULL};
    char *two[] = {"retire", "7", "8", NULL};
    struct seen s = {0};
    admin_args a = {0};
    ck_assert_int_eq(parse(ADMIN_DATA_DIR | ADMIN_OPERAND, &s, &a, 4, after), ADMIN_GO_ON);
    ck_assert_str_eq(a.operand, "7");
    ck_assert_str_eq(a.dir, "/d");
    admin_args_free(&a);
    ck_assert_int_eq(parse(ADMIN_JSON | ADMIN_OPERAND, &s, &a, 3, before), ADMIN_GO_ON);
    ck_assert_str_eq(a.operand, "7");
    ck_assert_int_eq(a.json, 1);
    ck_assert_int_eq(parse(ADMIN_JSON | ADMIN_OPERAND, &s, &a, 2, none), ADMIN_GO_ON);
    ck_assert_ptr_null(a.operand);
    ck_assert_int_eq(parse(ADMIN_OPERAND, &s, &a, 3, two), 1);
    ck_assert_int_eq(parse(0, &s, &a, 3, before), 1);
    ck_assert_ptr_null(a.operand);
}
END_TEST

/* `psdbd sodb list|retire` check their arguments before they open the data directory: a
 * missing, non-numeric, zero, negative or too large ID, two IDs, --app-version without --app, an
 * empty or bad --app, an unknown verb are refused (1) and nothing is created; --help succeeds. */
START_TEST(test_server_admin__sodb_refuses_bad_arguments_before_opening_anything)
{
    char *dir = tu_mkdtemp(), *data = tu_path(dir, "data");
    char *bad[][8] = {
        {"sodb", "retire", "--data-dir", data},
        {"sodb", "retire", "--data-dir", data, "x"},
        {"sodb", "retire", "--data-dir", data, "0"},
        {"sodb", "retire", "--data-dir", data, "--", "-3"},
        {"sodb", "retire", "--data-dir", data, "9223372036854775808"},
        {"sodb", "retire", "--data-dir", data, "1", "2"},
        {"sodb", "retire", "--data-dir", data, "1x"},
        {"sodb", "list", "--data-dir", data, "--app-version", "1"},
        {"sodb", "list", "--data-dir", data, "--app", ""},
        {"sodb", "list", "--data-dir", data, "--app", "G\u202e"},
        {"sodb", "list", "--data-dir", data, "--app", "G", "--app-version", "x.y"},
        {"sodb", "list", "--data-dir", data, "stray"},
        {"sodb", "drop", "--data-dir", data},
    };
    char *help[] = {"sodb", "retire", "--help", NULL};
    char *list_help[] = {"sodb", "list", "--help", NULL};
    char *top_help[] = {"sodb", "--help", NULL};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int argc = 0;
        while (argc < 8 && bad[i][argc])
            argc++;
        ck_assert_msg(psdbd_cmd_sodb(argc, bad[i]) == 1, "case %zu", i);
    }
    ck_assert_int_eq(access(data, F_OK), -1); /* refused before the data directory was opened */
    ck_assert_int_eq(psdbd_cmd_sodb(3, help), 0);
    ck_assert_int_eq(psdbd_cmd_sodb(3, list_help), 0);
    ck_assert_int_eq(psdbd_cmd_sodb(2, top_help), 0);
    rmdir(dir);
    free(data);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("server_admin");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, test_server_admin__parse_shared_and_own_options);
    tcase_add_test(tc, test_server_admin__parse_defaults_and_flags_off);
    tcase_add_test(tc, test_server_admin__parse_refuses_operands_and_bad_options);
    tcase_add_test(tc, test_server_admin__index_option_and_PSDBD_INDEX_default);
    tcase_add_test(tc, test_server_admin__pg_int_reads_every_bigint);
    tcase_add_test(tc, test_server_admin__index_option_never_meets_a_commands_own_letter);
    tcase_add_test(tc, test_server_admin__index_setting_must_be_a_postgresql_url);
    tcase_add_test(tc, test_server_admin__index_pool_follows_threads_unless_set);
    tcase_add_test(tc,
                   test_server_admin__pg_connect_failure_names_the_database_without_its_password);
    tcase_add_test(tc, test_server_admin__parse_help_succeeds_without_going_on);
    tcase_add_test(tc, test_server_admin__job_add_refuses_bad_arguments_before_opening_anything);
    tcase_add_test(tc, test_server_admin__parse_takes_one_operand_when_asked);
    tcase_add_test(tc, test_server_admin__sodb_refuses_bad_arguments_before_opening_anything);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
