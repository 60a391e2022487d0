/*
 * config_cases.c - cuFile's JSON configuration file (CUFILE_ENV_PATH_JSON), one case per process:
 * the file is read once, when the driver is first made, so each case writes its file and sets
 * the variable before its first cuFile call.
 *
 * Usage:
 *   config_cases --list             one `class/name` per line
 *   config_cases SCRATCH_DIR CASE   run one case in SCRATCH_DIR (a fresh directory)
 *
 * A case opens the driver (or registers a file, which opens it) and compares the answer with
 * the expected code, then checks what the file set: a parameter read back, the use count. It
 * prints `ok - CASE` or `not ok - CASE: why`, then the plan `1..1`, and exits 0 or 1.
 *
 * The answers are hipfile-rs's documented ones (README, "cuFile's configuration file"): a
 * missing file is the defaults, keys hipfile-rs has no use for are accepted, a file that cannot
 * be used (not JSON, a value of the wrong type) fails every open with
 * CU_FILE_DRIVER_INVALID_PROPS, and the file sits below the HIPFILE_* variables and the
 * parameter API.
 *
 * Builds as C11 and as C++17.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* setenv */
#endif

#include <cufile.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cufile_cases.h"

/* Writes `text` to `name` in the scratch directory and points CUFILE_ENV_PATH_JSON at it. */
static void
use_config(const char *name, const char *text)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    if (text != NULL) {
        FILE *f = fopen(path, "w");
        if (f == NULL || fputs(text, f) < 0 || fclose(f) != 0) {
            setup_failed(path);
        }
    }
    if (setenv("CUFILE_ENV_PATH_JSON", path, 1) != 0) {
        setup_failed("setenv");
    }
}

static void
expect_size_param(CUFileSizeTConfigParameter_t param, size_t want, const char *what)
{
    size_t        got = 0;
    CUfileError_t e   = cuFileGetParameterSizeT(param, &got);
    if (e.err != CU_FILE_SUCCESS || got != want) {
        note("%s reads %zu (err %d), want %zu", what, got, (int)e.err, want);
    }
}

static void
expect_use_count(long want)
{
    long got = cuFileUseCount();
    if (got != want) {
        note("cuFileUseCount() = %ld, want %ld", got, want);
    }
}

/* cuFileDriverOpen's answer, the count checked against it. */
static CUfileError_t
open_driver(void)
{
    CUfileError_t e = cuFileDriverOpen();
    expect_use_count(e.err == CU_FILE_SUCCESS ? 1 : 0);
    return e;
}

#define GOOD_FILE                                                                                      \
    "// a configuration file with comments of both kinds, as cuFile's are shipped\n"                   \
    "{\n"                                                                                              \
    "    \"logging\": { \"level\": \"ERROR\" },\n"                                                     \
    "    /* sizes in KiB */\n"                                                                         \
    "    \"properties\": {\n"                                                                          \
    "        \"max_direct_io_size_kb\": 2048, // a whole number\n"                                     \
    "        \"allow_compat_mode\": true\n"                                                            \
    "    },\n"                                                                                         \
    "    \"profile\": { \"cufile_stats\": 2 }\n"                                                       \
    "}\n"

static CUfileError_t
missing_file(void)
{
    use_config("no-such-file.json", NULL);
    return open_driver();
}

static CUfileError_t
good_file(void)
{
    use_config("good.json", GOOD_FILE);
    CUfileError_t e = open_driver();
    expect_size_param(CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB, 2048, "properties.max_direct_io_size_kb");
    int level = -1;
    if (cuFileGetStatsLevel(&level).err != CU_FILE_SUCCESS || level != 2) {
        note("profile.cufile_stats: the statistics level is %d, want 2", level);
    }
    return e;
}

static CUfileError_t
unknown_keys(void)
{
    use_config("unknown.json", "{\n"
                               "  \"fs\": { \"lustre\": { \"posix_gds_min_kb\": 0 } },\n"
                               "  \"denylist\": { \"drivers\": [], \"devices\": [] },\n"
                               "  \"no_such_section\": { \"anything\": [1, 2, {\"x\": null}] },\n"
                               "  \"properties\": { \"rdma_dev_addr_list\": [], \"no_such_key\": \"x\",\n"
                               "                    \"max_direct_io_size_kb\": 4096 }\n"
                               "}\n");
    CUfileError_t e = open_driver();
    expect_size_param(CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB, 4096,
                      "a known key beside unknown ones (properties.max_direct_io_size_kb)");
    return e;
}

static CUfileError_t
malformed(void)
{
    use_config("malformed.json", "{ \"properties\": { \"max_direct_io_size_kb\": 2048, ");
    return open_driver();
}

static CUfileError_t
malformed_every_open(void)
{
    use_config("malformed.json", "{ \"properties\": [ }");
    CUfileError_t first = cuFileDriverOpen();
    if (first.err != CU_FILE_DRIVER_INVALID_PROPS) {
        note("the first open answered %d", (int)first.err);
    }
    return open_driver();
}

static CUfileError_t
malformed_implicit_open(void)
{
    use_config("malformed.json", "not json at all");
    char path[4096];
    snprintf(path, sizeof path, "%s/data.bin", g_dir);
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    if (fd < 0) {
        setup_failed(path);
    }
    CUfileDescr_t descr;
    memset(&descr, 0, sizeof descr);
    descr.type         = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
    descr.handle.fd    = fd;
    CUfileHandle_t fh  = NULL;
    CUfileError_t  e   = cuFileHandleRegister(&fh, &descr);
    expect_use_count(0);
    return e;
}

static CUfileError_t
wrong_type(void)
{
    use_config("wrong-type.json", "{ \"properties\": { \"max_direct_io_size_kb\": \"big\" } }");
    return open_driver();
}

static CUfileError_t
section_not_object(void)
{
    use_config("section.json", "{ \"properties\": 7 }");
    return open_driver();
}

static CUfileError_t
environment_wins(void)
{
    use_config("good.json", GOOD_FILE);
    if (setenv("HIPFILE_MAX_DIRECT_IO_KB", "1024", 1) != 0) {
        setup_failed("setenv");
    }
    CUfileError_t e = open_driver();
    expect_size_param(CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB, 1024,
                      "HIPFILE_MAX_DIRECT_IO_KB over the file's max_direct_io_size_kb");
    return e;
}

static CUfileError_t
parameter_api_wins(void)
{
    use_config("good.json", GOOD_FILE);
    CUfileError_t set = cuFileSetParameterSizeT(CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB, 512);
    if (set.err != CU_FILE_SUCCESS) {
        note("cuFileSetParameterSizeT answered %d", (int)set.err);
    }
    CUfileError_t e = open_driver();
    expect_size_param(CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB, 512,
                      "cuFileSetParameterSizeT over the file's max_direct_io_size_kb");
    return e;
}

typedef struct {
    const char   *name;
    CUfileOpError want;
    CUfileError_t (*run)(void);
} config_case;

static const config_case CASES[] = {
    {"config/missing-file-is-the-defaults", CU_FILE_SUCCESS, missing_file},
    {"config/good-file-with-comments", CU_FILE_SUCCESS, good_file},
    {"config/unknown-keys-accepted", CU_FILE_SUCCESS, unknown_keys},
    {"config/malformed", CU_FILE_DRIVER_INVALID_PROPS, malformed},
    {"config/malformed-fails-every-open", CU_FILE_DRIVER_INVALID_PROPS, malformed_every_open},
    {"config/malformed-fails-the-implicit-open", CU_FILE_DRIVER_INVALID_PROPS, malformed_implicit_open},
    {"config/value-of-the-wrong-type", CU_FILE_DRIVER_INVALID_PROPS, wrong_type},
    {"config/section-not-an-object", CU_FILE_DRIVER_INVALID_PROPS, section_not_object},
    {"config/environment-over-the-file", CU_FILE_SUCCESS, environment_wins},
    {"config/parameter-api-over-the-file", CU_FILE_SUCCESS, parameter_api_wins},
};

#define N_CASES (sizeof CASES / sizeof CASES[0])

static int
run_case(size_t i)
{
    unsetenv("HIPFILE_MAX_DIRECT_IO_KB");
    unsetenv("HIPFILE_STATS_LEVEL");
    CUfileError_t got    = CASES[i].run();
    int           passed = got.err == CASES[i].want && (int)got.cu_err == 0;
    char          got_text[256], want_text[256];
    snprintf(got_text, sizeof got_text, "err %d (%s)", (int)got.err, cufileop_status_error(got.err));
    snprintf(want_text, sizeof want_text, "%d (%s)", (int)CASES[i].want, cufileop_status_error(CASES[i].want));
    return case_result(CASES[i].name, passed, got_text, want_text, NULL);
}

static const char *
case_name(size_t i)
{
    return CASES[i].name;
}

int
main(int argc, char **argv)
{
    const case_table table = {N_CASES, case_name, NULL, run_case};
    return cases_main(argc, argv, &table);
}
