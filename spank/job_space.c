/*
 * job_space.c - the pure part of each job's own tmpfs (job_space.h): argument
 * parsing, sizes, paths and the binds added to the jail config. No system
 * calls; unit-tested through cffi (tests/unit/test_job_space.py).
 */
#define _GNU_SOURCE
#include "job_space.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JOBTMPFS "jobtmpfs="
#define NPROC "nproc="

int job_space_parse_size(const char *text, unsigned long long *out,
			 char *err, size_t errlen)
{
	unsigned long long v = 0, mult = 1;
	const char *p = text;

	if (!text || !*text)
		return jail_fail(err, errlen, "size is empty");
	if (*p < '0' || *p > '9')
		return jail_fail(err, errlen, "size '%s' is not a number", text);
	for (; *p >= '0' && *p <= '9'; p++) {
		unsigned d = (unsigned)(*p - '0');

		if (v > (ULLONG_MAX - d) / 10)
			return jail_fail(err, errlen, "size '%s' is too large",
					 text);
		v = v * 10 + d;
	}
	if (*p) {
		switch (*p) {
		case 'k': case 'K': mult = 1ULL << 10; break;
		case 'm': case 'M': mult = 1ULL << 20; break;
		case 'g': case 'G': mult = 1ULL << 30; break;
		case 't': case 'T': mult = 1ULL << 40; break;
		default:
			return jail_fail(err, errlen, "size '%s': unknown suffix "
					 "(k, m, g or t)", text);
		}
		if (p[1])
			return jail_fail(err, errlen, "size '%s': unknown suffix "
					 "(k, m, g or t)", text);
	}
	if (v == 0)
		return jail_fail(err, errlen, "size '%s' is zero", text);
	if (v > ULLONG_MAX / mult)
		return jail_fail(err, errlen, "size '%s' is too large", text);
	*out = v * mult;
	return 0;
}

static int parse_nproc(const char *arg, const char *val, unsigned long *out,
		       char *err, size_t errlen)
{
	unsigned long long v = 0;
	const char *p = val;

	if (!*p)
		return jail_fail(err, errlen, "argument '%s': expected nproc=N",
				 arg);
	for (; *p; p++) {
		if (*p < '0' || *p > '9')
			return jail_fail(err, errlen, "argument '%s': expected "
					 "nproc=N (a whole number)", arg);
		v = v * 10 + (unsigned long long)(*p - '0');
		if (v > 1ULL << 31)
			return jail_fail(err, errlen, "argument '%s': nproc is "
					 "too large", arg);
	}
	*out = (unsigned long)v;
	return 0;
}

static int parse_jobtmpfs(const char *arg, const char *val,
			  struct job_space_config *js, char *err, size_t errlen)
{
	char path[JAIL_PATH_MAX];
	char why[JAIL_ERR_MAX];
	struct job_space *s;
	const char *colon = strchr(val, ':');
	size_t plen = colon ? (size_t)(colon - val) : strlen(val);
	size_t i;

	if (js->nspaces >= JOB_SPACE_MAX)
		return jail_fail(err, errlen, "argument '%s': more than %d "
				 "jobtmpfs=", arg, JOB_SPACE_MAX);
	if (plen == 0)
		return jail_fail(err, errlen, "argument '%s': expected "
				 "jobtmpfs=DST[:SIZE]", arg);
	if (plen >= sizeof(path))
		return jail_fail(err, errlen, "argument '%s': path is too long",
				 arg);
	memcpy(path, val, plen);
	path[plen] = '\0';
	s = &js->spaces[js->nspaces];
	if (jail_path_normalize(path, s->dst, sizeof(s->dst), why,
				sizeof(why)) < 0)
		return jail_fail(err, errlen, "argument '%s': %s", arg, why);
	if (strcmp(s->dst, "/") == 0)
		return jail_fail(err, errlen, "argument '%s': jobtmpfs "
				 "destination must not be '/'", arg);
	for (i = 0; i < js->nspaces; i++)
		if (strcmp(js->spaces[i].dst, s->dst) == 0)
			return jail_fail(err, errlen, "argument '%s': jobtmpfs "
					 "destination '%s' given more than "
					 "once", arg, s->dst);
	s->max_bytes = 0;
	if (colon && job_space_parse_size(colon + 1, &s->max_bytes, why,
					  sizeof(why)) < 0)
		return jail_fail(err, errlen, "argument '%s': %s", arg, why);
	js->nspaces++;
	return 0;
}

int job_space_split_args(int argc, char *const argv[],
			 struct job_space_config *js, char **rest, int *nrest,
			 char *err, size_t errlen)
{
	bool nproc_seen = false;
	int i;

	memset(js, 0, sizeof(*js));
	*nrest = 0;
	for (i = 0; i < argc; i++) {
		const char *a = argv[i];

		if (!a)
			continue;
		if (strncmp(a, JOBTMPFS, strlen(JOBTMPFS)) == 0) {
			if (parse_jobtmpfs(a, a + strlen(JOBTMPFS), js, err,
					   errlen) < 0)
				return -1;
		} else if (strncmp(a, NPROC, strlen(NPROC)) == 0) {
			if (nproc_seen)
				return jail_fail(err, errlen, "argument '%s': "
						 "nproc= given more than once",
						 a);
			nproc_seen = true;
			if (parse_nproc(a, a + strlen(NPROC), &js->nproc, err,
					errlen) < 0)
				return -1;
		} else {
			rest[(*nrest)++] = argv[i];
		}
	}
	return 0;
}

unsigned long long job_space_size(const struct job_space_config *js,
				  uint64_t job_mem_mib)
{
	unsigned long long size = 0;
	size_t i;

	if (job_mem_mib > 0 && job_mem_mib <= (ULLONG_MAX >> 20)) {
		uint64_t reserve = job_mem_mib / 2;

		if (reserve > JOB_SPACE_RESERVE_MIB)
			reserve = JOB_SPACE_RESERVE_MIB;
		size = (unsigned long long)(job_mem_mib - reserve) << 20;
	}
	for (i = 0; i < js->nspaces; i++)
		if (js->spaces[i].max_bytes &&
		    (size == 0 || js->spaces[i].max_bytes < size))
			size = js->spaces[i].max_bytes;
	return size;
}

int job_space_mount_data(unsigned long long size, char *out, size_t outlen,
			 char *err, size_t errlen)
{
	int n;

	if (size)
		n = snprintf(out, outlen, "mode=0700,size=%llu", size);
	else
		n = snprintf(out, outlen, "mode=0700");
	if (n < 0 || (size_t)n >= outlen)
		return jail_fail(err, errlen, "tmpfs options do not fit");
	return 0;
}

int job_space_job_dir(const char *base, uint32_t jobid, char *out,
		      size_t outlen, char *err, size_t errlen)
{
	int n = snprintf(out, outlen, "%s/%" PRIu32, base, jobid);

	if (n < 0 || (size_t)n >= outlen)
		return jail_fail(err, errlen, "job directory path is too long");
	return 0;
}

int job_space_dir(const char *base, uint32_t jobid, size_t index, char *out,
		  size_t outlen, char *err, size_t errlen)
{
	int n = snprintf(out, outlen, "%s/%" PRIu32 "/%zu", base, jobid, index);

	if (n < 0 || (size_t)n >= outlen)
		return jail_fail(err, errlen, "job space path is too long");
	return 0;
}

int job_space_add_binds(struct jail_config *cfg,
			const struct job_space_config *js, const char *base,
			uint32_t jobid, char *err, size_t errlen)
{
	char src[JAIL_PATH_MAX];
	size_t i, j, first = cfg->nbinds;

	if (cfg->nbinds + js->nspaces > JAIL_MAX_BINDS)
		return jail_fail(err, errlen, "more than %d bind= and jobtmpfs=",
				 JAIL_MAX_BINDS);
	for (i = 0; i < js->nspaces; i++)
		for (j = 0; j < cfg->nbinds; j++)
			if (strcmp(cfg->binds[j].dst, js->spaces[i].dst) == 0)
				return jail_fail(err, errlen, "jobtmpfs "
						 "destination '%s' is also a "
						 "bind= destination",
						 js->spaces[i].dst);
	for (i = 0; i < js->nspaces; i++) {
		struct jail_bind *b = &cfg->binds[cfg->nbinds];

		if (job_space_dir(base, jobid, i, src, sizeof(src), err,
				  errlen) < 0)
			goto undo;
		b->src = strdup(src);
		b->dst = strdup(js->spaces[i].dst);
		b->ro = false;
		if (!b->src || !b->dst) {
			free(b->src);
			free(b->dst);
			b->src = b->dst = NULL;
			jail_fail(err, errlen, "out of memory");
			goto undo;
		}
		cfg->nbinds++;
	}
	return 0;
undo:
	while (cfg->nbinds > first) {
		struct jail_bind *b = &cfg->binds[--cfg->nbinds];

		free(b->src);
		free(b->dst);
		b->src = b->dst = NULL;
	}
	return -1;
}

int job_space_config_parse(struct jail_config *cfg,
			   struct job_space_config *js, int argc,
			   char *const argv[], char *err, size_t errlen)
{
	char **rest;
	size_t i, j;
	int nrest = 0, rc = -1;

	rest = calloc((size_t)(argc > 0 ? argc : 0) + 1, sizeof(*rest));
	if (!rest)
		return jail_fail(err, errlen, "out of memory");
	if (job_space_split_args(argc, argv, js, rest, &nrest, err,
				 errlen) < 0 ||
	    jail_config_parse(cfg, nrest, rest, err, errlen) < 0)
		goto out;
	for (i = 0; i < js->nspaces; i++)
		for (j = 0; j < cfg->nbinds; j++)
			if (strcmp(cfg->binds[j].dst, js->spaces[i].dst) == 0) {
				jail_fail(err, errlen, "jobtmpfs destination "
					  "'%s' is also a bind= destination",
					  js->spaces[i].dst);
				goto out;
			}
	rc = 0;
out:
	free(rest);
	return rc;
}
