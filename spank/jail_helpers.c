/*
 * jail_helpers.c - pure helpers of the spank_jail plugin (see jail_helpers.h).
 * No Slurm, no system calls beyond memory allocation.
 */
#include "jail_helpers.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((format(printf, 3, 4)))
int jail_fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen > 0) {
		va_start(ap, fmt);
		(void)vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -1;
}

int jail_path_normalize(const char *in, char *out, size_t outlen,
			char *err, size_t errlen)
{
	size_t o = 0;
	const char *p;

	if (!in || in[0] == '\0')
		return jail_fail(err, errlen, "path is empty");
	if (in[0] != '/')
		return jail_fail(err, errlen, "'%.200s' is not an absolute path", in);
	for (p = in; *p; p++) {
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return jail_fail(err, errlen,
				    "path contains a control character");
	}
	if (outlen < 2)
		return jail_fail(err, errlen, "'%.200s' is too long", in);

	p = in;
	while (*p) {
		const char *start;
		size_t len;

		while (*p == '/')
			p++;
		if (!*p)
			break;
		start = p;
		while (*p && *p != '/')
			p++;
		len = (size_t)(p - start);
		if (len == 1 && start[0] == '.')
			continue;
		if (len == 2 && start[0] == '.' && start[1] == '.')
			return jail_fail(err, errlen,
				    "'%.200s' has a '..' component", in);
		/* room for '/', the component and the final NUL */
		if (o + 1 + len + 1 > outlen || o + 1 + len + 1 > JAIL_PATH_MAX)
			return jail_fail(err, errlen, "'%.200s' is too long", in);
		out[o++] = '/';
		memcpy(out + o, start, len);
		o += len;
	}
	if (o == 0)
		out[o++] = '/';
	out[o] = '\0';
	return 0;
}

int jail_path_join(const char *root, const char *path, char *out,
		   size_t outlen, char *err, size_t errlen)
{
	char nroot[JAIL_PATH_MAX];
	char npath[JAIL_PATH_MAX];
	char why[JAIL_ERR_MAX];
	size_t rl, pl;

	if (jail_path_normalize(root, nroot, sizeof(nroot), why, sizeof(why)))
		return jail_fail(err, errlen, "jail root: %s", why);
	if (jail_path_normalize(path, npath, sizeof(npath), why, sizeof(why)))
		return jail_fail(err, errlen, "%s", why);

	rl = strlen(nroot);
	pl = strlen(npath);
	if (rl == 1)            /* root "/" : the path itself */
		rl = 0;
	if (pl == 1 && rl > 0)  /* path "/" : the root itself */
		pl = 0;
	if (rl + pl + 1 > outlen || rl + pl + 1 > JAIL_PATH_MAX)
		return jail_fail(err, errlen, "'%.200s' joined onto '%.200s' is too long",
			    path, root);
	memcpy(out, nroot, rl);
	memcpy(out + rl, npath, pl);
	out[rl + pl] = '\0';
	return 0;
}

struct jail_config *jail_config_new(void)
{
	return calloc(1, sizeof(struct jail_config));
}

void jail_config_clear(struct jail_config *cfg)
{
	size_t i;

	if (!cfg)
		return;
	free(cfg->root);
	for (i = 0; i < cfg->nbinds; i++) {
		free(cfg->binds[i].src);
		free(cfg->binds[i].dst);
	}
	memset(cfg, 0, sizeof(*cfg));
}

void jail_config_free(struct jail_config *cfg)
{
	jail_config_clear(cfg);
	free(cfg);
}

/* Normalise `in` into a fresh heap string; `what` prefixes the message. */
static int dup_normalized(const char *arg, const char *what, const char *in,
			  char **out, char *err, size_t errlen)
{
	char buf[JAIL_PATH_MAX];
	char why[JAIL_ERR_MAX];

	if (jail_path_normalize(in, buf, sizeof(buf), why, sizeof(why)))
		return jail_fail(err, errlen, "argument '%.200s': %s: %s",
			    arg, what, why);
	*out = strdup(buf);
	if (!*out)
		return jail_fail(err, errlen, "argument '%.200s': out of memory", arg);
	return 0;
}

static int parse_root(struct jail_config *cfg, const char *arg,
		      const char *val, char *err, size_t errlen)
{
	if (cfg->root)
		return jail_fail(err, errlen,
			    "argument '%.200s': root= given more than once", arg);
	if (dup_normalized(arg, "jail root", val, &cfg->root, err, errlen))
		return -1;
	if (strcmp(cfg->root, "/") == 0)
		return jail_fail(err, errlen,
			    "argument '%.200s': jail root must not be '/'", arg);
	return 0;
}

static int parse_bind(struct jail_config *cfg, const char *arg,
		      const char *val, char *err, size_t errlen)
{
	struct jail_bind b = { 0 };
	const char *c1, *c2;
	char *src = NULL, *dst = NULL;
	size_t i;
	int rc = -1;

	if (cfg->nbinds >= JAIL_MAX_BINDS)
		return jail_fail(err, errlen, "argument '%.200s': more than %d bind=",
			    arg, JAIL_MAX_BINDS);

	c1 = strchr(val, ':');
	c2 = c1 ? strchr(c1 + 1, ':') : NULL;
	if (c2 && strchr(c2 + 1, ':'))
		return jail_fail(err, errlen,
			    "argument '%.200s': expected bind=SRC[:DST[:ro]]", arg);
	if (c2 && strcmp(c2 + 1, "ro") != 0)
		return jail_fail(err, errlen,
			    "argument '%.200s': unknown bind option '%.200s' (only 'ro')",
			    arg, c2 + 1);

	src = c1 ? strndup(val, (size_t)(c1 - val)) : strdup(val);
	if (c1)
		dst = c2 ? strndup(c1 + 1, (size_t)(c2 - c1 - 1))
			 : strdup(c1 + 1);
	if (!src || (c1 && !dst)) {
		jail_fail(err, errlen, "argument '%.200s': out of memory", arg);
		goto out;
	}
	if (src[0] == '\0') {
		jail_fail(err, errlen, "argument '%.200s': bind source is empty", arg);
		goto out;
	}
	if (dst && dst[0] == '\0') {
		jail_fail(err, errlen, "argument '%.200s': bind destination is empty",
		     arg);
		goto out;
	}
	if (dup_normalized(arg, "bind source", src, &b.src, err, errlen))
		goto out;
	if (dup_normalized(arg, "bind destination", dst ? dst : src, &b.dst,
			   err, errlen))
		goto out;
	if (strcmp(b.dst, "/") == 0) {
		jail_fail(err, errlen,
		     "argument '%.200s': bind destination must not be '/'", arg);
		goto out;
	}
	for (i = 0; i < cfg->nbinds; i++) {
		if (strcmp(cfg->binds[i].dst, b.dst) == 0) {
			jail_fail(err, errlen,
			     "argument '%.200s': bind destination '%.200s' given more than once",
			     arg, b.dst);
			goto out;
		}
	}
	b.ro = c2 != NULL;
	cfg->binds[cfg->nbinds++] = b;
	b.src = b.dst = NULL;
	rc = 0;
out:
	free(src);
	free(dst);
	free(b.src);
	free(b.dst);
	return rc;
}

/* `NAME=on` or `NAME=off`, at most once. */
static int parse_switch(const char *arg, const char *name, bool *seen,
			bool *on, char *err, size_t errlen)
{
	const char *value = arg + strlen(name) + 1;

	if (*seen)
		return jail_fail(err, errlen,
				 "argument '%.200s': %s= given more than once",
				 arg, name);
	*seen = true;
	if (strcmp(value, "on") == 0)
		*on = true;
	else if (strcmp(value, "off") == 0)
		*on = false;
	else
		return jail_fail(err, errlen,
				 "argument '%.200s': expected %s=on or %s=off",
				 arg, name, name);
	return 0;
}

int jail_config_parse(struct jail_config *cfg, int argc, char *const argv[],
		      char *err, size_t errlen)
{
	bool seccomp_seen = false;
	bool containers_seen = false;
	bool on;
	int i;

	if (!cfg || argc < 0 || (argc > 0 && !argv))
		return jail_fail(err, errlen, "invalid call");

	for (i = 0; i < argc; i++) {
		const char *arg = argv[i];

		if (!arg)
			return jail_fail(err, errlen, "argument %d is missing", i + 1);
		if (strncmp(arg, "root=", 5) == 0) {
			if (parse_root(cfg, arg, arg + 5, err, errlen))
				return -1;
		} else if (strncmp(arg, "bind=", 5) == 0) {
			if (parse_bind(cfg, arg, arg + 5, err, errlen))
				return -1;
		} else if (strncmp(arg, "seccomp=", 8) == 0) {
			if (parse_switch(arg, "seccomp", &seccomp_seen, &on,
					 err, errlen))
				return -1;
			cfg->seccomp_off = !on;
		} else if (strncmp(arg, "containers=", 11) == 0) {
			if (parse_switch(arg, "containers", &containers_seen,
					 &on, err, errlen))
				return -1;
			cfg->containers = on;
		} else if (strcmp(arg, "disabled") == 0) {
			cfg->disabled = true;
		} else {
			return jail_fail(err, errlen,
				    "unknown argument '%.200s' (expected root=, bind=, seccomp=, containers= or disabled)",
				    arg);
		}
	}
	if (!cfg->root && !cfg->disabled)
		return jail_fail(err, errlen, "missing required argument root=");
	return 0;
}

static int add_mount(struct jail_mount *out, size_t max, size_t *n,
		     const char *root, enum jail_mount_kind kind,
		     const char *src, const char *rel, bool ro,
		     char *err, size_t errlen)
{
	struct jail_mount *m;
	char why[JAIL_ERR_MAX];

	if (*n >= max)
		return jail_fail(err, errlen, "more than %zu mounts", max);
	m = &out[*n];
	memset(m, 0, sizeof(*m));
	if (jail_path_join(root, rel, m->target, sizeof(m->target),
			   why, sizeof(why)))
		return jail_fail(err, errlen, "mount of '%.200s': %s", src, why);
	if (jail_path_normalize(rel, m->rel, sizeof(m->rel), why, sizeof(why)))
		return jail_fail(err, errlen, "mount of '%.200s': %s", src, why);
	m->kind = kind;
	m->src = src;
	m->ro = ro;
	(*n)++;
	return 0;
}

int jail_build_mounts(const struct jail_config *cfg, struct jail_mount *out,
		      size_t max, char *err, size_t errlen)
{
	size_t n = 0, i;

	if (!cfg || !cfg->root || (max > 0 && !out))
		return jail_fail(err, errlen, "no jail root configured");
	if (add_mount(out, max, &n, cfg->root, JAIL_MOUNT_ROOT, cfg->root,
		      "/", false, err, errlen) ||
	    add_mount(out, max, &n, cfg->root, JAIL_MOUNT_PROC, "/proc",
		      "/proc", false, err, errlen) ||
	    add_mount(out, max, &n, cfg->root, JAIL_MOUNT_DEV, "/dev",
		      "/dev", false, err, errlen) ||
	    add_mount(out, max, &n, cfg->root, JAIL_MOUNT_SYS, "/sys",
		      "/sys", false, err, errlen))
		return -1;
	for (i = 0; i < cfg->nbinds; i++) {
		const struct jail_bind *b = &cfg->binds[i];

		if (add_mount(out, max, &n, cfg->root, JAIL_MOUNT_BIND, b->src,
			      b->dst, b->ro, err, errlen))
			return -1;
	}
	return (int)n;
}
