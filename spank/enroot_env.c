/*
 * enroot_env.c - /usr/lib/warden/enroot-env, the interpreter line of enroot and of Warden's pyxis
 * importer (`#!/usr/lib/warden/enroot-env /bin/bash`; images/container-runtime/Dockerfile).
 *
 * pyxis runs both as the user, before the job step's seccomp filter is on (enroot must make a user
 * and a mount namespace), and hands them the job's environment, keeping out only PATH, LD_PRELOAD,
 * LD_LIBRARY_PATH and enroot's own paths. Much else in an environment makes an ordinary program run
 * a file of the user's: BASH_ENV (bash at start), exported functions, LD_AUDIT (the dynamic loader),
 * PERL5OPT, GCONV_PATH... That would be the user's code, unfiltered, in a user namespace of theirs.
 * This program runs first (the kernel starts it for the script's `#!` line; it is linked statically,
 * so no dynamic loader reads the environment before it) and execs the interpreter with only the
 * variables below: what enroot, its hooks and the importer read, and nothing that names code.
 *
 *   enroot-env INTERPRETER [ARG...]    exec INTERPRETER ARG... with the environment filtered
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

/* Kept by name. */
static const char *const names[] = {
	"HOME", "USER", "LOGNAME", "PATH", "SHELL", "TERM", "TZ", "TMPDIR", "PWD",
	"http_proxy", "https_proxy", "no_proxy", "all_proxy",
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY",
	"SSL_CERT_FILE", "SSL_CERT_DIR",
	NULL,
};

/*
 * Kept by prefix: enroot's settings (ENROOT_*; pyxis sets its own), pyxis' and Slurm's variables, the
 * device variables enroot's hooks read (NVIDIA_*, CUDA_*, MELLANOX_*), the MPI ones, XDG base
 * directories (where enroot finds the user's credentials) and the importer's WARDEN_*.
 */
static const char *const prefixes[] = {
	"ENROOT_", "PYXIS_", "SLURM_", "SLURMD_", "NVIDIA_", "CUDA_", "MELLANOX_",
	"PMIX_", "PMI_", "OMPI_", "XDG_", "WARDEN_",
	NULL,
};

/* Never, whatever the prefix: where enroot loads its own code and system configuration from. */
static const char *const never[] = {
	"ENROOT_LIBRARY_PATH", "ENROOT_SYSCONF_PATH",
	NULL,
};

/* Locale variables: kept unless their value is a path (glibc then loads a locale from there). */
static const char *const locale[] = { "LANG", "LANGUAGE", "LC_ALL", NULL };

static bool name_is(const char *entry, size_t len, const char *name)
{
	return strlen(name) == len && strncmp(entry, name, len) == 0;
}

static bool in(const char *entry, size_t len, const char *const *list)
{
	for (; *list; list++)
		if (name_is(entry, len, *list))
			return true;
	return false;
}

/* Whether NAME=VALUE stays in the environment of enroot or the importer. */
static bool keep(const char *entry)
{
	const char *eq = strchr(entry, '=');
	const char *const *p;
	size_t len;

	if (!eq || eq == entry)
		return false;
	len = (size_t)(eq - entry);
	if (in(entry, len, never))
		return false;
	if (in(entry, len, locale) || (len > 3 && strncmp(entry, "LC_", 3) == 0))
		return strchr(eq + 1, '/') == NULL;
	if (in(entry, len, names))
		return true;
	for (p = prefixes; *p; p++)
		if (len > strlen(*p) && strncmp(entry, *p, strlen(*p)) == 0)
			return strspn(entry, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") == len;
	return false;
}

int main(int argc, char **argv)
{
	char **env;
	size_t n = 0, i;

	if (argc < 2) {
		fputs("usage: enroot-env INTERPRETER [ARG...] (a script's #! line)\n", stderr);
		return 2;
	}
	for (i = 0; environ[i]; i++)
		;
	env = calloc(i + 1, sizeof(*env));
	if (!env) {
		perror("enroot-env");
		return 127;
	}
	for (i = 0; environ[i]; i++)
		if (keep(environ[i]))
			env[n++] = environ[i];
	env[n] = NULL;
	execve(argv[1], argv + 1, env);
	fprintf(stderr, "enroot-env: cannot run %s: %s\n", argv[1], strerror(errno));
	return 127;
}
