/*
 * line_buffered.c - linked into every C program the runners build (`cargo xtask c-tests` and
 * the GPU bundle's run.sh), the tests and the examples alike; not a program of its own.
 *
 * There a program's stdout is a log file, which stdio fills in 4 KiB blocks: a run killed at its
 * time limit would leave a log cut at its last full block, hiding the checks it passed and the
 * one it stopped in. Line-buffered, the log holds every line printed before the kill.
 *
 * A constructor sets it before main prints anything. It is a translation unit of its own rather
 * than a header the runners force-include, because <stdio.h> included ahead of a program's own
 * lines would come before its feature macros (_GNU_SOURCE for O_DIRECT).
 */

#include <stdio.h>

#if defined(__GNUC__)
__attribute__((constructor)) static void
line_buffered_stdout(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
}
#else
#error "stdout is made line-buffered by a GCC/Clang constructor; build with cc/c++ of either"
#endif
