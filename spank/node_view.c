/*
 * node_view.c - the pure part of the view of an MPI step's files
 * (node_view.h): which binds, and which directories on their way root may
 * trust. No system calls; checked by `make test-node-view`.
 */
#define _GNU_SOURCE
#include "node_view.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int node_view_binds(const struct job_space_config *js, const char *base,
		    uint32_t jobid, struct node_view_bind *out, size_t max,
		    char *err, size_t errlen)
{
	size_t i;

	if (js->nspaces > max)
		return jail_fail(err, errlen, "%zu job spaces, room for %zu",
				 js->nspaces, max);
	for (i = 0; i < js->nspaces; i++) {
		size_t len = strlen(js->spaces[i].dst);

		if (job_space_dir(base, jobid, i, out[i].src,
				  sizeof(out[i].src), err, errlen) < 0)
			return -1;
		if (len >= sizeof(out[i].dst))
			return jail_fail(err, errlen, "job space path is too "
					 "long");
		memcpy(out[i].dst, js->spaces[i].dst, len + 1);
	}
	return (int)js->nspaces;
}

const char *node_view_untrusted(uid_t uid, mode_t mode, bool last)
{
	if (S_ISLNK(mode))
		return "is a symbolic link";
	if (!S_ISDIR(mode))
		return "is not a directory";
	if (uid != 0)
		return "is not root's";
	if (!last && (mode & (S_IWGRP | S_IWOTH)) && !(mode & S_ISVTX))
		return "can be changed by someone other than root";
	return NULL;
}
