/*
 * fuzz_parse.c - libFuzzer target for the plugstack.conf argument parser.
 *
 * The input is split on newlines into arguments. Whatever the parser
 * accepts must hold the invariants the plugin relies on; a violation
 * aborts (and so becomes a crash libFuzzer reports):
 *   - root and every bind path are normalised absolute paths without '..',
 *   - every mount target is the root or lies below it, and equals root+rel,
 *   - mounts come in the order root, proc, dev, sys, binds.
 * jail_path_join is fuzzed on the raw input too.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jail_helpers.h"

#define MAX_ARGS 256

static void check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "invariant violated: %s\n", what);
		abort();
	}
}

static void check_normalized(const char *p)
{
	size_t n = strlen(p);

	check(p[0] == '/', "path is absolute");
	check(n == 1 || p[n - 1] != '/', "no trailing slash");
	check(strstr(p, "//") == NULL, "no repeated slash");
	check(strstr(p, "/./") == NULL && (n < 2 || strcmp(p + n - 2, "/.")),
	      "no '.' component");
	check(strstr(p, "/../") == NULL && (n < 3 || strcmp(p + n - 3, "/..")),
	      "no '..' component");
}

static void check_inside(const char *root, const char *target, const char *rel)
{
	size_t rl = strlen(root);
	char joined[2 * JAIL_PATH_MAX];

	check_normalized(target);
	check(strncmp(target, root, rl) == 0 &&
	      (target[rl] == '\0' || target[rl] == '/'), "target inside root");
	snprintf(joined, sizeof(joined), "%s%s", root, strcmp(rel, "/") ? rel : "");
	check(strcmp(joined, target) == 0, "target == root + rel");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size + 1);
	char *argv[MAX_ARGS];
	char err[JAIL_ERR_MAX];
	char out[JAIL_PATH_MAX];
	struct jail_config cfg;
	struct jail_mount *mounts;
	int argc = 0, n, i;
	char *p;

	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';

	/* the whole input as one path, joined onto a fixed root */
	if (jail_path_join("/mnt/jail", buf, out, sizeof(out), err, sizeof(err)) == 0) {
		const char *rel = out + strlen("/mnt/jail");

		check_inside("/mnt/jail", out, rel[0] ? rel : "/");
	}

	for (p = buf; argc < MAX_ARGS;) {
		char *nl = strchr(p, '\n');

		argv[argc++] = p;
		if (!nl)
			break;
		*nl = '\0';
		p = nl + 1;
	}

	memset(&cfg, 0, sizeof(cfg));
	err[0] = '\0';
	if (jail_config_parse(&cfg, argc, argv, err, sizeof(err)) < 0) {
		check(err[0] != '\0', "a failure has a message");
		jail_config_clear(&cfg);
		free(buf);
		return 0;
	}
	check(cfg.root != NULL || cfg.disabled, "root unless disabled");
	if (cfg.root) {
		check_normalized(cfg.root);
		check(strcmp(cfg.root, "/") != 0, "root is not /");
		mounts = calloc(JAIL_MAX_MOUNTS, sizeof(*mounts));
		check(mounts != NULL, "alloc");
		n = jail_build_mounts(&cfg, mounts, JAIL_MAX_MOUNTS, err, sizeof(err));
		if (n >= 0) {
			check((size_t)n == 4 + cfg.nbinds, "one mount per bind");
			for (i = 0; i < n; i++) {
				check(mounts[i].kind == (i < 4 ? (enum jail_mount_kind)i
							       : JAIL_MOUNT_BIND),
				      "mount order");
				check_normalized(mounts[i].src);
				check_normalized(mounts[i].rel);
				check_inside(cfg.root, mounts[i].target, mounts[i].rel);
				if (i >= 4)
					check(strcmp(mounts[i].rel, "/") != 0,
					      "bind never covers the root");
			}
		} else {
			check(err[0] != '\0', "a failure has a message");
		}
		free(mounts);
	}
	jail_config_clear(&cfg);
	free(buf);
	return 0;
}
