/*
 * job_filter_test.c - installs the job step's seccomp filter (job_filter.c,
 * job_filter_install.c) as the plugin does, in forked children of a root
 * process, and checks what the kernel then does with each call the filter
 * is about and with the calls ordinary programs make. `make -C spank
 * test-filter` runs it (`make unit` too, through `make -C spank test-c`).
 * Without root it prints why and exits 0: installing a filter without
 * no_new_privs and changing uid need root.
 *
 * Every probe runs in its own forked child (a call that the filter ought to
 * refuse might succeed and change that child), whose exit status is 0 when
 * the call succeeded and its errno otherwise. The blocked calls get
 * arguments that, without the filter, fail harmlessly with another error
 * (ENOENT, EBADF, EINVAL, EFAULT...), or succeed harmlessly in that child:
 * as root, only the filter answers EPERM. A control run without the filter
 * shows that.
 *
 * Scenarios (each in a child; its exit status is its number of failures):
 *   control: root without the filter
 *   root with the filter (no no_new_privs; i386 calls through int 0x80)
 *   uid 65534 with the filter: blocked calls fail, ordinary work goes on
 *   a setuid-root program started under the filter: still gains root, still
 *     filtered
 *   root without CAP_SYS_ADMIN: no_new_privs is set and the filter installed
 *   a fork handler in a threaded process: the children one thread forks
 *     are filtered, other threads' are not (spank_jail.c, task epilogs)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/capability.h>
#include <linux/seccomp.h>

#include "job_filter.h"
#include "tap.h"

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif
#ifndef __NR_open_tree_attr
#define __NR_open_tree_attr 467
#endif

#define NOBODY 65534
#define MISSING "/nonexistent-warden-filter-test"

extern char **environ;


/* ---- probes --------------------------------------------------------- */

/* 0 when the call returned >= 0, else errno. */
static int rc_of(long r)
{
	return r < 0 ? errno : 0;
}

static int p_unshare(unsigned long flags)
{
	return rc_of(unshare((int)flags));
}

/* clone with fork semantics; the child, if any, leaves at once. */
static int p_clone(unsigned long flags)
{
	long r = syscall(SYS_clone, flags | SIGCHLD, NULL, NULL, NULL, NULL);

	if (r == 0)
		_exit(0);
	if (r > 0) {
		(void)waitpid((pid_t)r, NULL, 0);
		return 0;
	}
	return errno;
}

static int p_unshare_newuser(void) { return p_unshare(CLONE_NEWUSER); }
static int p_unshare_newns(void) { return p_unshare(CLONE_NEWNS); }
static int p_unshare_newpid(void) { return p_unshare(CLONE_NEWPID); }
static int p_unshare_newnet(void) { return p_unshare(CLONE_NEWNET); }
static int p_unshare_newuts(void) { return p_unshare(CLONE_NEWUTS); }
static int p_unshare_newipc(void) { return p_unshare(CLONE_NEWIPC); }
static int p_unshare_newcgroup(void) { return p_unshare(CLONE_NEWCGROUP); }
static int p_unshare_newtime(void) { return p_unshare(CLONE_NEWTIME); }
static int p_unshare_files_newns(void) { return p_unshare(CLONE_FILES | CLONE_NEWNS); }
static int p_clone_newuser(void) { return p_clone(CLONE_NEWUSER); }
static int p_clone_newns(void) { return p_clone(CLONE_NEWNS); }
static int p_clone_newnet(void) { return p_clone(CLONE_NEWNET); }
static int p_clone_newpid(void) { return p_clone(CLONE_NEWPID); }
static int p_clone3(void) { return rc_of(syscall(SYS_clone3, NULL, 0)); }
static int p_setns(void) { return rc_of(syscall(SYS_setns, -1, 0)); }
static int p_mount(void) { return rc_of(syscall(SYS_mount, "none", MISSING, "tmpfs", 0, NULL)); }
static int p_umount2(void) { return rc_of(syscall(SYS_umount2, MISSING, 0)); }
static int p_pivot_root(void) { return rc_of(syscall(SYS_pivot_root, MISSING, MISSING)); }
static int p_bpf(void) { return rc_of(syscall(SYS_bpf, -1, NULL, 0)); }
static int p_perf_event_open(void) { return rc_of(syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0)); }
static int p_fsopen(void) { return rc_of(syscall(SYS_fsopen, "warden-no-such-fs", 0)); }
static int p_fsconfig(void) { return rc_of(syscall(SYS_fsconfig, -1, 0, NULL, NULL, 0)); }
static int p_fsmount(void) { return rc_of(syscall(SYS_fsmount, -1, 0, 0)); }
static int p_fspick(void) { return rc_of(syscall(SYS_fspick, -1, MISSING, 0)); }
static int p_move_mount(void) { return rc_of(syscall(SYS_move_mount, -1, MISSING, -1, MISSING, 0)); }
static int p_open_tree(void) { return rc_of(syscall(SYS_open_tree, -1, MISSING, 0)); }
static int p_open_tree_attr(void) { return rc_of(syscall(__NR_open_tree_attr, -1, MISSING, 0, NULL, 0)); }
static int p_mount_setattr(void) { return rc_of(syscall(SYS_mount_setattr, -1, MISSING, 0, NULL, 0)); }
/* without the filter: EFAULT (no parameters) and EBADF */
static int p_io_uring_setup(void) { return rc_of(syscall(SYS_io_uring_setup, 1, NULL)); }
static int p_io_uring_enter(void) { return rc_of(syscall(SYS_io_uring_enter, -1, 0, 0, 0, NULL, 0)); }
static int p_io_uring_register(void) { return rc_of(syscall(SYS_io_uring_register, -1, 0, NULL, 0)); }
#if defined(__x86_64__)
static int p_x32_getpid(void) { return rc_of(syscall(JOB_FILTER_X32_BIT | SYS_getpid)); }
#endif

struct probe {
	const char *name;
	int (*call)(void);
	int want;      /* errno under the filter */
	bool brief;    /* one of the calls the uid 65534 scenario checks */
};

static const struct probe blocked[] = {
	{ "unshare(CLONE_NEWUSER)", p_unshare_newuser, EPERM, true },
	{ "unshare(CLONE_NEWNS)", p_unshare_newns, EPERM, true },
	{ "unshare(CLONE_NEWPID)", p_unshare_newpid, EPERM, false },
	{ "unshare(CLONE_NEWNET)", p_unshare_newnet, EPERM, false },
	{ "unshare(CLONE_NEWUTS)", p_unshare_newuts, EPERM, false },
	{ "unshare(CLONE_NEWIPC)", p_unshare_newipc, EPERM, false },
	{ "unshare(CLONE_NEWCGROUP)", p_unshare_newcgroup, EPERM, false },
	{ "unshare(CLONE_NEWTIME)", p_unshare_newtime, EPERM, false },
	{ "unshare(CLONE_FILES|CLONE_NEWNS)", p_unshare_files_newns, EPERM, false },
	{ "clone(CLONE_NEWUSER)", p_clone_newuser, EPERM, true },
	{ "clone(CLONE_NEWNS)", p_clone_newns, EPERM, false },
	{ "clone(CLONE_NEWNET)", p_clone_newnet, EPERM, false },
	{ "clone(CLONE_NEWPID)", p_clone_newpid, EPERM, false },
	{ "clone3", p_clone3, ENOSYS, true },
	{ "setns", p_setns, EPERM, true },
	{ "mount", p_mount, EPERM, true },
	{ "umount2", p_umount2, EPERM, false },
	{ "pivot_root", p_pivot_root, EPERM, true },
	{ "bpf", p_bpf, EPERM, true },
	{ "perf_event_open", p_perf_event_open, EPERM, true },
	{ "fsopen", p_fsopen, EPERM, true },
	{ "fsconfig", p_fsconfig, EPERM, false },
	{ "fsmount", p_fsmount, EPERM, false },
	{ "fspick", p_fspick, EPERM, false },
	{ "move_mount", p_move_mount, EPERM, false },
	{ "open_tree", p_open_tree, EPERM, true },
	{ "open_tree_attr", p_open_tree_attr, EPERM, false },
	{ "mount_setattr", p_mount_setattr, EPERM, false },
	{ "io_uring_setup", p_io_uring_setup, EPERM, true },
	{ "io_uring_enter", p_io_uring_enter, EPERM, false },
	{ "io_uring_register", p_io_uring_register, EPERM, false },
#if defined(__x86_64__)
	{ "x32 getpid", p_x32_getpid, ENOSYS, false },
#endif
};

#define NBLOCKED (sizeof(blocked) / sizeof(blocked[0]))

/* Run fn in a child: its result, or -1 when the child did not exit. */
static int in_child(int (*fn)(void))
{
	pid_t pid;
	int status;

	fflush(stdout);
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0)
		_exit(fn() & 0xff);
	if (waitpid(pid, &status, 0) < 0)
		die("waitpid");
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static const char *errname(int e)
{
	static char buf[64];

	if (e == 0)
		return "success";
	if (e < 0)
		return "killed";
	(void)snprintf(buf, sizeof(buf), "%s", strerror(e));
	return buf;
}

static void check_blocked(bool only_brief)
{
	size_t i;

	for (i = 0; i < NBLOCKED; i++) {
		int got;

		if (only_brief && !blocked[i].brief)
			continue;
		got = in_child(blocked[i].call);
		ok(got == blocked[i].want, "%s fails with %s (got: %s)",
		   blocked[i].name, strerror(blocked[i].want), errname(got));
	}
}

/* ---- what ordinary programs do ---------------------------------------- */

static void *thread_main(void *arg)
{
	return arg;
}

static int a_fork(void)
{
	pid_t pid = fork();
	int status;

	if (pid < 0)
		return errno;
	if (pid == 0)
		_exit(0);
	if (waitpid(pid, &status, 0) < 0)
		return errno;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 200;
}

static int a_thread(void)
{
	static int token;
	pthread_t t;
	void *ret = NULL;
	int e = pthread_create(&t, NULL, thread_main, &token);

	if (e)
		return e;
	e = pthread_join(t, &ret);
	if (e)
		return e;
	return ret == &token ? 0 : 200;
}

static int a_clone_plain(void) { return p_clone(0); }
static int a_unshare_files(void) { return p_unshare(CLONE_FILES); }
static int a_unshare_fs(void) { return p_unshare(CLONE_FS); }

static int a_open(void)
{
	int fd = open("/etc/passwd", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return errno;
	return close(fd) < 0 ? errno : 0;
}

static int a_exec_true(void)
{
	pid_t pid = fork();
	int status;

	if (pid < 0)
		return errno;
	if (pid == 0) {
		execl("/bin/true", "true", (char *)NULL);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) < 0)
		return errno;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 200;
}

static int a_posix_spawn(void)
{
	char *argv[] = { "true", NULL };
	pid_t pid;
	int status, e;

	e = posix_spawn(&pid, "/bin/true", NULL, NULL, argv, environ);
	if (e)
		return e;
	if (waitpid(pid, &status, 0) < 0)
		return errno;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 200;
}

struct allowed {
	const char *name;
	int (*call)(void);
};

static const struct allowed allowed[] = {
	{ "fork", a_fork },
	{ "pthread_create (glibc: clone3 gets ENOSYS, then clone)", a_thread },
	{ "clone without CLONE_NEW*", a_clone_plain },
	{ "unshare(CLONE_FILES)", a_unshare_files },
	{ "unshare(CLONE_FS)", a_unshare_fs },
	{ "open /etc/passwd", a_open },
	{ "fork + execve /bin/true", a_exec_true },
	{ "posix_spawn /bin/true", a_posix_spawn },
};

static void check_allowed(void)
{
	size_t i;

	for (i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++) {
		int got = in_child(allowed[i].call);

		ok(got == 0, "%s works (got: %s)", allowed[i].name,
		   got == 200 ? "wrong result" : errname(got));
	}
}

/* ---- helpers ---------------------------------------------------------- */

/* "Seccomp_filters:" of /proc/self/status (Linux 5.9+), or -1. */
static int seccomp_filters(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	int n = -1;

	if (!f)
		die("/proc/self/status");
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Seccomp_filters: %d", &n) == 1)
			break;
	fclose(f);
	return n;
}

static void install_ok(const char *who)
{
	char err[512], msg[512];
	int before = seccomp_filters();

	if (job_filter_install(err, sizeof(err), msg, sizeof(msg)) < 0) {
		ok(false, "%s: job_filter_install: %s", who, err);
		exit(failures);
	}
	ok(msg[0] == '\0', "%s: filter installed, no note%s%s", who,
	   msg[0] ? ": " : "", msg);
	if (before >= 0)
		ok(seccomp_filters() == before + 1,
		   "%s: /proc/self/status counts one more filter", who);
}

static void become_nobody(void)
{
	if (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
		die("dropping to uid 65534");
	ok(getuid() == NOBODY && geteuid() == NOBODY, "running as uid %d",
	   NOBODY);
}

static double ns_per_getppid(void)
{
	struct timespec a, b;
	const int n = 200000;
	int i;

	clock_gettime(CLOCK_MONOTONIC, &a);
	for (i = 0; i < n; i++)
		(void)syscall(SYS_getppid);
	clock_gettime(CLOCK_MONOTONIC, &b);
	return ((double)(b.tv_sec - a.tv_sec) * 1e9 +
		(double)(b.tv_nsec - a.tv_nsec)) / n;
}

#if defined(__x86_64__)
/* A call through the i386 ABI; registers are cut to 32 bits. */
static long int80(long nr, long a, long b, long c)
{
	long ret;

	__asm__ volatile("int $0x80"
			 : "=a"(ret)
			 : "a"(nr), "b"(a), "c"(b), "d"(c)
			 : "memory");
	return ret;
}

static int i386_getpid_matches(void)
{
	return int80(20, 0, 0, 0) == (long)getpid() ? 0 : 200;
}

static int i386_errno(long r)
{
	return r < 0 ? (int)-r : 0;
}

static int i386_unshare_newns(void) { return i386_errno(int80(310, CLONE_NEWNS, 0, 0)); }
static int i386_unshare_newuser(void) { return i386_errno(int80(310, CLONE_NEWUSER, 0, 0)); }
static int i386_mount(void) { return i386_errno(int80(21, 0, 0, 0)); }
static int i386_umount(void) { return i386_errno(int80(22, 0, 0, 0)); }
static int i386_clone3(void) { return i386_errno(int80(435, 0, 0, 0)); }
static int i386_fsopen(void) { return i386_errno(int80(430, 0, 0, 0)); }
static int i386_io_uring_setup(void) { return i386_errno(int80(425, 1, 0, 0)); }
static int i386_unshare_files(void) { return i386_errno(int80(310, CLONE_FILES, 0, 0)); }

static void check_i386(void)
{
	static const struct probe i386_blocked[] = {
		{ "i386 unshare(CLONE_NEWNS)", i386_unshare_newns, EPERM, false },
		{ "i386 unshare(CLONE_NEWUSER)", i386_unshare_newuser, EPERM, false },
		{ "i386 mount", i386_mount, EPERM, false },
		{ "i386 umount", i386_umount, EPERM, false },
		{ "i386 clone3", i386_clone3, ENOSYS, false },
		{ "i386 fsopen", i386_fsopen, EPERM, false },
		{ "i386 io_uring_setup", i386_io_uring_setup, EPERM, false },
	};
	size_t i;
	int got;

	got = in_child(i386_getpid_matches);
	if (got != 0) {
		note("int 0x80 does not work here (%s): i386 checks skipped",
		     errname(got));
		return;
	}
	ok(true, "i386 getpid works");
	ok(in_child(i386_unshare_files) == 0, "i386 unshare(CLONE_FILES) works");
	for (i = 0; i < sizeof(i386_blocked) / sizeof(i386_blocked[0]); i++) {
		got = in_child(i386_blocked[i].call);
		ok(got == i386_blocked[i].want, "%s fails with %s (got: %s)",
		   i386_blocked[i].name, strerror(i386_blocked[i].want),
		   errname(got));
	}
}
#endif

/* ---- scenarios -------------------------------------------------------- */

static void control_root(void)
{
	size_t i;

	for (i = 0; i < NBLOCKED; i++) {
		int got = in_child(blocked[i].call);

		if (got == blocked[i].want)
			note("%s already fails with %s without the filter "
			     "(another seccomp profile, or the kernel): the "
			     "check below proves nothing for it",
			     blocked[i].name, strerror(got));
	}
	ok(prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 0, "no_new_privs is not set to start with");
	exit(failures);
}

static void control_nobody(void)
{
	become_nobody();
	note("without the filter, uid %d: unshare(CLONE_NEWUSER) -> %s "
	     "(what the filter takes away where user namespaces are open)",
	     NOBODY, errname(in_child(p_unshare_newuser)));
	exit(failures);
}

/* Allow everything: what a container's own seccomp profile costs. */
static void install_allow_all(void)
{
	struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	struct sock_fprog prog = { 1, &allow };

	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0)
		die("seccomp (allow all)");
}

static void root_filtered(void)
{
	double none, outer, job;

	none = ns_per_getppid();
	install_allow_all();
	outer = ns_per_getppid();
	install_ok("root");
	job = ns_per_getppid();
	note("getppid: %.0f ns a call without seccomp, %.0f ns under an "
	     "allow-all filter (a container's profile), %.0f ns with the job "
	     "filter on top", none, outer, job);
	ok(prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 0,
	   "no_new_privs stays off (setuid programs keep working)");
	check_blocked(false);
	check_allowed();
#if defined(__x86_64__)
	check_i386();
#endif
	exit(failures);
}

static void nobody_filtered(void)
{
	install_ok("root");
	become_nobody();
	check_blocked(true);
	check_allowed();
	exit(failures);
}

/* Run as the setuid copy: exit status bits say what went wrong. */
static int setuid_probe(void)
{
	int bad = 0;

	if (geteuid() != 0)
		bad |= 1;
	if (unshare(CLONE_NEWNS) == 0 || errno != EPERM)
		bad |= 2;
	if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 0)
		bad |= 4;
	return bad;
}

static char setuid_copy[128];

static bool make_setuid_copy(void)
{
	char dir[] = "/tmp/warden-filter-test.XXXXXX";
	char buf[65536];
	struct statvfs vfs;
	int in, out;
	ssize_t n;

	if (!mkdtemp(dir))
		die("mkdtemp");
	if (statvfs(dir, &vfs) < 0)
		die("statvfs");
	if (vfs.f_flag & ST_NOSUID) {
		(void)rmdir(dir);
		return false;
	}
	if (chmod(dir, 0755) < 0)
		die("chmod");
	(void)snprintf(setuid_copy, sizeof(setuid_copy), "%s/probe", dir);
	in = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	out = open(setuid_copy, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0700);
	if (in < 0 || out < 0)
		die("copying the test program");
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, (size_t)n) != n)
			die("write");
	if (n < 0 || close(in) < 0 || close(out) < 0)
		die("copying the test program");
	if (chmod(setuid_copy, 04755) < 0)
		die("chmod 4755");
	return true;
}

static void remove_setuid_copy(void)
{
	char dir[128];
	char *slash;

	(void)snprintf(dir, sizeof(dir), "%s", setuid_copy);
	slash = strrchr(dir, '/');
	if (unlink(setuid_copy) < 0)
		perror(setuid_copy);
	if (slash) {
		*slash = '\0';
		if (rmdir(dir) < 0)
			perror(dir);
	}
}

static void setuid_filtered(void)
{
	pid_t pid;
	int status;

	install_ok("root");
	become_nobody();
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		execl(setuid_copy, setuid_copy, "--setuid-probe", (char *)NULL);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) < 0)
		die("waitpid");
	ok(WIFEXITED(status) && WEXITSTATUS(status) != 127,
	   "the setuid copy ran");
	if (WIFEXITED(status) && WEXITSTATUS(status) != 127) {
		ok(!(WEXITSTATUS(status) & 1), "it runs with euid 0");
		ok(!(WEXITSTATUS(status) & 2),
		   "it is filtered too: unshare(CLONE_NEWNS) fails with EPERM");
		ok(!(WEXITSTATUS(status) & 4), "no_new_privs is off in it");
	}
	exit(failures);
}

static void no_cap_sys_admin(void)
{
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
	char err[512] = "", msg[512] = "";

	if (syscall(SYS_capget, &hdr, data) < 0)
		die("capget");
	data[CAP_TO_INDEX(CAP_SYS_ADMIN)].effective &= ~CAP_TO_MASK(CAP_SYS_ADMIN);
	if (syscall(SYS_capset, &hdr, data) < 0)
		die("capset");
	ok(job_filter_install(err, sizeof(err), msg, sizeof(msg)) == 0,
	   "installed without CAP_SYS_ADMIN%s%s", err[0] ? ": " : "", err);
	ok(msg[0] != '\0', "with a note: '%s'", msg);
	ok(prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1, "no_new_privs is set");
	ok(in_child(p_unshare_newns) == EPERM && in_child(p_fsopen) == EPERM,
	   "unshare(CLONE_NEWNS) and fsopen fail with EPERM");
	exit(failures);
}

/*
 * spank_jail.c's fork handler, as it works there: a pthread_atfork child
 * handler installs the filter (job_filter_install_raw) in the children that
 * one thread forks while a window is open; glibc's pthread_self() in the
 * child is the forking thread's, so a fork from another thread, or after
 * the window closed, is left alone.
 */
static volatile sig_atomic_t window_open;
static pthread_t window_thread;

static void window_child(void)
{
	const char *what;
	bool nnp;

	if (!window_open || !pthread_equal(pthread_self(), window_thread))
		return;
	window_open = 0;
	if (job_filter_install_raw(&nnp, &what) != 0 || nnp)
		_exit(99);
}

static void *fork_from_other_thread(void *arg)
{
	*(int *)arg = in_child(p_unshare_newns);
	return NULL;
}

static void fork_handler(void)
{
	int other = -1;
	pthread_t t;

	if (pthread_atfork(NULL, NULL, window_child) != 0)
		die("pthread_atfork");
	window_thread = pthread_self();
	window_open = 1;
	ok(in_child(p_unshare_newns) == EPERM && in_child(p_io_uring_setup) == EPERM &&
	   in_child(p_unshare_newuser) == EPERM,
	   "a child the window's thread forks is filtered (no no_new_privs needed)");
	ok(window_open == 1, "the parent itself is not");
	if (pthread_create(&t, NULL, fork_from_other_thread, &other) != 0)
		die("pthread_create");
	if (pthread_join(t, NULL) != 0)
		die("pthread_join");
	ok(other == 0, "a child another thread forks is not (unshare(CLONE_NEWNS): %s)",
	   errname(other));
	window_open = 0;
	ok(in_child(p_unshare_newns) == 0, "after the window closes a child is not");
	exit(failures);
}

int main(int argc, char **argv)
{
	struct sock_filter insns[JOB_FILTER_MAX_INSNS];
	char err[512];
	int n;

	if (argc == 2 && strcmp(argv[1], "--setuid-probe") == 0)
		return setuid_probe();
	if (geteuid() != 0) {
		printf("job_filter_test: skipped: needs root (installs a seccomp "
		       "filter without no_new_privs, then changes to uid %d)\n",
		       NOBODY);
		return 0;
	}
	n = job_filter_build(job_filter_native_arch(), insns,
			     JOB_FILTER_MAX_INSNS, err, sizeof(err));
	ok(n > 0, "the filter builds for this machine: %d instructions%s%s",
	   n, n > 0 ? "" : ": ", n > 0 ? "" : err);
	if (n <= 0)
		return 1;

	scenario("control: root without the filter", control_root);
	scenario("control: uid 65534 without the filter", control_nobody);
	scenario("root with the filter", root_filtered);
	scenario("uid 65534 with the filter", nobody_filtered);
	if (make_setuid_copy()) {
		scenario("a setuid-root program started by uid 65534 under the filter",
			 setuid_filtered);
		remove_setuid_copy();
	} else {
		note("/tmp is mounted nosuid: setuid scenario skipped");
	}
	scenario("root without CAP_SYS_ADMIN", no_cap_sys_admin);
	scenario("a fork handler in a threaded process (task epilogs)", fork_handler);

	printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
	return failures ? 1 : 0;
}
