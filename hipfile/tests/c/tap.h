/*
 * tap.h - the TAP-like output of the C test programs.
 *
 * Each check prints one line, `ok - NAME` or `not ok - NAME (DETAIL)`; a
 * skipped one prints `ok - NAME # SKIP REASON`. At its end a program returns
 * tap_finish(), which prints the plan `1..N` (N lines printed; the runners
 * fail a program whose plan is missing or does not count its lines) and
 * `# F check(s) failed`, and gives the exit status: 0 only if every check
 * passed. A program that cannot go on calls setup_failed(), which prints a
 * `not ok` line and exits 1 without a plan.
 *
 * One copy per program (everything here is static): include it once, from
 * the program's .c file. Builds as C11 and as C++17.
 */

#ifndef HIPFILE_TESTS_TAP_H
#define HIPFILE_TESTS_TAP_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Checks failed so far. */
static int tap_failures;
/* Checks reported so far; printed as the plan `1..N` at the end, which the runners compare with
 * the ok / not ok lines (a program that stops early prints no plan). */
static int tap_checks;

/* One check: `ok - NAME` when it passed, else `not ok - NAME (DETAIL)`, DETAIL formatted from
 * detail_fmt and the arguments that follow. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static inline void
check(int passed, const char *name, const char *detail_fmt, ...)
{
    tap_checks++;
    if (passed) {
        printf("ok - %s\n", name);
        return;
    }
    tap_failures++;
    printf("not ok - %s (", name);
    va_list args;
    va_start(args, detail_fmt);
    vprintf(detail_fmt, args);
    va_end(args);
    printf(")\n");
}

/* A check that cannot run here: `ok - NAME # SKIP REASON`. */
static inline void
skip(const char *name, const char *reason)
{
    tap_checks++;
    printf("ok - %s # SKIP %s\n", name, reason);
}

/* A step the checks need failed (errno says why): `not ok - WHAT (STRERROR)`, then exit 1 without
 * a plan: the program stopped before its end. */
#if defined(__GNUC__)
__attribute__((noreturn))
#endif
static inline void
setup_failed(const char *what)
{
    printf("not ok - %s (%s)\n", what, strerror(errno));
    exit(1);
}

/* The end of a program: prints the plan and the failure count; returns the exit status. */
static inline int
tap_finish(void)
{
    printf("1..%d\n", tap_checks);
    printf("# %d check(s) failed\n", tap_failures);
    return tap_failures == 0 ? 0 : 1;
}

#endif /* HIPFILE_TESTS_TAP_H */
