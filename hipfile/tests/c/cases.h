/*
 * cases.h - the one-case-per-process harness of the `*_cases.c` programs (hipFile's and cuFile's).
 *
 * A cases program keeps its own table of cases, expectations and checks; this header gives it
 * the rest: the expectations a case is held to and the outcome it records (where the program
 * names its error pair, CASES_PAIR_T), the command line (`--list`, `--table` where the program
 * has a table, `SCRATCH_DIR CASE`), the scratch directory and name of the running case (g_dir,
 * g_case), the failed post-checks collected while the case runs (note(), post()), and the one
 * result line, `ok - CASE` or `not ok - CASE: why`, followed by the plan `1..1` (the runner,
 * `cargo xtask c-tests`, starts each case in its own process and reads that line).
 *
 * One copy per program (everything here is static): include it once, from the program's .c
 * file. Builds as C11 and as C++17.
 */

#ifndef HIPFILE_TESTS_CASES_H
#define HIPFILE_TESTS_CASES_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#ifdef CASES_PAIR_T
/*
 * Expectations and outcomes, for a program that defines, before including this header,
 * CASES_PAIR_T (its ABI's error pair: `err`, then the GPU runtime's half) and
 * CASES_RUNTIME_ERROR(pair) (that half, as an int: 0 when the runtime did not fail).
 */

typedef enum {
    X_CODE,    /* a pair with err == a and no runtime error */
    X_CODE2,   /* a pair with err == a or err == b, and no runtime error */
    X_RUNTIME, /* a pair with err == a and a runtime error beside it */
    X_NEG,     /* ssize_t == -a */
    X_ERRNO,   /* ssize_t == -1 and errno == a */
    X_BYTES,   /* ssize_t == a */
    X_VALUE,   /* an integer (the use count) == a */
    X_TEXT,    /* a non-NULL, non-empty, printable string */
    X_VOID,    /* a void call: only the post-checks speak */
    X_KERNEL   /* the same ssize_t and errno as pread/pwrite of the same request */
} expect_kind;

typedef struct {
    expect_kind kind;
    long long   a;
    long long   b;
} expect;

#define CODE(c) {X_CODE, (long long)(c), 0}
#define CODE_OR(c, d) {X_CODE2, (long long)(c), (long long)(d)}
#define NEG(c) {X_NEG, (long long)(c), 0}
#define ERRNO(e) {X_ERRNO, (long long)(e), 0}
#define BYTES(n) {X_BYTES, (long long)(n), 0}
#define VALUE(n) {X_VALUE, (long long)(n), 0}
#define TEXT {X_TEXT, 0, 0}
#define NOTHING {X_VOID, 0, 0}
#define KERNEL {X_KERNEL, 0, 0}

typedef enum { O_PAIR, O_IO, O_VALUE, O_TEXT, O_VOID } outcome_kind;

typedef struct {
    outcome_kind kind;
    CASES_PAIR_T pair;
    ssize_t      ret;
    int          err;
    long long    value;
    const char  *text;
    /* X_KERNEL: what pread/pwrite answered. */
    ssize_t ref_ret;
    int     ref_err;
} outcome;

static inline outcome
blank(outcome_kind kind)
{
    outcome o;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    return o;
}

static inline outcome
got_pair(CASES_PAIR_T e)
{
    outcome o = blank(O_PAIR);
    o.pair    = e;
    return o;
}

/* errno is read first thing: the argument was just computed by the call. */
static inline outcome
got_io(ssize_t ret)
{
    int     err = errno;
    outcome o   = blank(O_IO);
    o.ret       = ret;
    o.err       = err;
    return o;
}

static inline outcome
got_value(long long v)
{
    outcome o = blank(O_VALUE);
    o.value   = v;
    return o;
}

static inline outcome
got_text(const char *t)
{
    outcome o = blank(O_TEXT);
    o.text    = t;
    return o;
}

static inline outcome
got_nothing(void)
{
    return blank(O_VOID);
}

static inline int
printable(const char *t)
{
    if (t == NULL || t[0] == '\0') {
        return 0;
    }
    for (; *t; t++) {
        if ((unsigned char)*t < 0x20 || (unsigned char)*t > 0x7e) {
            return 0;
        }
    }
    return 1;
}

static inline int
matches(expect x, const outcome *o)
{
    switch (x.kind) {
        case X_CODE: return o->kind == O_PAIR && o->pair.err == x.a && CASES_RUNTIME_ERROR(o->pair) == 0;
        case X_CODE2:
            return o->kind == O_PAIR && (o->pair.err == x.a || o->pair.err == x.b) && CASES_RUNTIME_ERROR(o->pair) == 0;
        case X_RUNTIME: return o->kind == O_PAIR && o->pair.err == x.a && CASES_RUNTIME_ERROR(o->pair) != 0;
        case X_NEG: return o->kind == O_IO && o->ret == -(ssize_t)x.a;
        case X_ERRNO: return o->kind == O_IO && o->ret == -1 && o->err == x.a;
        case X_BYTES: return o->kind == O_IO && o->ret == (ssize_t)x.a;
        case X_VALUE: return o->kind == O_VALUE && o->value == x.a;
        case X_TEXT: return o->kind == O_TEXT && printable(o->text);
        case X_VOID: return o->kind == O_VOID;
        case X_KERNEL:
            return o->kind == O_IO && o->ret == o->ref_ret && (o->ret != -1 || o->err == o->ref_err);
    }
    return 0;
}
#endif /* CASES_PAIR_T */

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
