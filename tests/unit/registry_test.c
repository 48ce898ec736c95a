/* registry_test.c - shader cache registration: installers, applications, components, explorer. */
#include "testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "registry/install.h"
#include "common/buf.h"
#include "common/hash.h"

static const psdb_app_desc app_desc = {
    .exe_filename = "game.exe", .name = "Game", .version = PSDB_VERSION(1, 0, 0, 0)};

static psdb_installer *open_installer(const char *root, const char *name)
{
    psdb_installer *inst = NULL;
    psdb_installer_desc d = {.name = name, .scope = PSDB_SCOPE_USER, .root_dir = root};
    ck_assert_hr(psdb_installer_open(&d, &inst), PSDB_S_OK);
    return inst;
}

static void path_of(psdb_component *c, const char *family, char *buf, size_t size)
{
    ck_assert_hr(psdb_component_get_psdb_path(c, family, buf, size), PSDB_S_OK);
}

START_TEST(test_registry__B1_one_installer_per_name_in_process)
{
    char *root = tu_mkdtemp();
    psdb_installer *a = open_installer(root, "launcher"), *b = NULL;
    psdb_installer_desc d = {.name = "launcher", .root_dir = root};
    ck_assert_hr(psdb_installer_open(&d, &b), PSDB_E_BUSY);
    ck_assert_ptr_null(b);
    /* Another name is independent. */
    psdb_installer *c = open_installer(root, "other");
    psdb_installer_release(a);
    b = open_installer(root, "launcher");
    psdb_installer_release(b);
    psdb_installer_release(c);
    tu_rmtree(root);
    free(root);
}
END_TEST

START_TEST(test_registry__B1_one_installer_per_name_across_processes)
{
    char *root = tu_mkdtemp();
    int to_child[2], to_parent[2];
    ck_assert_int_eq(pipe(to_child), 0);
    ck_assert_int_eq(pipe(to_parent), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        psdb_installer *inst = NULL;
        psdb_installer_desc d = {.name = "launcher", .root_dir = root};
        char c = psdb_installer_open(&d, &inst) == PSDB_S_OK ? 'y' : 'n';
        if (write(to_parent[1], &c, 1) != 1)
            _exit(3);
        if (read(to_child[0], &c, 1) != 1) /* hold the installer until told */
            _exit(4);
        _exit(0); /* exit without release: the kernel drops the lock */
    }
    char c = 0;
    ck_assert_int_eq(read(to_parent[0], &c, 1), 1);
    ck_assert_int_eq(c, 'y');
    psdb_installer *inst = NULL;
    psdb_installer_desc d = {.name = "launcher", .root_dir = root};
    ck_assert_hr(psdb_installer_open(&d, &inst), PSDB_E_BUSY);
    ck_assert_int_eq(write(to_child[1], "x", 1), 1);
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_hr(psdb_installer_open(&d, &inst), PSDB_S_OK);
    psdb_installer_release(inst);
    tu_rmtree(root);
    free(root);
}
END_TEST

/* Launchers of different installer names opening one new registry at once: each open succeeds.
 * (SQLite answers BUSY without waiting while a new database is switched to WAL; the open retries.)
 */
START_TEST(test_registry__installers_open_one_new_registry_at_once)
{
    for (int round = 0; round < 60; round++) {
        char *root = tu_mkdtemp();
        pid_t pids[8];
        for (int i = 0; i < 8; i++) {
            pids[i] = fork();
            ck_assert_int_ge(pids[i], 0);
            if (pids[i] == 0) {
                char name[16];
                snprintf(name, sizeof(name), "launcher%d", i);
                psdb_installer_desc d = {.name = name, .root_dir = root};
                psdb_installer *inst = NULL;
                psdb_hr hr = psdb_installer_open(&d, &inst);
                psdb_installer_release(inst);
                _exit(hr == PSDB_S_OK ? 0 : 1);
            }
        }
        for (int i = 0; i < 8; i++) {
            int status = 0;
            ck_assert_int_eq(waitpid(pids[i], &status, 0), pids[i]);
            ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                          "round %d: installer %d could not open the new registry", round, i);
        }
        tu_rmtree(root);
        free(root);
    }
}
END_TEST

START_TEST(test_registry__B1_bad_arguments)
{
    psdb_installer *inst = NULL;
    psdb_installer_desc d = {.name = "", .root_dir = "/tmp"};
    ck_assert_hr(psdb_installer_open(&d, &inst), PSDB_E_INVALIDARG);
    d.name = NULL;
    ck_assert_hr(psdb_installer_open(&d, &inst), PSDB_E_INVALIDARG);
    d.name = "x";
    d.scope = (psdb_scope)7;
    ck_assert_hr(psdb_installer_open(&d, &inst), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_installer_open(NULL, &inst), PSDB_E_INVALIDARG);
    d.scope = PSDB_SCOPE_USER;
    ck_assert_hr(psdb_installer_open(&d, NULL), PSDB_E_INVALIDARG);
    psdb_installer_release(NULL);
    psdb_application_release(NULL);
    psdb_component_release(NULL);
    psdb_explorer_release(NULL);
}
END_TEST

START_TEST(test_registry__B1_installer_names_with_slashes_do_not_escape)
{
    char *root = tu_mkdtemp();
    psdb_installer *a = open_installer(root, "../evil/name");
    psdb_installer *b = open_installer(root, "..%2Fevil%2Fname");
    char *escaped = tu_path(root, "../evil");
    struct stat st;
    ck_assert_int_ne(stat(escaped, &st), 0);
    psdb_installer_release(a);
    psdb_installer_release(b);
    free(escaped);
    tu_rmtree(root);
    free(root);
}
END_TEST

START_TEST(test_registry__B2_application_by_exe_path)
{
    char *root = tu_mkdtemp();
    psdb_installer *inst = open_installer(root, "launcher");
    psdb_application *app = NULL, *found = NULL;
    ck_assert_hr(psdb_installer_register_application(inst, "/games/a/game", &app_desc, &app),
                 PSDB_S_OK);
    psdb_explorer *exp = NULL;
    ck_assert_hr(psdb_explorer_open(root, &exp), PSDB_S_OK);
    ck_assert_hr(psdb_explorer_get_application(exp, "/games/a/game", &found), PSDB_S_OK);
    psdb_application_release(found);
    /* The exe path is the key: another path, even with the same file name, is another app. */
    ck_assert_hr(psdb_explorer_get_application(exp, "/games/b/game", &found), PSDB_E_NOT_FOUND);
    ck_assert_ptr_null(found);
    /* Identity rules of A2 apply to the registered description. */
    psdb_app_desc bad = app_desc;
    bad.name = NULL;
    ck_assert_hr(psdb_installer_register_application(inst, "/x", &bad, &found), PSDB_E_INVALIDARG);
    bad = app_desc;
    bad.version = 0;
    ck_assert_hr(psdb_installer_register_application(inst, "/x", &bad, &found), PSDB_E_INVALIDARG);
    bad = app_desc;
    bad.engine_version = 3;
    ck_assert_hr(psdb_installer_register_application(inst, "/x", &bad, &found), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_installer_register_application(inst, "", &app_desc, &found),
                 PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_installer_register_application(inst, NULL, &app_desc, &found),
                 PSDB_E_INVALIDARG);
    psdb_explorer_release(exp);
    psdb_application_release(app);
    psdb_installer_release(inst);
    tu_rmtree(root);
    free(root);
}
END_TEST

/* Every name that enters the registry by psdb's rule for names (launchers and `psdb registry
 * list` show them): installer, application, exe filename, engine, component and family names with
 * a format or separator character are refused, psdb_error_last naming field and code point. */
START_TEST(test_registry__names_that_spoof_refused)
{
    char *root = tu_mkdtemp();
    psdb_installer *inst = NULL, *bad_inst = NULL;
    psdb_application *app = NULL, *found = NULL;
    psdb_component *comp = NULL;
    psdb_installer_desc d = {
        .name = "launcher\xe2\x80\xae", .scope = PSDB_SCOPE_USER, .root_dir = root};
    ck_assert_hr(psdb_installer_open(&d, &bad_inst), PSDB_E_INVALIDARG);
    ck_assert_ptr_nonnull(strstr(psdb_error_last(), "the installer name contains U+202E"));
    inst = open_installer(root, "launcher");
    static const struct {
        int field; /* 0 exe filename, 1 name, 2 engine */
        const char *value, *want;
    } bad[] = {
        {1, "Demo\xe2\x80\xaegnp.exe", "the application name contains U+202E"},
        {1, "Ga\xe2\x81\xa0me", "the application name contains U+2060"},
        {0, "game\xe2\x80\x8f.exe", "the exe filename contains U+200F"},
        {2, "Eng\xe1\x9a\x80ine", "the engine name contains U+1680"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        psdb_app_desc desc = app_desc;
        const char **f[3] = {&desc.exe_filename, &desc.name, &desc.engine_name};
        *f[bad[i].field] = bad[i].value;
        ck_assert_hr(psdb_installer_register_application(inst, "/x", &desc, &found),
                     PSDB_E_INVALIDARG);
        ck_assert_msg(strstr(psdb_error_last(), bad[i].want), "case %zu: %s", i, psdb_error_last());
    }
    ck_assert_hr(psdb_installer_register_application(inst, "/g", &app_desc, &app), PSDB_S_OK);
    psdb_component_psdb fam = {.adapter_family = "contoso\xe2\x80\xa9gfx9", .psdb_path = "/p"};
    ck_assert_hr(psdb_application_register_component(app, "main", NULL, 1, &fam, &comp),
                 PSDB_E_INVALIDARG);
    ck_assert_ptr_nonnull(strstr(psdb_error_last(), "the family contains U+2029"));
    fam.adapter_family = "contoso-gfx9";
    ck_assert_hr(psdb_application_register_component(app, "ma\xef\xbb\xbfin", NULL, 1, &fam, &comp),
                 PSDB_E_INVALIDARG);
    ck_assert_ptr_nonnull(strstr(psdb_error_last(), "the component name contains U+FEFF"));
    /* The internal install path (what psdb_client_install registers) applies it too. */
    psdb__install_entry e = {.family = "contoso\xe2\x80\x8bgfx9", .psdb_path = "/p", .serial = 1};
    ck_assert_hr(psdb__registry_install(inst, "/g2", &app_desc, NULL, 1, &e, 0), PSDB_E_INVALIDARG);
    psdb_app_desc spoof = app_desc;
    spoof.name = "Ga\xe2\x80\x8eme";
    e.family = "contoso-gfx9";
    ck_assert_hr(psdb__registry_install(inst, "/g2", &spoof, NULL, 1, &e, 0), PSDB_E_INVALIDARG);
    /* Other scripts and emoji are names. */
    psdb_app_desc good = app_desc;
    good.name = "Caf\xc3\xa9 \xe3\x82\xb2\xe3\x83\xbc\xe3\x83\xa0 \xf0\x9f\x8e\xae";
    ck_assert_hr(psdb_installer_register_application(inst, "/g3", &good, &found), PSDB_S_OK);
    psdb_application_release(found);
    psdb_application_release(app);
    psdb_installer_release(inst);
    tu_rmtree(root);
    free(root);
}
END_TEST

START_TEST(test_registry__B3_component_per_family_and_replace)
{
    char *root = tu_mkdtemp();
    psdb_installer *inst = open_installer(root, "launcher");
    psdb_application *app = NULL;
    psdb_component *comp = NULL, *again = NULL;
    char buf[256];
    ck_assert_hr(psdb_installer_register_application(inst, "/g", &app_desc, &app), PSDB_S_OK);
    psdb_component_psdb psdbs[] = {{"fam-a", "/p/a.psdb"}, {"fam-b", "/p/b.psdb"}};
    ck_assert_hr(psdb_application_register_component(app, PSDB_DEFAULT_COMPONENT, "/p/x.sodb", 2,
                                                     psdbs, &comp),
                 PSDB_S_OK);
    path_of(comp, "fam-a", buf, sizeof(buf));
    ck_assert_str_eq(buf, "/p/a.psdb");
    path_of(comp, "fam-b", buf, sizeof(buf));
    ck_assert_str_eq(buf, "/p/b.psdb");
    ck_assert_hr(psdb_component_get_psdb_path(comp, "fam-c", buf, sizeof(buf)), PSDB_E_NOT_FOUND);
    ck_assert_hr(psdb_component_get_psdb_path(comp, "fam-a", buf, 4), PSDB_E_MORE_DATA);
    /* Re-registering replaces all PSDBs at once. */
    psdb_component_psdb repl[] = {{"fam-c", "/p/c.psdb"}};
    ck_assert_hr(
        psdb_application_register_component(app, PSDB_DEFAULT_COMPONENT, NULL, 1, repl, &again),
        PSDB_S_OK);
    ck_assert_hr(psdb_component_get_psdb_path(comp, "fam-a", buf, sizeof(buf)), PSDB_E_NOT_FOUND);
    path_of(comp, "fam-c", buf, sizeof(buf));
    ck_assert_str_eq(buf, "/p/c.psdb");
    /* Duplicate families, empty names and paths are refused without writing anything. */
    psdb_component_psdb dup[] = {{"fam-a", "/1"}, {"fam-a", "/2"}};
    ck_assert_hr(
        psdb_application_register_component(app, PSDB_DEFAULT_COMPONENT, NULL, 2, dup, NULL),
        PSDB_E_INVALIDARG);
    path_of(comp, "fam-c", buf, sizeof(buf));
    psdb_component_psdb empty[] = {{"fam-a", ""}};
    ck_assert_hr(psdb_application_register_component(app, "x", NULL, 1, empty, NULL),
                 PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_application_register_component(app, "", NULL, 0, NULL, NULL),
                 PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_application_register_component(app, "x", NULL, 1, NULL, NULL),
                 PSDB_E_INVALIDARG);
    char longfam[PSDB_ADAPTER_FAMILY_MAX + 1];
    memset(longfam, 'f', sizeof(longfam) - 1);
    longfam[sizeof(longfam) - 1] = 0;
    psdb_component_psdb toolong[] = {{longfam, "/p"}};
    ck_assert_hr(psdb_application_register_component(app, "x", NULL, 1, toolong, NULL),
                 PSDB_E_INVALIDARG);
    psdb_component_release(again);
    psdb_component_release(comp);
    psdb_application_release(app);
    psdb_installer_release(inst);
    tu_rmtree(root);
    free(root);
}
END_TEST

START_TEST(test_registry__B4_removed_component_and_application_are_invalid)
{
    char *root = tu_mkdtemp();
    psdb_installer *inst = open_installer(root, "launcher");
    psdb_application *app = NULL, *app2 = NULL;
    psdb_component *comp = NULL, *c2 = NULL;
    char buf[64];
    psdb_component_psdb psdbs[] = {{"fam", "/p.psdb"}};
    ck_assert_hr(psdb_installer_register_application(inst, "/g", &app_desc, &app), PSDB_S_OK);
    ck_assert_hr(psdb_application_register_component(app, "c", NULL, 1, psdbs, &comp), PSDB_S_OK);
    ck_assert_hr(psdb_application_remove_component(app, comp), PSDB_S_OK);
    ck_assert_hr(psdb_component_get_psdb_path(comp, "fam", buf, sizeof(buf)), PSDB_E_NOT_FOUND);
    ck_assert_hr(psdb_application_remove_component(app, comp), PSDB_E_NOT_FOUND);
    ck_assert_hr(psdb_application_get_component(app, "c", &c2), PSDB_E_NOT_FOUND);
    /* Registering the name again is a new component: the old handle stays invalid. */
    ck_assert_hr(psdb_application_register_component(app, "c", NULL, 1, psdbs, &c2), PSDB_S_OK);
    ck_assert_hr(psdb_component_get_psdb_path(comp, "fam", buf, sizeof(buf)), PSDB_E_NOT_FOUND);
    path_of(c2, "fam", buf, sizeof(buf));
    ck_assert_hr(psdb_installer_remove_application(inst, app), PSDB_S_OK);
    ck_assert_hr(psdb_component_get_psdb_path(c2, "fam", buf, sizeof(buf)), PSDB_E_NOT_FOUND);
    ck_assert_hr(psdb_application_register_component(app, "d", NULL, 1, psdbs, NULL),
                 PSDB_E_NOT_FOUND);
    ck_assert_hr(psdb_installer_remove_application(inst, app), PSDB_E_NOT_FOUND);
    /* Same exe path again: a new registration; the removed handle stays invalid. */
    ck_assert_hr(psdb_installer_register_application(inst, "/g", &app_desc, &app2), PSDB_S_OK);
    ck_assert_hr(psdb_application_register_component(app, "d", NULL, 1, psdbs, NULL),
                 PSDB_E_NOT_FOUND);
    ck_assert_hr(psdb_application_register_component(app2, "d", NULL, 1, psdbs, NULL), PSDB_S_OK);
    /* A component of another application is refused. */
    ck_assert_hr(psdb_application_remove_component(app2, c2), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_application_remove_component(NULL, c2), PSDB_E_INVALIDARG);
    psdb_component_release(c2);
    psdb_component_release(comp);
    psdb_application_release(app2);
    psdb_application_release(app);
    psdb_installer_release(inst);
    tu_rmtree(root);
    free(root);
}
END_TEST

START_TEST(test_registry__B5_explorer_is_read_only)
{
    char *root = tu_mkdtemp();
    psdb_installer *inst = open_installer(root, "launcher");
    psdb_application *app = NULL, *view = NULL;
    psdb_component *comp = NULL, *vcomp = NULL;
    psdb_component_psdb psdbs[] = {{"fam", "/p.psdb"}};
    ck_assert_hr(psdb_installer_register_application(inst, "/g", &app_desc, &app), PSDB_S_OK);
    ck_assert_hr(psdb_application_register_component(app, "default", NULL, 1, psdbs, &comp),
                 PSDB_S_OK);
    psdb_explorer *exp = NULL;
    ck_assert_hr(psdb_explorer_open(root, &exp), PSDB_S_OK);
    ck_assert_hr(psdb_explorer_get_application(exp, "/g", &view), PSDB_S_OK);
    ck_assert_hr(psdb_application_get_component(view, "default", &vcomp), PSDB_S_OK);
    ck_assert_hr(psdb_application_register_component(view, "x", NULL, 1, psdbs, NULL),
                 PSDB_E_ACCESS);
    ck_assert_hr(psdb_application_remove_component(view, vcomp), PSDB_E_ACCESS);
    ck_assert_hr(psdb_installer_remove_application(inst, view), PSDB_E_ACCESS);
    char buf[64];
    path_of(vcomp, "fam", buf, sizeof(buf));
    ck_assert_str_eq(buf, "/p.psdb");
    /* The explorer sees later registrations as they commit. */
    psdb_component_psdb p2[] = {{"fam", "/q.psdb"}};
    ck_assert_hr(psdb_application_register_component(app, "default", NULL, 1, p2, NULL), PSDB_S_OK);
    path_of(vcomp, "fam", buf, sizeof(buf));
    ck_assert_str_eq(buf, "/q.psdb");
    /* An explorer on a root with no registry is empty and creates nothing. */
    char *empty = tu_path(root, "nothing-here");
    psdb_explorer *e2 = NULL;
    psdb_application *none = NULL;
    ck_assert_hr(psdb_explorer_open(empty, &e2), PSDB_S_OK);
    ck_assert_hr(psdb_explorer_get_application(e2, "/g", &none), PSDB_E_NOT_FOUND);
    struct stat st;
    ck_assert_int_ne(stat(empty, &st), 0);
    psdb_explorer_release(e2);
    free(empty);
    psdb_component_release(vcomp);
    psdb_component_release(comp);
    psdb_application_release(view);
    psdb_application_release(app);
    psdb_explorer_release(exp);
    psdb_installer_release(inst);
    tu_rmtree(root);
    free(root);
}
END_TEST

START_TEST(test_registry__B6_precompile_targets)
{
    psdb_adapter_desc ad[] = {
        {.vendor_id = 1,
         .family = "fam-a",
         .abi_min = 1,
         .abi_max = 5,
         .compiler_version = 7,
         .app_profile_version = PSDB_VERSION(1, 0, 0, 0)},
        {.vendor_id = 1,
         .device_id = 2,
         .family = "fam-a",
         .abi_min = 1,
         .abi_max = 5,
         .compiler_version = 7,
         .app_profile_version = PSDB_VERSION(1, 0, 0, 0)},
        {.family = "fam-b", .abi_min = 2, .abi_max = 3, .flags = PSDB_ADAPTER_FLAG_NO_ASD},
        {.family = "fam-a", .abi_min = 1, .abi_max = 9},
    };
    psdb_precompile_target t[4];
    uint32_t n = 4;
    ck_assert_hr(psdb_get_precompile_targets(ad, 4, t, &n), PSDB_S_OK);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(t[0].family, "fam-a");
    ck_assert_uint_eq(t[0].abi_max, 5);
    ck_assert_uint_eq(t[0].compiler_version, 7);
    ck_assert_uint_eq(t[0].profile_version, PSDB_VERSION(1, 0, 0, 0));
    ck_assert_uint_eq(t[1].abi_max, 9);
    n = 1;
    ck_assert_hr(psdb_get_precompile_targets(ad, 4, t, &n), PSDB_E_MORE_DATA);
    ck_assert_uint_eq(n, 2);
    n = 0;
    ck_assert_hr(psdb_get_precompile_targets(ad, 4, NULL, &n), PSDB_E_MORE_DATA);
    ck_assert_uint_eq(n, 2);
    ck_assert_hr(psdb_get_precompile_targets(ad, 4, t, NULL), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_get_precompile_targets(NULL, 1, t, &n), PSDB_E_INVALIDARG);
    psdb_adapter_desc nofam = {.abi_min = 1, .abi_max = 2};
    n = 4;
    ck_assert_hr(psdb_get_precompile_targets(&nofam, 1, t, &n), PSDB_E_INVALIDARG);
}
END_TEST

/* Each child registers components with many families; the parent reads concurrently and must
 * only ever see components with all their families (B8). */
#define B8_CHILDREN 3
#define B8_ROUNDS 15
#define B8_FAMILIES 6

START_TEST(test_registry__B8_concurrent_processes_see_whole_registrations)
{
    char *root = tu_mkdtemp();
    {
        psdb_installer *inst = open_installer(root, "setup");
        psdb_application *app = NULL;
        ck_assert_hr(psdb_installer_register_application(inst, "/g", &app_desc, &app), PSDB_S_OK);
        psdb_application_release(app);
        psdb_installer_release(inst);
    }
    pid_t pids[B8_CHILDREN];
    for (int c = 0; c < B8_CHILDREN; c++) {
        pids[c] = fork();
        ck_assert_int_ge(pids[c], 0);
        if (pids[c] == 0) {
            char name[32];
            snprintf(name, sizeof(name), "inst-%d", c);
            psdb_installer *inst = NULL;
            psdb_application *app = NULL;
            psdb_installer_desc d = {.name = name, .root_dir = root};
            if (psdb_installer_open(&d, &inst) != PSDB_S_OK ||
                psdb_installer_register_application(inst, "/g", &app_desc, &app) != PSDB_S_OK)
                _exit(2);
            for (int r = 0; r < B8_ROUNDS; r++) {
                char fam[B8_FAMILIES][16], path[B8_FAMILIES][32];
                psdb_component_psdb p[B8_FAMILIES];
                for (int f = 0; f < B8_FAMILIES; f++) {
                    snprintf(fam[f], sizeof(fam[f]), "fam-%d", f);
                    snprintf(path[f], sizeof(path[f]), "/c%d/r%d/f%d", c, r, f);
                    p[f].adapter_family = fam[f];
                    p[f].psdb_path = path[f];
                }
                if (psdb_application_register_component(app, "default", NULL, B8_FAMILIES, p,
                                                        NULL) != PSDB_S_OK)
                    _exit(3);
            }
            psdb_application_release(app);
            psdb_installer_release(inst);
            _exit(0);
        }
    }
    int torn = 0, reads = 0;
    for (int i = 0; i < 200; i++) {
        psdb_explorer *exp = NULL;
        psdb_application *app = NULL;
        psdb_component *comp = NULL;
        ck_assert_hr(psdb_explorer_open(root, &exp), PSDB_S_OK);
        ck_assert_hr(psdb_explorer_get_application(exp, "/g", &app), PSDB_S_OK);
        if (psdb_application_get_component(app, "default", &comp) == PSDB_S_OK) {
            /* All families must name the same (child, round). */
            char first[64] = "", buf[64];
            for (int f = 0; f < B8_FAMILIES; f++) {
                char fam[16];
                snprintf(fam, sizeof(fam), "fam-%d", f);
                if (psdb_component_get_psdb_path(comp, fam, buf, sizeof(buf)) != PSDB_S_OK) {
                    torn++;
                    break;
                }
                char *slash = strrchr(buf, '/');
                *slash = 0;
                /* Separate reads may straddle another writer's commit, so only presence is
                 * checked here; the snapshot test checks that one listing is never mixed. */
                if (f == 0)
                    memcpy(first, buf, strlen(buf) + 1);
            }
            reads++;
        }
        psdb_component_release(comp);
        psdb_application_release(app);
        psdb_explorer_release(exp);
    }
    for (int c = 0; c < B8_CHILDREN; c++) {
        int status = 0;
        ck_assert_int_eq(waitpid(pids[c], &status, 0), pids[c]);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d failed", c);
    }
    ck_assert_int_eq(torn, 0);
    ck_assert_int_gt(reads, 0);
    psdb_explorer *exp = NULL;
    ck_assert_hr(psdb_explorer_open(root, &exp), PSDB_S_OK);
    ck_assert_hr(psdb_explorer_foreach(exp, NULL, NULL), PSDB_E_INVALIDARG);
    psdb_explorer_release(exp);
    tu_rmtree(root);
    free(root);
}
END_TEST

struct snapshot {
    int rows;
    char prefix[64];
    int mixed;
};

static int snapshot_visit(const psdb_registry_entry *e, void *ctx)
{
    struct snapshot *s = ctx;
    if (!e->psdb_path)
        return 0;
    char buf[64];
    snprintf(buf, sizeof(buf), "%s", e->psdb_path);
    char *slash = strrchr(buf, '/');
    if (slash)
        *slash = 0;
    if (s->rows++ == 0)
        snprintf(s->prefix, sizeof(s->prefix), "%s", buf);
    else if (strcmp(s->prefix, buf) != 0)
        s->mixed = 1;
    return 0;
}

START_TEST(test_registry__B8_snapshot_listing_is_never_torn)
{
    char *root = tu_mkdtemp();
    {
        psdb_installer *inst = open_installer(root, "setup");
        psdb_application *app = NULL;
        ck_assert_hr(psdb_installer_register_application(inst, "/g", &app_desc, &app), PSDB_S_OK);
        psdb_application_release(app);
        psdb_installer_release(inst);
    }
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        psdb_installer *inst = NULL;
        psdb_application *app = NULL;
        psdb_installer_desc d = {.name = "writer", .root_dir = root};
        if (psdb_installer_open(&d, &inst) != PSDB_S_OK ||
            psdb_installer_register_application(inst, "/g", &app_desc, &app) != PSDB_S_OK)
            _exit(2);
        for (int r = 0; r < 40; r++) {
            char fam[B8_FAMILIES][16], path[B8_FAMILIES][32];
            psdb_component_psdb p[B8_FAMILIES];
            for (int f = 0; f < B8_FAMILIES; f++) {
                snprintf(fam[f], sizeof(fam[f]), "fam-%d", f);
                snprintf(path[f], sizeof(path[f]), "/r%d/f%d", r, f);
                p[f].adapter_family = fam[f];
                p[f].psdb_path = path[f];
            }
            if (psdb_application_register_component(app, "default", NULL, B8_FAMILIES, p, NULL) !=
                PSDB_S_OK)
                _exit(3);
        }
        psdb_application_release(app);
        psdb_installer_release(inst);
        _exit(0);
    }
    int status = 0, done = 0;
    while (!done) {
        done = waitpid(pid, &status, WNOHANG) == pid;
        psdb_explorer *exp = NULL;
        ck_assert_hr(psdb_explorer_open(root, &exp), PSDB_S_OK);
        struct snapshot s = {0, "", 0};
        ck_assert_hr(psdb_explorer_foreach(exp, snapshot_visit, &s), PSDB_S_OK);
        ck_assert_msg(!s.mixed, "listing mixed two registrations");
        ck_assert(s.rows == 0 || s.rows == B8_FAMILIES);
        psdb_explorer_release(exp);
    }
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    tu_rmtree(root);
    free(root);
}
END_TEST

/* A registry root that cannot be written: PSDB_E_ACCESS and nothing created. Runs the check as an
 * unprivileged user when the suite runs as root (root ignores directory permissions). */
START_TEST(test_registry__B8_read_only_root_is_refused_without_writing)
{
    char *base = tu_mkdtemp();
    char *root = tu_path(base, "ro");
    ck_assert_int_eq(mkdir(root, 0755), 0);
    ck_assert_int_eq(chmod(base, 0755), 0);
    ck_assert_int_eq(chmod(root, 0555), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
            _exit(9);
        psdb_installer *inst = NULL;
        psdb_installer_desc d = {.name = "launcher", .root_dir = root};
        psdb_hr hr = psdb_installer_open(&d, &inst);
        if (hr != PSDB_E_ACCESS)
            _exit(2);
        char *sub = NULL;
        if (asprintf(&sub, "%s/sub", root) < 0)
            _exit(5);
        d.root_dir = sub;
        hr = psdb_installer_open(&d, &inst);
        if (hr != PSDB_E_ACCESS)
            _exit(3);
        _exit(0);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d",
                  WEXITSTATUS(status));
    char *db = tu_path(root, "registry.db"), *locks = tu_path(root, "locks");
    struct stat st;
    ck_assert_int_ne(stat(db, &st), 0);
    ck_assert_int_ne(stat(locks, &st), 0);
    chmod(root, 0755);
    free(db);
    free(locks);
    free(root);
    tu_rmtree(base);
    free(base);
}
END_TEST

START_TEST(test_registry__B8_root_is_a_file_gives_io)
{
    char *base = tu_mkdtemp();
    char *file = tu_path(base, "file");
    ck_assert_int_eq(tu_write_file(file, "x", 1), 0);
    psdb_installer *inst = NULL;
    psdb_installer_desc d = {.name = "launcher", .root_dir = file};
    ck_assert_hr(psdb_installer_open(&d, &inst), PSDB_E_IO);
    free(file);
    tu_rmtree(base);
    free(base);
}
END_TEST

START_TEST(test_registry__B8_newer_schema_is_refused)
{
    char *root = tu_mkdtemp();
    psdb_installer *inst = open_installer(root, "launcher");
    psdb_installer_release(inst);
    char *cmd = NULL;
    ck_assert_int_gt(asprintf(&cmd, "sqlite3 '%s/registry.db' 'PRAGMA user_version=99'", root), 0);
    ck_assert_int_eq(tu_run(cmd, NULL), 0);
    free(cmd);
    psdb_installer_desc d = {.name = "launcher", .root_dir = root};
    ck_assert_hr(psdb_installer_open(&d, &inst), PSDB_E_UNSUPPORTED);
    psdb_explorer *exp = NULL;
    ck_assert_hr(psdb_explorer_open(root, &exp), PSDB_E_UNSUPPORTED);
    tu_rmtree(root);
    free(root);
}
END_TEST

/* The state psdb_registry_entry_check gives the only PSDB row of the registry at root. */
typedef struct one_state {
    psdb_registry_file_state state;
    psdb_hr hr;
    int rows;
} one_state;

static int check_row(const psdb_registry_entry *e, void *ctx)
{
    one_state *o = ctx;
    if (e->psdb_path) {
        o->hr = psdb_registry_entry_check(e, &o->state);
        o->rows++;
    }
    return 0;
}

static psdb_registry_file_state state_of(const char *root)
{
    psdb_explorer *exp = NULL;
    one_state o = {.state = (psdb_registry_file_state)-1};
    ck_assert_hr(psdb_explorer_open(root, &exp), PSDB_S_OK);
    ck_assert_hr(psdb_explorer_foreach(exp, check_row, &o), PSDB_S_OK);
    psdb_explorer_release(exp);
    ck_assert_int_eq(o.rows, 1);
    ck_assert_hr(o.hr, PSDB_S_OK);
    return o.state;
}

START_TEST(test_registry__entry_check_states)
{
    char *root = tu_mkdtemp();
    uint8_t sha[32];
    char name[80];
    psdb__sha256("psdb bytes", 10, sha);
    psdb__hex(sha, 32, name);
    memcpy(name + 64, ".psdb", sizeof(".psdb")); /* named by its digest, as the store names it */
    char *file = tu_path(root, name);
    ck_assert_int_eq(tu_write_file(file, "psdb bytes", 10), 0);
    psdb_installer *inst = open_installer(root, "launcher");
    psdb_application *app = NULL;
    ck_assert_hr(psdb_installer_register_application(inst, "/g/game.exe", &app_desc, &app),
                 PSDB_S_OK);
    psdb_component_psdb p = {"fam", file};
    ck_assert_hr(psdb_application_register_component(app, "extra", NULL, 1, &p, NULL), PSDB_S_OK);
    /* Registered through the component API: no digest on record. */
    ck_assert_int_eq(state_of(root), PSDB_REGISTRY_FILE_UNVERIFIED);
    ck_assert_hr(psdb_application_remove_component(app, NULL), PSDB_E_INVALIDARG);
    psdb_component *c = NULL;
    ck_assert_hr(psdb_application_get_component(app, "extra", &c), PSDB_S_OK);
    ck_assert_hr(psdb_application_remove_component(app, c), PSDB_S_OK);
    psdb_component_release(c);
    /* Registered as psdb install does: the digest is recorded and compared. */
    psdb__install_entry e = {.family = "fam", .psdb_path = file, .serial = 7};
    psdb__hex(sha, 32, e.sha256);
    ck_assert_hr(psdb__registry_install(inst, "/g/game.exe", &app_desc, NULL, 1, &e, 0), PSDB_S_OK);
    ck_assert_int_eq(state_of(root), PSDB_REGISTRY_FILE_OK);
    ck_assert_int_eq(tu_write_file(file, "psdb bytez", 10), 0);
    ck_assert_int_eq(state_of(root), PSDB_REGISTRY_FILE_MISMATCH);
    ck_assert_int_eq(unlink(file), 0);
    ck_assert_int_eq(state_of(root), PSDB_REGISTRY_FILE_MISSING);
    /* The component API points the default component elsewhere: the record no longer applies. */
    char *other = tu_path(root, "other.psdb");
    ck_assert_int_eq(tu_write_file(other, "x", 1), 0);
    psdb_component_psdb q = {"fam", other};
    ck_assert_hr(
        psdb_application_register_component(app, PSDB_DEFAULT_COMPONENT, NULL, 1, &q, NULL),
        PSDB_S_OK);
    ck_assert_int_eq(state_of(root), PSDB_REGISTRY_FILE_UNVERIFIED);
    /* A path registered that way may be a link its installer made: followed. A FIFO there is
     * no file, and is not waited on. */
    char *target = tu_path(root, "target.psdb");
    ck_assert_int_eq(rename(other, target), 0);
    ck_assert_int_eq(symlink(target, other), 0);
    ck_assert_int_eq(state_of(root), PSDB_REGISTRY_FILE_UNVERIFIED);
    ck_assert_int_eq(unlink(other), 0);
    ck_assert_int_eq(mkfifo(other, 0644), 0);
    ck_assert_int_eq(state_of(root), PSDB_REGISTRY_FILE_MISSING);
    free(target);
    free(other);
    psdb_registry_file_state st;
    ck_assert_hr(psdb_registry_entry_check(NULL, &st), PSDB_E_INVALIDARG);
    ck_assert_str_eq(psdb_registry_file_state_str(PSDB_REGISTRY_FILE_MISMATCH), "mismatch");
    psdb_application_release(app);
    psdb_installer_release(inst);
    free(file);
    tu_rmtree(root);
    free(root);
}
END_TEST

/* What psdb install records of a PSDB's origin (schema/REGISTRY.md, version 3): built here with its
 * SODB, or downloaded (with the source SODB of a version 2 statement, or none), read back by the
 * explorer; and a registry of version 2 (written before the origin existed) is migrated when an
 * installer opens it, its rows reading as downloaded, source unknown, while an explorer reads it
 * unmigrated the same way. */
typedef struct origin_row {
    int rows, built_here;
    char sodb[65];
} origin_row;

static int origin_of(const psdb_registry_entry *e, void *ctx)
{
    origin_row *o = ctx;
    o->rows++;
    o->built_here = e->installed_built_here;
    snprintf(o->sodb, sizeof(o->sodb), "%s",
             e->installed_sodb_sha256 ? e->installed_sodb_sha256 : "");
    return 0;
}

static origin_row origin(const char *root)
{
    psdb_explorer *exp = NULL;
    origin_row o = {0};
    ck_assert_hr(psdb_explorer_open(root, &exp), PSDB_S_OK);
    ck_assert_hr(psdb_explorer_foreach(exp, origin_of, &o), PSDB_S_OK);
    psdb_explorer_release(exp);
    return o;
}

START_TEST(test_registry__install_records_origin)
{
    char *root = tu_mkdtemp();
    uint8_t sha[32];
    char name[80], *cmd = NULL;
    psdb__sha256("psdb bytes", 10, sha);
    psdb__hex(sha, 32, name);
    memcpy(name + 64, ".psdb", sizeof(".psdb"));
    char *file = tu_path(root, name);
    ck_assert_int_eq(tu_write_file(file, "psdb bytes", 10), 0);
    psdb_installer *inst = open_installer(root, "launcher");
    psdb__install_entry e = {.family = "fam", .psdb_path = file, .serial = 7, .built_here = 1};
    psdb__hex(sha, 32, e.sha256);
    memset(e.sodb_sha256, 'a', 64);
    ck_assert_hr(psdb__registry_install(inst, "/g/game.exe", &app_desc, NULL, 1, &e, 0), PSDB_S_OK);
    origin_row o = origin(root);
    ck_assert_int_eq(o.rows, 1);
    ck_assert_int_eq(o.built_here, 1);
    ck_assert_str_eq(o.sodb, e.sodb_sha256);
    e.built_here = 0;
    e.sodb_sha256[0] = '\0';
    ck_assert_hr(psdb__registry_install(inst, "/g/game.exe", &app_desc, NULL, 1, &e, 0), PSDB_S_OK);
    o = origin(root);
    ck_assert_int_eq(o.built_here, 0);
    ck_assert_str_eq(o.sodb, "");
    psdb_installer_release(inst);

    /* Back to version 2: an explorer reads it as downloaded; an installer migrates it. */
    ck_assert_int_gt(asprintf(&cmd,
                              "sqlite3 '%s/registry.db' 'ALTER TABLE installed DROP COLUMN "
                              "built_here; ALTER TABLE installed DROP COLUMN sodb_sha256; "
                              "PRAGMA user_version=2'",
                              root),
                     0);
    ck_assert_int_eq(system(cmd), 0);
    o = origin(root);
    ck_assert_int_eq(o.rows, 1);
    ck_assert_int_eq(o.built_here, 0);
    inst = open_installer(root, "launcher");
    e.built_here = 1;
    memset(e.sodb_sha256, 'b', 64);
    ck_assert_hr(psdb__registry_install(inst, "/g/game.exe", &app_desc, NULL, 1, &e, 0), PSDB_S_OK);
    o = origin(root);
    ck_assert_int_eq(o.built_here, 1);
    ck_assert_str_eq(o.sodb, e.sodb_sha256);
    psdb_installer_release(inst);
    free(cmd);
    free(file);
    tu_rmtree(root);
    free(root);
}
END_TEST

static int exists(const char *dir, const char *name)
{
    char *p = tu_path(dir, name);
    int r = access(p, F_OK) == 0;
    free(p);
    return r;
}

START_TEST(test_registry__sweep_never_runs_while_an_install_is_in_flight)
{
    char *root = tu_mkdtemp();
    psdb_installer *inst = open_installer(root, "launcher");
    char *store = tu_path(root, "psdbs");
    ck_assert_int_eq(mkdir(store, 0755), 0);
    char *kept = tu_path(store, "kept.psdb"), *orphan = tu_path(store, "orphan.psdb");
    char *part = tu_path(store, "fresh.psdb.part");
    ck_assert_int_eq(tu_write_file(kept, "k", 1), 0);
    ck_assert_int_eq(tu_write_file(orphan, "o", 1), 0);
    ck_assert_int_eq(tu_write_file(part, "p", 1), 0);
    /* Registered through a symlinked spelling of the root: still protected (same inode). */
    char *link = tu_path(root, "alias");
    ck_assert_int_eq(symlink(root, link), 0);
    char *via_link = NULL;
    ck_assert_int_ge(asprintf(&via_link, "%s/psdbs/kept.psdb", link), 0);
    psdb_application *app = NULL;
    ck_assert_hr(psdb_installer_register_application(inst, "/g/game.exe", &app_desc, &app),
                 PSDB_S_OK);
    psdb_component_psdb p = {"fam", via_link};
    ck_assert_hr(psdb_application_register_component(app, "default", NULL, 1, &p, NULL), PSDB_S_OK);
    /* Another process's install holds the store lock shared: its unregistered file stays. */
    char *lock = tu_path(root, "store.lock");
    int fd = open(lock, O_RDWR | O_CREAT, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(flock(fd, LOCK_SH), 0);
    ck_assert_hr(psdb_installer_sweep_store(inst, 0), PSDB_S_FALSE);
    ck_assert(exists(store, "orphan.psdb"));
    close(fd);
    ck_assert_hr(psdb_installer_sweep_store(inst, 0), PSDB_S_OK);
    ck_assert(!exists(store, "orphan.psdb"));
    ck_assert(exists(store, "kept.psdb"));
    ck_assert(exists(store, "fresh.psdb.part")); /* resumable */
    ck_assert_hr(psdb_installer_sweep_store(inst, PSDB_SWEEP_WAIT | PSDB_SWEEP_PARTIAL), PSDB_S_OK);
    ck_assert(!exists(store, "fresh.psdb.part"));
    ck_assert(exists(store, "kept.psdb"));
    ck_assert_hr(psdb_installer_sweep_store(inst, 0x80), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_installer_sweep_store(NULL, 0), PSDB_E_INVALIDARG);
    psdb_application_release(app);
    psdb_installer_release(inst);
    free(lock);
    free(via_link);
    free(link);
    free(kept);
    free(orphan);
    free(part);
    free(store);
    tu_rmtree(root);
    free(root);
}
END_TEST

START_TEST(test_registry__default_roots)
{
    char buf[512];
    char *saved = getenv("PSDB_REGISTRY_DIR") ? strdup(getenv("PSDB_REGISTRY_DIR")) : NULL;
    char *saved_xdg = getenv("XDG_DATA_HOME") ? strdup(getenv("XDG_DATA_HOME")) : NULL;
    setenv("PSDB_REGISTRY_DIR", "/r/x", 1);
    ck_assert_hr(psdb_registry_default_root(PSDB_SCOPE_USER, buf, sizeof(buf)), PSDB_S_OK);
    ck_assert_str_eq(buf, "/r/x");
    unsetenv("PSDB_REGISTRY_DIR");
    setenv("XDG_DATA_HOME", "/xdg", 1);
    ck_assert_hr(psdb_registry_default_root(PSDB_SCOPE_USER, buf, sizeof(buf)), PSDB_S_OK);
    ck_assert_str_eq(buf, "/xdg/psdb");
    unsetenv("XDG_DATA_HOME");
    ck_assert_hr(psdb_registry_default_root(PSDB_SCOPE_USER, buf, sizeof(buf)), PSDB_S_OK);
    ck_assert_ptr_nonnull(strstr(buf, "/.local/share/psdb"));
    ck_assert_hr(psdb_registry_default_root(PSDB_SCOPE_SYSTEM, buf, sizeof(buf)), PSDB_S_OK);
    ck_assert_str_eq(buf, "/var/lib/psdb");
    ck_assert_hr(psdb_registry_default_root(PSDB_SCOPE_SYSTEM, buf, 4), PSDB_E_MORE_DATA);
    if (saved)
        setenv("PSDB_REGISTRY_DIR", saved, 1);
    if (saved_xdg)
        setenv("XDG_DATA_HOME", saved_xdg, 1);
    free(saved);
    free(saved_xdg);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("registry");
    TCase *tc = tcase_create("registry");
    tcase_add_test(tc, test_registry__B1_one_installer_per_name_in_process);
    tcase_add_test(tc, test_registry__B1_one_installer_per_name_across_processes);
    tcase_add_test(tc, test_registry__installers_open_one_new_registry_at_once);
    tcase_add_test(tc, test_registry__B1_bad_arguments);
    tcase_add_test(tc, test_registry__B1_installer_names_with_slashes_do_not_escape);
    tcase_add_test(tc, test_registry__B2_application_by_exe_path);
    tcase_add_test(tc, test_registry__names_that_spoof_refused);
    tcase_add_test(tc, test_registry__B3_component_per_family_and_replace);
    tcase_add_test(tc, test_registry__B4_removed_component_and_application_are_invalid);
    tcase_add_test(tc, test_registry__B5_explorer_is_read_only);
    tcase_add_test(tc, test_registry__B6_precompile_targets);
    tcase_add_test(tc, test_registry__B8_concurrent_processes_see_whole_registrations);
    tcase_add_test(tc, test_registry__B8_snapshot_listing_is_never_torn);
    tcase_add_test(tc, test_registry__B8_read_only_root_is_refused_without_writing);
    tcase_add_test(tc, test_registry__B8_root_is_a_file_gives_io);
    tcase_add_test(tc, test_registry__B8_newer_schema_is_refused);
    tcase_add_test(tc, test_registry__default_roots);
    tcase_add_test(tc, test_registry__entry_check_states);
    tcase_add_test(tc, test_registry__install_records_origin);
    tcase_add_test(tc, test_registry__sweep_never_runs_while_an_install_is_in_flight);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
