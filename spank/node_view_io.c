/*
 * node_view_io.c - the mounts of the view of an MPI step's files
 * (node_view.h). Runs as root in slurmstepd's main thread: every path is
 * opened one component at a time from '/' with O_NOFOLLOW, each directory on
 * the way checked to be root's and changeable by nobody else
 * (node_view_untrusted), and the mount made on the descriptors, so no user's
 * link or directory can redirect it.
 */
#define _GNU_SOURCE
#include "node_view.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

static void close_keep_errno(int fd)
{
	int saved = errno;

	if (fd >= 0)
		(void)close(fd);
	errno = saved;
}

/*
 * Open the absolute, normalised `path` as an O_PATH descriptor, walking from
 * '/' with O_NOFOLLOW and checking every directory (the root included) with
 * node_view_untrusted. A missing component sets *missing (when given) and
 * fails. Returns the descriptor, or -1 with err set.
 */
static int open_trusted(const char *path, bool *missing, struct stat *st,
			char *err, size_t errlen)
{
	char comp[JAIL_PATH_MAX];
	const char *p = path;
	const char *why;
	int dirfd, fd;

	if (missing)
		*missing = false;
	if (path[0] != '/')
		return jail_fail(err, errlen, "'%s' is not an absolute path",
				 path);
	dirfd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return jail_fail(err, errlen, "open '/': %s", strerror(errno));
	if (fstat(dirfd, st) < 0) {
		close_keep_errno(dirfd);
		return jail_fail(err, errlen, "stat '/': %s", strerror(errno));
	}
	while (*p == '/')
		p++;
	why = node_view_untrusted(st->st_uid, st->st_mode, *p == '\0');
	if (why) {
		(void)close(dirfd);
		return jail_fail(err, errlen, "'/' %s; refusing to mount "
				 "there", why);
	}
	while (*p) {
		const char *start = p;
		size_t len;
		int upto;

		while (*p && *p != '/')
			p++;
		len = (size_t)(p - start);
		while (*p == '/')
			p++;
		upto = (int)(start - path) + (int)len;
		if (len >= sizeof(comp)) {
			(void)close(dirfd);
			return jail_fail(err, errlen, "'%s' is too long", path);
		}
		memcpy(comp, start, len);
		comp[len] = '\0';
		fd = openat(dirfd, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			if (errno == ENOENT && missing)
				*missing = true;
			close_keep_errno(dirfd);
			return jail_fail(err, errlen, "open '%.*s': %s", upto,
					 path, strerror(errno));
		}
		if (close(dirfd) < 0) {
			close_keep_errno(fd);
			return jail_fail(err, errlen, "close: %s",
					 strerror(errno));
		}
		dirfd = fd;
		if (fstat(fd, st) < 0) {
			close_keep_errno(fd);
			return jail_fail(err, errlen, "stat '%.*s': %s", upto,
					 path, strerror(errno));
		}
		why = node_view_untrusted(st->st_uid, st->st_mode, *p == '\0');
		if (why) {
			(void)close(fd);
			return jail_fail(err, errlen, "'%.*s' %s; refusing to "
					 "mount through it", upto, path, why);
		}
	}
	return dirfd;
}

/*
 * One bind of b->src over b->dst. Returns 1 when done, 0 when the
 * destination is missing in the container (note says so), -1 on failure.
 */
static int bind_one(const struct node_view_bind *b, char *err, size_t errlen,
		    char *note, size_t notelen)
{
	char sfd[64], tfd[64];
	struct stat sst, tst;
	bool missing;
	int s, t;

	s = open_trusted(b->src, NULL, &sst, err, errlen);
	if (s < 0)
		return -1;
	t = open_trusted(b->dst, &missing, &tst, err, errlen);
	if (t < 0) {
		close_keep_errno(s);
		if (!missing)
			return -1;
		if (note && notelen > 0 && !note[0])
			(void)snprintf(note, notelen, "'%s' is not in the "
				       "worker container: an MPI step's files "
				       "there are refused", b->dst);
		return 0;
	}
	(void)snprintf(sfd, sizeof(sfd), "/proc/self/fd/%d", s);
	(void)snprintf(tfd, sizeof(tfd), "/proc/self/fd/%d", t);
	if (mount(sfd, tfd, NULL, MS_BIND | MS_REC, NULL) < 0) {
		jail_fail(err, errlen, "bind mount '%s' on '%s': %s", b->src,
			  b->dst, strerror(errno));
		close_keep_errno(s);
		close_keep_errno(t);
		return -1;
	}
	if (close(s) < 0 || close(t) < 0)
		return jail_fail(err, errlen, "close: %s", strerror(errno));
	/* Open the destination again: the walk now ends on the new mount. */
	t = open_trusted(b->dst, NULL, &tst, err, errlen);
	if (t < 0)
		return -1;
	if (close(t) < 0)
		return jail_fail(err, errlen, "close: %s", strerror(errno));
	if (tst.st_dev != sst.st_dev || tst.st_ino != sst.st_ino)
		return jail_fail(err, errlen, "'%s' does not show '%s' after "
				 "mounting it", b->dst, b->src);
	return 1;
}

int node_view_enter(const struct node_view_bind *binds, size_t n,
		    struct jail_return *back, char *err, size_t errlen,
		    char *note, size_t notelen)
{
	size_t i;

	if (note && notelen > 0)
		note[0] = '\0';
	if (jail_view_keep_way_back(back, err, errlen) < 0)
		return -1;
	/* The calling thread alone: its own fs attributes and mount table. */
	if (unshare(CLONE_FS | CLONE_NEWNS) < 0) {
		jail_fail(err, errlen, "unshare(CLONE_FS | CLONE_NEWNS): %s",
			  strerror(errno));
		return jail_view_abandon(back, err, errlen);
	}
	if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0) {
		jail_fail(err, errlen, "make '/' a recursive slave mount: %s",
			  strerror(errno));
		goto fail;
	}
	for (i = 0; i < n; i++)
		if (bind_one(&binds[i], err, errlen, note, notelen) < 0)
			goto fail;
	return 0;
fail:
	/* err keeps the first failure; the way back is best effort. */
	return jail_view_abandon(back, err, errlen);
}
