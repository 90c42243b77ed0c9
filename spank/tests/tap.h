/*
 * tap.h - the checks and scenarios of the plugin's C tests (jail_enter_test.c,
 * job_filter_test.c): `ok` prints one TAP-like line per check and counts
 * failures; `scenario` runs a function in a forked child (what it does to the
 * process cannot be undone) whose exit status is its number of failures, or
 * TAP_CANNOT_RUN when `die` stopped it.
 */
#ifndef WARDEN_SPANK_TESTS_TAP_H
#define WARDEN_SPANK_TESTS_TAP_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define TAP_CANNOT_RUN 100

static int failures;

static inline void ok(bool cond, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	printf("%s - ", cond ? "ok" : "NOT OK");
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
	fflush(stdout);
	if (!cond)
		failures++;
}

static inline void note(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	printf("  # ");
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
	fflush(stdout);
}

/* A setup step failed: this process cannot go on. */
static inline void die(const char *what)
{
	perror(what);
	exit(TAP_CANNOT_RUN);
}

static inline void scenario(const char *name, void (*fn)(void))
{
	pid_t pid;
	int status;

	printf("# %s\n", name);
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		failures = 0;
		fn();
		exit(failures >= TAP_CANNOT_RUN ? TAP_CANNOT_RUN - 1 : failures);
	}
	if (waitpid(pid, &status, 0) < 0)
		die("waitpid");
	if (!WIFEXITED(status)) {
		ok(false, "%s: child died (status 0x%x)", name, status);
		return;
	}
	if (WEXITSTATUS(status) == TAP_CANNOT_RUN) {
		ok(false, "%s: could not run", name);
		return;
	}
	failures += WEXITSTATUS(status);
}

#endif
