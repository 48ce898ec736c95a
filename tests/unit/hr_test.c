/* hr_test.c - status codes and version. */
#include "testutil.h"

#include <string.h>

START_TEST(test_hr__values_match_d3d12)
{
    ck_assert_uint_eq((uint32_t)PSDB_E_INVALIDARG, 0x80070057u);
    ck_assert_uint_eq((uint32_t)PSDB_E_ADAPTER_NOT_FOUND, 0x887E0001u);
    ck_assert_uint_eq((uint32_t)PSDB_E_DRIVER_VERSION_MISMATCH, 0x887E0002u);
    ck_assert_uint_eq((uint32_t)PSDB_E_NOT_FOUND, 0x887A0002u);
    ck_assert_uint_eq((uint32_t)PSDB_E_MORE_DATA, 0x887A0003u);
    ck_assert_uint_eq((uint32_t)PSDB_E_CACHE_CORRUPT, 0x887A0033u);
    ck_assert_uint_eq((uint32_t)PSDB_E_ALREADY_EXISTS, 0x887A0036u);
    ck_assert_uint_eq((uint32_t)PSDB_E_CANCELLED, 0x800704C7u); /* HRESULT_FROM_WIN32(1223) */
    ck_assert(PSDB_FAILED(PSDB_E_FAIL));
    ck_assert(PSDB_SUCCEEDED(PSDB_S_FALSE));
}
END_TEST

START_TEST(test_hr__every_code_has_a_name)
{
    const psdb_hr codes[] = {PSDB_S_OK,
                             PSDB_S_FALSE,
                             PSDB_E_INVALIDARG,
                             PSDB_E_OUTOFMEMORY,
                             PSDB_E_FAIL,
                             PSDB_E_NOTIMPL,
                             PSDB_E_ADAPTER_NOT_FOUND,
                             PSDB_E_DRIVER_VERSION_MISMATCH,
                             PSDB_E_NOT_FOUND,
                             PSDB_E_MORE_DATA,
                             PSDB_E_UNSUPPORTED,
                             PSDB_E_NOT_CURRENTLY_AVAILABLE,
                             PSDB_E_CACHE_CORRUPT,
                             PSDB_E_CACHE_FULL,
                             PSDB_E_CACHE_HASH_COLLISION,
                             PSDB_E_ALREADY_EXISTS,
                             PSDB_E_CANCELLED,
                             PSDB_E_IO,
                             PSDB_E_NETWORK,
                             PSDB_E_SIGNATURE,
                             PSDB_E_ACCESS,
                             PSDB_E_BUSY,
                             PSDB_E_DISK_FULL,
                             PSDB_E_DOWNGRADE,
                             PSDB_E_PROTOCOL,
                             PSDB_E_INTEGRITY};
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        const char *s = psdb_hr_str(codes[i]);
        ck_assert_ptr_nonnull(s);
        ck_assert_msg(strncmp(s, "PSDB_", 5) == 0, "code %zu unnamed: %s", i, s);
        for (size_t j = 0; j < i; j++)
            ck_assert_msg(codes[i] != codes[j], "codes %zu and %zu collide", i, j);
    }
    ck_assert_str_eq(psdb_hr_str((psdb_hr)0x80001234u), "unknown status");
}
END_TEST

START_TEST(test_hr__version)
{
    ck_assert_str_eq(psdb_version(), PSDB_VERSION_STRING);
    ck_assert_uint_eq(PSDB_VERSION(1, 2, 3, 4), 0x0001000200030004ull);
    ck_assert_uint_eq(PSDB_VERSION(0xFFFF, 0, 0, 0) >> 48, 0xFFFFu);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hr");
    TCase *tc = tcase_create("hr");
    tcase_add_test(tc, test_hr__values_match_d3d12);
    tcase_add_test(tc, test_hr__every_code_has_a_name);
    tcase_add_test(tc, test_hr__version);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
