/*
 * cases.h - the one-case-per-process harness of the `*_cases.c` programs (hipFile's and cuFile's).
 *
 * A cases program keeps its own table of cases, expectations and checks; this header gives it
 * the rest: the command line (`--list`, `--table` where the program has a table, `SCRATCH_DIR
 * CASE`), the scratch directory and name of the running case (g_dir, g_case), the failed
 * post-checks collected while the case runs (note(), post()), and the one result line, `ok -
 * CASE` or `not ok - CASE: why`, followed by the plan `1..1` (the runner, `cargo xtask c-tests`,
 * starts each case in its own process and reads that line).
 *
 * One copy per program (everything here is static): include it once, from the program's .c
 * file. Builds as C11 and as C++17.
 */

#ifndef HIPFILE_TESTS_CASES_H
#define HIPFILE_TESTS_CASES_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* The scratch directory the runner made for this case (argv[1]). */
static const char *g_dir;
/* The name of the case running. */
static const char *g_case;
/* Failed post-checks, "; "-separated; any makes the case `not ok`. */
static char g_post[4096];

static inline void
cases_vnote(const char *fmt, va_list args)
{
    size_t used = strlen(g_post);
    if (used + 3 >= sizeof g_post) {
        return;
    }
    if (used > 0) {
        strcpy(g_post + used, "; ");
        used += 2;
    }
    vsnprintf(g_post + used, sizeof g_post - used, fmt, args);
}

/* Records a failed post-check. */
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
static inline void
note(const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    cases_vnote(fmt, args);
    va_end(args);
}

/* Records a post-check that did not pass. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static inline void
post(int passed, const char *fmt, ...)
{
    if (passed) {
        return;
    }
    va_list args;
    va_start(args, fmt);
    cases_vnote(fmt, args);
    va_end(args);
}

/* Prints the case's result line: `ok - NAME` when the answer `passed` and no post-check failed,
 * else `not ok - NAME: ` with "got GOT, want WANT [BASIS]" (no brackets for a NULL basis) for a
 * wrong answer and the failed post-checks. Gives the exit status, 0 or 1. */
static inline int
case_result(const char *name, int passed, const char *got, const char *want, const char *basis)
{
    if (passed && g_post[0] == '\0') {
        printf("ok - %s\n", name);
        return 0;
    }
    printf("not ok - %s: ", name);
    if (!passed) {
        printf("got %s, want %s", got, want);
        if (basis != NULL) {
            printf(" [%s]", basis);
        }
    }
    if (g_post[0] != '\0') {
        printf("%s%s", passed ? "" : "; ", g_post);
    }
    printf("\n");
    return 1;
}

/* A program's table of cases, seen through its index. */
typedef struct {
    size_t count;
    const char *(*name)(size_t i);
    /* The `--table` row of case i: its expected answer in words (into `want`) and its basis.
     * NULL: the program has no `--table`. */
    const char *(*describe)(size_t i, char *want, size_t room);
    /* Runs case i and prints its result line (case_result); gives the exit status. */
    int (*run)(size_t i);
} case_table;

/* The whole `main` of a cases program. */
static inline int
cases_main(int argc, char **argv, const case_table *table)
{
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < table->count; i++) {
            printf("%s\n", table->name(i));
        }
        return 0;
    }
    if (argc == 2 && table->describe != NULL && strcmp(argv[1], "--table") == 0) {
        printf("| case | expected | basis |\n|---|---|---|\n");
        for (size_t i = 0; i < table->count; i++) {
            char        want[512];
            const char *basis = table->describe(i, want, sizeof want);
            printf("| `%s` | %s | %s |\n", table->name(i), want, basis);
        }
        return 0;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: %s --list%s | SCRATCH_DIR CASE\n", argv[0],
                table->describe != NULL ? " | --table" : "");
        return 2;
    }
    g_dir = argv[1];
    for (size_t i = 0; i < table->count; i++) {
        if (strcmp(table->name(i), argv[2]) == 0) {
            g_case     = table->name(i);
            int status = table->run(i);
            /* The plan, last, as every C test program prints it. */
            printf("1..1\n");
            fflush(stdout);
            return status;
        }
    }
    fprintf(stderr, "%s: no case named %s (try --list)\n", argv[0], argv[2]);
    return 2;
}

#endif /* HIPFILE_TESTS_CASES_H */
