/*
 * jail_enter.c - the mount/pivot_root sequence of the spank_jail plugin.
 *
 * Sequence (README.md explains the choices):
 *   1. unshare(CLONE_NEWNS)                      own mount table
 *   2. mount("/", MS_REC|MS_SLAVE)               nothing propagates back out
 *   3. bind root onto itself (MS_REC)            pivot_root needs a mount point
 *   4. recursive binds of /proc, /dev, /sys, then every bind=, each onto a
 *      target opened component by component with O_NOFOLLOW below the jail
 *      root, so a symlink inside the jail can never redirect a mount
 *   5. pivot_root(".", ".") from the jail root, umount2(".", MNT_DETACH)
 *   6. chdir to the task's working directory, or "/" when it is missing
 */
#define _GNU_SOURCE
#include "jail_enter.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

static void close_keep_errno(int fd)
{
	int saved = errno;

	if (fd >= 0)
		(void)close(fd);
	errno = saved;
}

/*
 * Open `rel` (normalised, absolute, inside the jail) below rootfd as an
 * O_PATH descriptor, refusing symlinks at every step. With `create`, missing
 * components are made: directories (mode 0755), and the last one as a
 * directory or an empty file (mode 0644) as `want_dir` says.
 * Returns the descriptor, or -1 with err set.
 */
static int open_in_jail(int rootfd, const char *root, const char *rel,
			bool create, bool want_dir, char *err, size_t errlen)
{
	char comp[JAIL_PATH_MAX];
	const char *p = rel;
	int dirfd;

	dirfd = fcntl(rootfd, F_DUPFD_CLOEXEC, 3);
	if (dirfd < 0)
		return jail_fail(err, errlen, "dup of jail root '%s': %s", root,
			    strerror(errno));

	while (*p == '/')
		p++;
	while (*p) {
		const char *start = p;
		size_t len;
		bool last;
		struct stat st;
		int fd, upto;

		while (*p && *p != '/')
			p++;
		len = (size_t)(p - start);
		while (*p == '/')
			p++;
		last = (*p == '\0');
		upto = (int)(start - rel) + (int)len;
		memcpy(comp, start, len);
		comp[len] = '\0';

		fd = openat(dirfd, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 && errno == ENOENT && create) {
			if (!last || want_dir) {
				if (mkdirat(dirfd, comp, 0755) < 0 &&
				    errno != EEXIST) {
					close_keep_errno(dirfd);
					return jail_fail(err, errlen,
						    "mkdir '%s%.*s': %s", root,
						    upto, rel,
						    strerror(errno));
				}
			} else {
				int wfd = openat(dirfd, comp,
						 O_WRONLY | O_CREAT | O_EXCL |
						 O_NOFOLLOW | O_CLOEXEC, 0644);
				if (wfd < 0 && errno != EEXIST) {
					close_keep_errno(dirfd);
					return jail_fail(err, errlen,
						    "create '%s%s': %s", root,
						    rel, strerror(errno));
				}
				if (wfd >= 0 && close(wfd) < 0) {
					close_keep_errno(dirfd);
					return jail_fail(err, errlen,
						    "close '%s%s': %s", root,
						    rel, strerror(errno));
				}
			}
			fd = openat(dirfd, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		}
		if (fd < 0) {
			close_keep_errno(dirfd);
			return jail_fail(err, errlen, "open '%s%.*s': %s", root,
				    upto, rel,
				    strerror(errno));
		}
		if (close(dirfd) < 0) {
			close_keep_errno(fd);
			return jail_fail(err, errlen, "close: %s", strerror(errno));
		}
		dirfd = fd;
		if (fstat(fd, &st) < 0) {
			close_keep_errno(fd);
			return jail_fail(err, errlen, "stat '%s%.*s': %s", root,
				    upto, rel,
				    strerror(errno));
		}
		if (S_ISLNK(st.st_mode)) {
			(void)close(fd);
			return jail_fail(err, errlen,
				    "'%s%.*s' is a symlink inside the jail; "
				    "refusing to mount through it", root,
				    upto, rel);
		}
		if ((!last || want_dir) && !S_ISDIR(st.st_mode)) {
			(void)close(fd);
			return jail_fail(err, errlen, "'%s%.*s' is not a directory",
				    root, upto,
				    rel);
		}
		if (last && !want_dir && S_ISDIR(st.st_mode)) {
			(void)close(fd);
			return jail_fail(err, errlen,
				    "'%s%s' is a directory but the bind source "
				    "is not", root, rel);
		}
	}
	return dirfd;
}

/* Mount flags a read-only remount must keep, read from the mount itself. */
static unsigned long kept_flags(const struct statvfs *sv)
{
	unsigned long f = 0;

	if (sv->f_flag & ST_NOSUID)
		f |= MS_NOSUID;
	if (sv->f_flag & ST_NODEV)
		f |= MS_NODEV;
	if (sv->f_flag & ST_NOEXEC)
		f |= MS_NOEXEC;
	if (sv->f_flag & ST_NOATIME)
		f |= MS_NOATIME;
	if (sv->f_flag & ST_NODIRATIME)
		f |= MS_NODIRATIME;
	if (sv->f_flag & ST_RELATIME)
		f |= MS_RELATIME;
	return f;
}

/* One bind mount of m->src onto m->rel inside the jail (rootfd). */
static int bind_one(int rootfd, const char *root, const struct jail_mount *m,
		    char *err, size_t errlen)
{
	char fdpath[64];
	struct stat sst, tst;
	struct statvfs sv;
	int tfd;

	if (stat(m->src, &sst) < 0)
		return jail_fail(err, errlen, "bind source '%s': %s", m->src,
			    strerror(errno));
	tfd = open_in_jail(rootfd, root, m->rel, true, S_ISDIR(sst.st_mode),
			   err, errlen);
	if (tfd < 0)
		return -1;
	(void)snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", tfd);
	if (mount(m->src, fdpath, NULL, MS_BIND | MS_REC, NULL) < 0) {
		close_keep_errno(tfd);
		return jail_fail(err, errlen, "bind mount '%s' on '%s': %s", m->src,
			    m->target, strerror(errno));
	}
	if (close(tfd) < 0)
		return jail_fail(err, errlen, "close: %s", strerror(errno));

	/* Open the target again: the walk now ends on the new mount. */
	tfd = open_in_jail(rootfd, root, m->rel, false, S_ISDIR(sst.st_mode),
			   err, errlen);
	if (tfd < 0)
		return -1;
	if (fstat(tfd, &tst) < 0) {
		close_keep_errno(tfd);
		return jail_fail(err, errlen, "stat '%s': %s", m->target,
			    strerror(errno));
	}
	if (tst.st_dev != sst.st_dev || tst.st_ino != sst.st_ino) {
		(void)close(tfd);
		return jail_fail(err, errlen,
			    "'%s' does not show '%s' after mounting it",
			    m->target, m->src);
	}
	if (m->ro) {
		(void)snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", tfd);
		if (fstatvfs(tfd, &sv) < 0) {
			close_keep_errno(tfd);
			return jail_fail(err, errlen, "statvfs '%s': %s", m->target,
				    strerror(errno));
		}
		if (mount(NULL, fdpath, NULL,
			  MS_REMOUNT | MS_BIND | MS_RDONLY | kept_flags(&sv),
			  NULL) < 0) {
			close_keep_errno(tfd);
			return jail_fail(err, errlen,
				    "remount '%s' read-only: %s", m->target,
				    strerror(errno));
		}
	}
	if (close(tfd) < 0)
		return jail_fail(err, errlen, "close: %s", strerror(errno));
	return 0;
}

/*
 * In the jail: to "/", then to `cwd` (the task's or the step's working
 * directory), or stay at "/" with a note when `cwd` is not usable there.
 */
static int enter_cwd(const char *cwd, char *err, size_t errlen, char *note,
		     size_t notelen)
{
	if (chdir("/") < 0)
		return jail_fail(err, errlen, "chdir to '/' in the jail: %s",
				 strerror(errno));
	if (cwd && cwd[0] == '/' && strcmp(cwd, "/") != 0 && chdir(cwd) < 0) {
		if (note && notelen > 0)
			(void)snprintf(note, notelen,
				       "working directory '%s' is not usable "
				       "in the jail (%s); starting in '/'",
				       cwd, strerror(errno));
		if (chdir("/") < 0)
			return jail_fail(err, errlen, "chdir to '/' in the "
					 "jail: %s", strerror(errno));
	}
	return 0;
}

int jail_enter(const struct jail_config *cfg, const char *cwd,
	       char *err, size_t errlen, char *note, size_t notelen)
{
	struct jail_mount *mounts;
	const char *root;
	int n, i, rootfd = -1, rc = -1;

	if (note && notelen > 0)
		note[0] = '\0';
	if (!cfg || !cfg->root)
		return jail_fail(err, errlen, "no jail root configured");
	root = cfg->root;

	mounts = calloc(JAIL_MAX_MOUNTS, sizeof(*mounts));
	if (!mounts)
		return jail_fail(err, errlen, "out of memory");
	n = jail_build_mounts(cfg, mounts, JAIL_MAX_MOUNTS, err, errlen);
	if (n < 1)
		goto out;

	if (unshare(CLONE_NEWNS) < 0) {
		jail_fail(err, errlen, "unshare(CLONE_NEWNS): %s", strerror(errno));
		goto out;
	}
	if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0) {
		jail_fail(err, errlen, "make '/' a recursive slave mount: %s",
		     strerror(errno));
		goto out;
	}
	/* mounts[0] is the root bound onto itself. */
	if (mount(root, root, NULL, MS_BIND | MS_REC, NULL) < 0) {
		jail_fail(err, errlen, "bind mount jail root '%s' onto itself: %s",
		     root, strerror(errno));
		goto out;
	}
	/* Opened after the bind, so it names the new mount. */
	rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0) {
		jail_fail(err, errlen, "open jail root '%s': %s", root,
		     strerror(errno));
		goto out;
	}
	for (i = 1; i < n; i++) {
		if (bind_one(rootfd, root, &mounts[i], err, errlen))
			goto out;
	}

	if (fchdir(rootfd) < 0) {
		jail_fail(err, errlen, "chdir to jail root '%s': %s", root,
		     strerror(errno));
		goto out;
	}
	/*
	 * pivot_root(".", "."): the old root ends up stacked on the new one
	 * and is detached right away, so no directory is ever created in
	 * (or left behind on) the shared jail file system.
	 */
	if (syscall(SYS_pivot_root, ".", ".") < 0) {
		jail_fail(err, errlen, "pivot_root into '%s': %s", root,
		     strerror(errno));
		goto out;
	}
	if (umount2(".", MNT_DETACH) < 0) {
		jail_fail(err, errlen, "detach the old root: %s", strerror(errno));
		goto out;
	}
	if (enter_cwd(cwd, err, errlen, note, notelen) < 0)
		goto out;
	rc = 0;
out:
	if (rootfd >= 0 && close(rootfd) < 0 && rc == 0)
		rc = jail_fail(err, errlen, "close: %s", strerror(errno));
	free(mounts);
	return rc;
}

static void forget(struct jail_return *back)
{
	if (back->mntns >= 0)
		(void)close(back->mntns);
	if (back->cwd >= 0)
		(void)close(back->cwd);
	back->mntns = -1;
	back->cwd = -1;
}

int jail_view_leave(struct jail_return *back, char *err, size_t errlen)
{
	int rc = 0;

	if (back->mntns < 0)
		return 0;
	/*
	 * A thread started while this one was in the view (slurmstepd's I/O
	 * thread for srun steps) shares its root and cwd, and setns refuses a
	 * thread that shares them: take a copy of its own first (a no-op when
	 * nothing is shared). That thread stays in the view.
	 */
	if (unshare(CLONE_FS) < 0)
		rc = jail_fail(err, errlen, "unshare(CLONE_FS): %s",
			       strerror(errno));
	/* setns also sets the thread's root and cwd to the namespace's root. */
	else if (setns(back->mntns, CLONE_NEWNS) < 0)
		rc = jail_fail(err, errlen, "return to the node's mount "
			       "namespace: %s", strerror(errno));
	else if (fchdir(back->cwd) < 0)
		rc = jail_fail(err, errlen, "return to the working directory: "
			       "%s", strerror(errno));
	forget(back);
	return rc;
}

int jail_view_keep_way_back(struct jail_return *back, char *err,
			    size_t errlen)
{
	back->mntns = open("/proc/thread-self/ns/mnt", O_RDONLY | O_CLOEXEC);
	if (back->mntns < 0)
		return jail_fail(err, errlen, "open /proc/thread-self/ns/mnt: "
				 "%s", strerror(errno));
	back->cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (back->cwd < 0) {
		jail_fail(err, errlen, "open the working directory: %s",
			  strerror(errno));
		forget(back);
		return -1;
	}
	return 0;
}

int jail_view_abandon(struct jail_return *back, char *err, size_t errlen)
{
	char ignored[JAIL_ERR_MAX];

	if (jail_view_leave(back, ignored, sizeof(ignored)) < 0) {
		size_t used = strlen(err);

		if (used + 1 < errlen)
			(void)snprintf(err + used, errlen - used,
				       "; then could not return: %s", ignored);
	}
	return -1;
}

int jail_view_enter(const struct jail_config *cfg, const char *cwd,
		    struct jail_return *back, char *err, size_t errlen,
		    char *note, size_t notelen)
{
	if (jail_view_keep_way_back(back, err, errlen) < 0)
		return -1;
	if (jail_enter(cfg, cwd, err, errlen, note, notelen) < 0)
		return jail_view_abandon(back, err, errlen);
	return 0;
}

int jail_view_hold(char *err, size_t errlen)
{
	int fd = open("/proc/thread-self/ns/mnt", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		jail_fail(err, errlen, "hold the view: open "
			  "/proc/thread-self/ns/mnt: %s", strerror(errno));
	return fd;
}

/* The held view's root must be the jail root: same device and inode. */
static int reenter_view(const struct jail_config *cfg, int view,
			const char *cwd, char *err, size_t errlen,
			char *note, size_t notelen)
{
	struct stat jail_st, root_st;

	if (stat(cfg->root, &jail_st) < 0)
		return jail_fail(err, errlen, "stat jail root '%s': %s",
				 cfg->root, strerror(errno));
	if (unshare(CLONE_FS) < 0)
		return jail_fail(err, errlen, "unshare(CLONE_FS): %s",
				 strerror(errno));
	/* setns also sets the thread's root and cwd to the view's root. */
	if (setns(view, CLONE_NEWNS) < 0)
		return jail_fail(err, errlen, "enter the held view: %s",
				 strerror(errno));
	if (stat("/", &root_st) < 0)
		return jail_fail(err, errlen, "stat '/' in the held view: %s",
				 strerror(errno));
	if (root_st.st_dev != jail_st.st_dev ||
	    root_st.st_ino != jail_st.st_ino)
		return jail_fail(err, errlen, "the held view's root is not "
				 "jail root '%s'", cfg->root);
	return enter_cwd(cwd, err, errlen, note, notelen);
}

int jail_view_reenter(const struct jail_config *cfg, int view, const char *cwd,
		      struct jail_return *back, char *err, size_t errlen,
		      char *note, size_t notelen)
{
	if (note && notelen > 0)
		note[0] = '\0';
	if (jail_view_keep_way_back(back, err, errlen) < 0)
		return -1;
	if (reenter_view(cfg, view, cwd, err, errlen, note, notelen) < 0)
		return jail_view_abandon(back, err, errlen);
	return 0;
}
