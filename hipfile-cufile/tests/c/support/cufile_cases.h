/*
 * cufile_cases.h - what the cuFile `*_cases.c` programs share beyond the harness of every cases
 * program (cases.h, beside tap.h in hipfile/tests/c): the set-up failure of a cuFile case.
 *
 * One copy per program (everything here is static). Builds as C11 and as C++17.
 */

#ifndef HIPFILE_CUFILE_TESTS_CUFILE_CASES_H
#define HIPFILE_CUFILE_TESTS_CUFILE_CASES_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cases.h"

/* A step the case needs that is not under test failed (`what`, with errno): the case cannot
 * run. */
static inline void
setup_failed(const char *what)
{
    printf("not ok - set-up: %s (%s)\n1..1\n", what, strerror(errno));
    exit(1);
}

#endif /* HIPFILE_CUFILE_TESTS_CUFILE_CASES_H */
