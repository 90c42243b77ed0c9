/*
 * jail_helpers.h - pure helpers of the spank_jail plugin.
 *
 * Nothing here touches the file system, the mount table or Slurm: argument
 * parsing into a config struct, path normalisation, joining a path onto the
 * jail root without escaping it, and building the ordered list of mounts.
 * They are unit-tested through cffi (tests/unit/test_spank_helpers.py) and
 * fuzzed with libFuzzer (spank/fuzz/fuzz_parse.c).
 *
 * Every function that can fail returns 0 on success and -1 on failure, and on
 * failure writes a human-readable message (no trailing newline) into the
 * caller's `err` buffer of `errlen` bytes.
 */
#ifndef WARDEN_JAIL_HELPERS_H
#define WARDEN_JAIL_HELPERS_H

#include <stdbool.h>
#include <stddef.h>

/* Longest path accepted anywhere, terminating NUL included (Linux PATH_MAX). */
#define JAIL_PATH_MAX 4096
/* Most bind= arguments accepted. */
#define JAIL_MAX_BINDS 64
/* Size of an error buffer that always holds a whole message. */
#define JAIL_ERR_MAX 512

struct jail_bind {
	char *src;   /* normalised absolute path outside the jail */
	char *dst;   /* normalised absolute path inside the jail */
	bool ro;     /* remount read-only after binding */
};

struct jail_config {
	bool disabled;            /* `disabled`: load, validate, do nothing */
	bool seccomp_off;         /* `seccomp=off`: no filter for users' steps */
	bool containers;          /* `containers=on`: pyxis runs before the filter */
	char *root;               /* `root=`: normalised absolute path, never "/" */
	size_t nbinds;
	struct jail_bind binds[JAIL_MAX_BINDS];
};

enum jail_mount_kind {
	JAIL_MOUNT_ROOT = 0,  /* the jail root bound onto itself */
	JAIL_MOUNT_PROC = 1,
	JAIL_MOUNT_DEV = 2,
	JAIL_MOUNT_SYS = 3,
	JAIL_MOUNT_BIND = 4,  /* one bind= argument */
};

struct jail_mount {
	enum jail_mount_kind kind;
	const char *src;            /* borrowed from the config or a literal */
	char target[JAIL_PATH_MAX]; /* absolute host path: root + rel */
	char rel[JAIL_PATH_MAX];    /* path inside the jail ("/" for the root) */
	bool ro;
};

/* Mounts built for a config: root, proc, dev, sys, then every bind. */
#define JAIL_MAX_MOUNTS (4 + JAIL_MAX_BINDS)

/*
 * Parse plugstack.conf arguments into *cfg (which must be zeroed or fresh
 * from jail_config_new). Accepted: `root=/abs/path` (required unless
 * `disabled`), `bind=SRC[:DST[:ro]]` (repeatable), `seccomp=on|off` and
 * `containers=on|off` (each at most once; default seccomp on, containers
 * off), `disabled`. Anything else fails. On failure *cfg is left freeable with jail_config_clear.
 */
int jail_config_parse(struct jail_config *cfg, int argc, char *const argv[],
		      char *err, size_t errlen);

/* Heap-allocate a zeroed config; NULL when out of memory. */
struct jail_config *jail_config_new(void);
/* Free what the config owns and zero it; the struct itself stays. */
void jail_config_clear(struct jail_config *cfg);
/* jail_config_clear, then free the struct. NULL is accepted. */
void jail_config_free(struct jail_config *cfg);

/*
 * Normalise an absolute path: collapse repeated slashes, drop "." components
 * and any trailing slash. Fails on a relative or empty path, a ".."
 * component, a control character, or a result that does not fit in outlen.
 */
int jail_path_normalize(const char *in, char *out, size_t outlen,
			char *err, size_t errlen);

/*
 * Join an absolute path onto the jail root: normalise both, then
 * root + path ("/" maps to the root itself). The result always lies inside
 * the root, since ".." is refused.
 */
int jail_path_join(const char *root, const char *path, char *out,
		   size_t outlen, char *err, size_t errlen);

/*
 * Fill out[0..max) with the mounts for cfg in the order they must be made:
 * the jail root bound onto itself, /proc, /dev, /sys, then the binds in the
 * order given. Returns the number of mounts, or -1 (with err) when max is
 * too small or a path does not fit.
 */
int jail_build_mounts(const struct jail_config *cfg, struct jail_mount *out,
		      size_t max, char *err, size_t errlen);

/*
 * Write a formatted message into err (when err is not NULL and errlen > 0)
 * and return -1: the error convention of every function here and in
 * jail_enter.c.
 */
__attribute__((format(printf, 3, 4)))
int jail_fail(char *err, size_t errlen, const char *fmt, ...);

#endif /* WARDEN_JAIL_HELPERS_H */
