/*
 * jail_enter_test.c - runs the plugin's real mount/pivot_root sequence
 * (jail_enter.c) against a throw-away jail under /tmp, as root, and checks
 * what a task would see afterwards. `make -C spank test-enter` runs it under
 * `unshare -m`, so nothing leaks into the caller's mount table either way.
 *
 * Each scenario runs in a forked child (jail_enter cannot be undone); the
 * child's exit status is its number of failed checks.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "jail_enter.h"
#include "jail_helpers.h"
#include "tap.h"

static char jail[64], src[64], host_marker[128], srcfile[128];

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (!f || fputs(text, f) < 0 || fclose(f) != 0)
		die(path);
}

static void mkdir_p(const char *path)
{
	char buf[512];
	char *p;

	snprintf(buf, sizeof(buf), "%s", path);
	for (p = buf + 1; *p; p++) {
		if (*p == '/') {
			*p = '\0';
			if (mkdir(buf, 0755) < 0 && errno != EEXIST)
				die(buf);
			*p = '/';
		}
	}
	if (mkdir(buf, 0755) < 0 && errno != EEXIST)
		die(buf);
}

static bool exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

/* Mounts whose mount point (5th field of mountinfo) is "/". */
static int count_root_mounts(void)
{
	FILE *f = fopen("/proc/self/mountinfo", "r");
	char line[4096], mp[4096];
	int n = 0;

	if (!f)
		die("/proc/self/mountinfo");
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) == 1 &&
		    strcmp(mp, "/") == 0)
			n++;
	fclose(f);
	return n;
}

static struct jail_config *config(int argc, char **argv)
{
	struct jail_config *cfg = jail_config_new();
	char err[JAIL_ERR_MAX];

	if (!cfg)
		die("calloc");
	if (jail_config_parse(cfg, argc, argv, err, sizeof(err)) < 0) {
		fprintf(stderr, "config: %s\n", err);
		exit(2);
	}
	return cfg;
}

static void enter_full(void)
{
	char root_arg[128], b1[256], b2[256], b3[256];
	char *argv[4];
	char err[JAIL_ERR_MAX], note[JAIL_ERR_MAX], cwd[512];
	struct jail_config *cfg;
	struct stat root_st, dot_st;
	int fd, i;

	snprintf(root_arg, sizeof(root_arg), "root=%s", jail);
	snprintf(b1, sizeof(b1), "bind=%s:/scratch/deep", src);       /* dir, missing mount point */
	snprintf(b2, sizeof(b2), "bind=%s:/opt/ro:ro", src);          /* dir, read-only */
	snprintf(b3, sizeof(b3), "bind=%s:/etc/injected", srcfile);   /* file */
	argv[0] = root_arg; argv[1] = b1; argv[2] = b2; argv[3] = b3;
	cfg = config(4, argv);

	i = jail_enter(cfg, "/home/alice", err, sizeof(err), note, sizeof(note));
	ok(i == 0, "jail_enter succeeds (%s)", i ? err : "no error");
	if (i)
		return;
	ok(note[0] == '\0', "no working-directory note (%s)", note);
	ok(getcwd(cwd, sizeof(cwd)) && strcmp(cwd, "/home/alice") == 0,
	   "cwd is /home/alice inside the jail (got %s)", cwd);
	ok(exists("/jail-marker"), "the jail's /jail-marker is at /");
	ok(!exists(host_marker), "host file %s is not visible", host_marker);
	ok(exists("/proc/self/status"), "/proc is mounted");
	fd = open("/dev/null", O_WRONLY);
	ok(fd >= 0 && write(fd, "x", 1) == 1, "/dev/null is usable");
	if (fd >= 0)
		close(fd);
	ok(exists("/sys/kernel"), "/sys is mounted");
	ok(exists("/scratch/deep/payload"), "bind onto a missing mount point works");
	ok(exists("/etc/injected"), "file bind works");
	fd = open("/opt/ro/new", O_WRONLY | O_CREAT, 0644);
	ok(fd < 0 && errno == EROFS, "ro bind refuses writes (%s)",
	   fd < 0 ? strerror(errno) : "write allowed");
	if (fd >= 0)
		close(fd);
	fd = open("/scratch/deep/new", O_WRONLY | O_CREAT, 0644);
	ok(fd >= 0, "rw bind accepts writes");
	if (fd >= 0)
		close(fd);

	ok(count_root_mounts() == 1,
	   "exactly one mount at / (the old root is detached, not stacked)");

	/* '..' walks stop at the jail root */
	if (stat("/", &root_st) < 0)
		die("stat /");
	for (i = 0; i < 20; i++)
		if (chdir("..") < 0)
			die("chdir ..");
	ok(stat(".", &dot_st) == 0 && dot_st.st_ino == root_st.st_ino &&
	   dot_st.st_dev == root_st.st_dev, "20 x chdir(\"..\") ends at the jail root");
	ok(exists("/../../../../jail-marker"), "/../../.. still resolves in the jail");

	/*
	 * /proc/1/root: the task shares the PID namespace with the node, so
	 * root (CAP_SYS_PTRACE) can follow it out; an ordinary user cannot.
	 */
	if (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
	    setresuid(65534, 65534, 65534) < 0)
		die("drop to nobody");
	fd = open("/proc/1/root/", O_RDONLY | O_DIRECTORY);
	ok(fd < 0 && errno == EACCES,
	   "as uid 65534, /proc/1/root is refused (%s)",
	   fd < 0 ? strerror(errno) : "opened!");
	if (fd >= 0)
		close(fd);
	ok(!exists(host_marker), "as uid 65534, host file still not visible");
	for (i = 0; i < 20; i++)
		if (chdir("..") < 0)
			die("chdir ..");
	ok(stat(".", &dot_st) == 0 && dot_st.st_ino == root_st.st_ino,
	   "as uid 65534, '..' walks end at the jail root");
	jail_config_free(cfg);
}

/*
 * What slurmstepd's other threads see while its main thread works in the
 * jail: a second thread looks at the node's root when told to.
 */
struct observer {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int asked;   /* requests made */
	int answered;
	bool sees_host;
	bool sees_jail;
	bool stop;
};

static void *observe(void *arg)
{
	struct observer *o = arg;

	pthread_mutex_lock(&o->lock);
	while (!o->stop) {
		if (o->answered < o->asked) {
			o->sees_host = exists(host_marker);
			o->sees_jail = exists("/jail-marker");
			o->answered = o->asked;
			pthread_cond_broadcast(&o->cond);
		}
		pthread_cond_wait(&o->cond, &o->lock);
	}
	pthread_mutex_unlock(&o->lock);
	return NULL;
}

static void ask(struct observer *o)
{
	pthread_mutex_lock(&o->lock);
	o->asked++;
	pthread_cond_broadcast(&o->cond);
	while (o->answered < o->asked)
		pthread_cond_wait(&o->cond, &o->lock);
	pthread_mutex_unlock(&o->lock);
}

static void step_view(void)
{
	char root_arg[128], b1[256], path[256], cwd[512];
	char *argv[2] = { root_arg, b1 };
	char err[JAIL_ERR_MAX], note[JAIL_ERR_MAX];
	struct jail_return back = JAIL_RETURN_NONE;
	struct observer o = { PTHREAD_MUTEX_INITIALIZER,
			      PTHREAD_COND_INITIALIZER, 0, 0, false, false,
			      false };
	struct observer in_view = { PTHREAD_MUTEX_INITIALIZER,
				    PTHREAD_COND_INITIALIZER, 0, 0, false,
				    false, false };
	struct jail_config *cfg;
	pthread_t thr, late;
	int fd, rc;

	snprintf(root_arg, sizeof(root_arg), "root=%s", jail);
	snprintf(b1, sizeof(b1), "bind=%s:/scratch/local", src);
	cfg = config(2, argv);
	if (pthread_create(&thr, NULL, observe, &o) != 0)
		die("pthread_create");
	if (chdir(src) < 0)
		die("chdir");

	rc = jail_view_enter(cfg, "/home/alice", &back, err, sizeof(err),
			     note, sizeof(note));
	ok(rc == 0, "jail_view_enter succeeds in a threaded process (%s)",
	   rc ? err : "no error");
	if (rc)
		goto out;
	ok(exists("/jail-marker") && !exists(host_marker),
	   "the calling thread sees the jail");
	ok(getcwd(cwd, sizeof(cwd)) && strcmp(cwd, "/home/alice") == 0,
	   "its working directory is /home/alice in the jail (got %s)", cwd);
	ask(&o);
	ok(o.sees_host && !o.sees_jail,
	   "another thread of the process still sees the node's root");
	/* what slurmstepd does for `sbatch -o /var/tmp/out/o.out`, and -i */
	mkdir_p("/var/tmp/out");
	fd = open("/var/tmp/out/o.out", O_WRONLY | O_CREAT | O_APPEND, 0644);
	ok(fd >= 0 && write(fd, "out\n", 4) == 4,
	   "a file opened now is created in the jail");
	if (fd >= 0)
		close(fd);
	fd = open("/scratch/local/node-file", O_WRONLY | O_CREAT, 0644);
	ok(fd >= 0, "a path under a node-local mount reaches that mount");
	if (fd >= 0)
		close(fd);

	/* slurmstepd's I/O thread of an srun step starts in the view */
	if (pthread_create(&late, NULL, observe, &in_view) != 0)
		die("pthread_create");

	rc = jail_view_leave(&back, err, sizeof(err));
	ok(rc == 0, "jail_view_leave succeeds with a thread started in the "
	   "view (%s)", rc ? err : "no error");
	ask(&in_view);
	ok(in_view.sees_jail && !in_view.sees_host,
	   "that thread stays in the jail");
	ok(back.mntns < 0 && back.cwd < 0, "the way back is used up");
	ok(exists(host_marker) && !exists("/jail-marker"),
	   "the thread sees the node's root again");
	ok(getcwd(cwd, sizeof(cwd)) && strcmp(cwd, src) == 0,
	   "and its old working directory %s (got %s)", src, cwd);
	snprintf(path, sizeof(path), "%s/var/tmp/out/o.out", jail);
	ok(exists(path), "the file is in the jail: %s", path);
	ok(!exists("/var/tmp/out/o.out"), "and not in the node's /var/tmp");
	snprintf(path, sizeof(path), "%s/node-file", src);
	ok(exists(path), "the node-local file is in the mount's source");
	ok(jail_view_leave(&back, err, sizeof(err)) == 0,
	   "leaving again is a no-op");
	pthread_mutex_lock(&in_view.lock);
	in_view.stop = true;
	pthread_cond_broadcast(&in_view.cond);
	pthread_mutex_unlock(&in_view.lock);
	pthread_join(late, NULL);
out:
	pthread_mutex_lock(&o.lock);
	o.stop = true;
	pthread_cond_broadcast(&o.cond);
	pthread_mutex_unlock(&o.lock);
	pthread_join(thr, NULL);
	jail_config_free(cfg);
}

/*
 * slurmstepd's second window: the first window's view, held, is entered
 * again (no new namespace) and left again; a held view whose root is not
 * the configured jail root is refused and the thread stays on the node.
 */
static void step_view_held(void)
{
	char root_arg[128], other_arg[128], cwd[512];
	char *argv[1] = { root_arg };
	char *other_argv[1] = { other_arg };
	char err[JAIL_ERR_MAX], note[JAIL_ERR_MAX];
	struct jail_return back = JAIL_RETURN_NONE;
	struct jail_config *cfg, *other;
	int held, rc;

	snprintf(root_arg, sizeof(root_arg), "root=%s", jail);
	snprintf(other_arg, sizeof(other_arg), "root=%s", src);
	cfg = config(1, argv);
	other = config(1, other_argv);
	if (chdir(src) < 0)
		die("chdir");
	rc = jail_view_enter(cfg, NULL, &back, err, sizeof(err), note,
			     sizeof(note));
	ok(rc == 0, "jail_view_enter (%s)", rc ? err : "no error");
	held = jail_view_hold(err, sizeof(err));
	ok(held >= 0, "the view is held (%s)", held < 0 ? err : "no error");
	ok(jail_view_leave(&back, err, sizeof(err)) == 0 &&
	   exists(host_marker), "leaving it returns to the node");

	rc = jail_view_reenter(cfg, held, "/home/alice", &back, err,
			       sizeof(err), note, sizeof(note));
	ok(rc == 0, "the held view is entered again (%s)", rc ? err : "");
	ok(exists("/jail-marker") && !exists(host_marker),
	   "the thread sees the jail again");
	ok(getcwd(cwd, sizeof(cwd)) && strcmp(cwd, "/home/alice") == 0,
	   "in /home/alice (got %s)", cwd);
	ok(jail_view_leave(&back, err, sizeof(err)) == 0 &&
	   exists(host_marker) && getcwd(cwd, sizeof(cwd)) &&
	   strcmp(cwd, src) == 0, "and leaves it for %s (got %s)", src, cwd);

	rc = jail_view_reenter(cfg, held, "/home/nobody-here", &back, err,
			       sizeof(err), note, sizeof(note));
	ok(rc == 0 && strstr(note, "'/home/nobody-here' is not usable"),
	   "a missing working directory starts in '/': %s", note);
	ok(jail_view_leave(&back, err, sizeof(err)) == 0, "left again");

	rc = jail_view_reenter(other, held, NULL, &back, err, sizeof(err),
			       note, sizeof(note));
	ok(rc < 0 && strstr(err, "is not jail root"),
	   "a held view of another root is refused: %s", err);
	ok(back.mntns < 0 && exists(host_marker) &&
	   getcwd(cwd, sizeof(cwd)) && strcmp(cwd, src) == 0,
	   "and the thread is back on the node, in %s", src);
	ok(close(held) == 0, "the held view is let go");
	jail_config_free(cfg);
	jail_config_free(other);
}

static void step_view_missing_root(void)
{
	char *argv[1] = { "root=/nonexistent/warden-jail" };
	char err[JAIL_ERR_MAX], note[JAIL_ERR_MAX];
	struct jail_return back = JAIL_RETURN_NONE;
	struct jail_config *cfg = config(1, argv);
	int rc = jail_view_enter(cfg, NULL, &back, err, sizeof(err), note,
				 sizeof(note));

	ok(rc < 0 && strstr(err, "'/nonexistent/warden-jail'"),
	   "a view that cannot be made fails with the path: %s", err);
	ok(back.mntns < 0 && exists(host_marker),
	   "and the thread is back on the node's root");
	jail_config_free(cfg);
}

static void enter_missing_cwd(void)
{
	char root_arg[128];
	char *argv[1] = { root_arg };
	char err[JAIL_ERR_MAX], note[JAIL_ERR_MAX], cwd[512];
	struct jail_config *cfg;
	int rc;

	snprintf(root_arg, sizeof(root_arg), "root=%s", jail);
	cfg = config(1, argv);
	rc = jail_enter(cfg, "/home/nobody-here", err, sizeof(err), note, sizeof(note));
	ok(rc == 0, "jail_enter succeeds with a missing cwd (%s)", rc ? err : "");
	ok(strstr(note, "'/home/nobody-here' is not usable in the jail") != NULL,
	   "note names the missing directory: %s", note);
	ok(getcwd(cwd, sizeof(cwd)) && strcmp(cwd, "/") == 0, "cwd falls back to /");
	jail_config_free(cfg);
}

static void enter_through_symlink(void)
{
	char root_arg[128], b[256];
	char *argv[2] = { root_arg, b };
	char err[JAIL_ERR_MAX], note[JAIL_ERR_MAX];
	struct jail_config *cfg;
	int rc;

	snprintf(root_arg, sizeof(root_arg), "root=%s", jail);
	snprintf(b, sizeof(b), "bind=%s:/escape/warden-escape-probe", src);
	cfg = config(2, argv);
	rc = jail_enter(cfg, NULL, err, sizeof(err), note, sizeof(note));
	ok(rc < 0 && strstr(err, "/escape' is a symlink inside the jail") != NULL,
	   "bind through a symlink in the jail is refused: %s", err);
	jail_config_free(cfg);
}

static void enter_missing_root(void)
{
	char *argv[1] = { "root=/nonexistent/warden-jail" };
	char err[JAIL_ERR_MAX], note[JAIL_ERR_MAX];
	struct jail_config *cfg = config(1, argv);
	int rc = jail_enter(cfg, NULL, err, sizeof(err), note, sizeof(note));

	ok(rc < 0 && strstr(err, "'/nonexistent/warden-jail'") &&
	   strstr(err, strerror(ENOENT)),
	   "missing root: error names path and errno: %s", err);
	jail_config_free(cfg);
}

static void enter_missing_source(void)
{
	char root_arg[128];
	char *argv[2] = { root_arg, "bind=/nonexistent/warden-src:/data" };
	char err[JAIL_ERR_MAX], note[JAIL_ERR_MAX];
	struct jail_config *cfg;
	int rc;

	snprintf(root_arg, sizeof(root_arg), "root=%s", jail);
	cfg = config(2, argv);
	rc = jail_enter(cfg, NULL, err, sizeof(err), note, sizeof(note));
	ok(rc < 0 && strstr(err, "bind source '/nonexistent/warden-src'") &&
	   strstr(err, strerror(ENOENT)),
	   "missing bind source: error names path and errno: %s", err);
	jail_config_free(cfg);
}

int main(void)
{
	char path[256];
	char cmd[256];

	if (geteuid() != 0) {
		printf("# skipped: needs root\n");
		return 0;
	}
	snprintf(jail, sizeof(jail), "/tmp/warden-jail-XXXXXX");
	snprintf(src, sizeof(src), "/tmp/warden-src-XXXXXX");
	if (!mkdtemp(jail) || !mkdtemp(src))
		die("mkdtemp");
	if (chmod(jail, 0755) < 0 || chmod(src, 0755) < 0)
		die("chmod");
	snprintf(host_marker, sizeof(host_marker), "%s/host-only-marker", src);
	write_file(host_marker, "host\n");
	snprintf(path, sizeof(path), "%s/payload", src);
	write_file(path, "payload\n");
	snprintf(srcfile, sizeof(srcfile), "%s/payload", src);
	snprintf(path, sizeof(path), "%s/jail-marker", jail);
	write_file(path, "jail\n");
	snprintf(path, sizeof(path), "%s/home/alice", jail);
	mkdir_p(path);
	snprintf(path, sizeof(path), "%s/escape", jail);
	if (symlink("../../..", path) < 0)
		die("symlink");

	scenario("full sequence", enter_full);
	scenario("missing working directory", enter_missing_cwd);
	scenario("symlink inside the jail", enter_through_symlink);
	scenario("missing jail root", enter_missing_root);
	scenario("missing bind source", enter_missing_source);
	scenario("step view of one thread", step_view);
	scenario("step view that cannot be made", step_view_missing_root);
	scenario("step view held and entered again", step_view_held);

	snprintf(path, sizeof(path), "%s/proc", jail);
	{
		struct stat js, ps;

		ok(stat(jail, &js) == 0 && stat(path, &ps) == 0 &&
		   js.st_dev == ps.st_dev,
		   "mount points were created in the jail; the mounts stayed "
		   "in the children's namespaces");
	}
	ok(!exists("/warden-escape-probe"),
	   "nothing was created through the jail's symlink");

	snprintf(cmd, sizeof(cmd), "rm -rf -- '%s' '%s'", jail, src);
	if (system(cmd) != 0)
		fprintf(stderr, "warning: could not remove %s %s\n", jail, src);
	printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
	return failures ? 1 : 0;
}
