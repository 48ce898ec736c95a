/* vk_component_link_test.c - the Vulkan component (client/src/vulkan/psdb_vulkan.h) uses libpsdb's
 * public API and common/ only: this program links every object of psdb_vulkan (whole archive)
 * with the shared libpsdb, which exports nothing else, so a call into a libpsdb internal fails its
 * link. Run, it checks that compile and replay name what they cannot open, before any device. */
#include <check.h>
#include <string.h>

#include "vulkan/psdb_vulkan.h"

START_TEST(test_vk_component__compile_and_replay_name_a_missing_sodb)
{
    char err[512] = "";
    vkbe_compile_stats cs;
    vkbe_replay_result rr;
    vkbe_replay_desc rd = {.sodb_path = "/nonexistent/psdb-vk24/a.sodb"};
    psdb_hr hr = vkbe_compile("/nonexistent/psdb-vk24/a.sodb", NULL, 0,
                              "/nonexistent/psdb-vk24/a.psdb", NULL, &cs, err, sizeof(err));
    ck_assert_msg(PSDB_FAILED(hr), "%s", psdb_hr_str(hr));
    ck_assert_msg(strstr(err, "/nonexistent/psdb-vk24/a.sodb"), "%s", err);
    err[0] = '\0';
    hr = vkbe_replay(&rd, &rr, err, sizeof(err));
    ck_assert_msg(PSDB_FAILED(hr), "%s", psdb_hr_str(hr));
    ck_assert_msg(strstr(err, "/nonexistent/psdb-vk24/a.sodb"), "%s", err);
    ck_assert_msg(rr.entries == NULL && rr.num_entries == 0, "a failed replay left entries");
    vkbe_replay_result_free(&rr);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("vk_component");
    TCase *tc = tcase_create("vk_component");
    tcase_add_test(tc, test_vk_component__compile_and_replay_name_a_missing_sodb);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed == 0 ? 0 : 1;
}
