/*
 * job_filter.h - the seccomp filter of ordinary users' job steps.
 *
 * After a task has entered the jail, spank_jail installs a seccomp-BPF
 * filter in it when the job's uid is not 0 (README.md, "Seccomp filter").
 * It makes the calls that build new namespaces or mounts fail:
 *
 *   EPERM   unshare and clone with any CLONE_NEW* flag, setns, mount,
 *           umount2 (and i386's umount), pivot_root, bpf, perf_event_open,
 *           fsopen, fsconfig, fsmount, fspick, move_mount, open_tree,
 *           open_tree_attr, mount_setattr, io_uring_setup, io_uring_enter,
 *           io_uring_register
 *   ENOSYS  clone3 (its flags sit in memory a filter cannot read; libc then
 *           falls back to clone, whose flags it can), and x32 calls
 *   killed  any other system call ABI (a 32-bit ARM program on aarch64)
 *
 * Everything else is allowed (syscalls.txt: every decision, with its reason,
 * and the worker profile's beside it). x86_64 builds cover the x86_64 and the i386
 * (int 0x80) ABI, aarch64 builds the aarch64 ABI.
 *
 * Two parts: job_filter.c is pure (the syscall tables and the BPF program,
 * built into a caller's buffer; unit-tested through cffi by
 * tests/unit/test_job_filter.py, which runs the program in a BPF
 * interpreter), and job_filter_install.c installs it in the calling
 * process (spank/tests/job_filter_test.c checks it against the kernel).
 * Functions that can fail return -1 and write a message into `err`, as in
 * jail_helpers.h.
 */
#ifndef WARDEN_JOB_FILTER_H
#define WARDEN_JOB_FILTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <linux/filter.h>

/* Room for the longest program job_filter_build makes (104 today). */
#define JOB_FILTER_MAX_INSNS 256

/* The kernel's AUDIT_ARCH_* values of the ABIs the filter knows. */
#define JOB_FILTER_ARCH_X86_64  0xc000003eU
#define JOB_FILTER_ARCH_I386    0x40000003U
#define JOB_FILTER_ARCH_AARCH64 0xc00000b7U

/* x86_64 numbers with this bit set are x32 calls. */
#define JOB_FILTER_X32_BIT 0x40000000U

/*
 * CLONE_NEW* flags: unshare's mask, and clone's, which leaves out
 * CLONE_NEWTIME (0x80): in clone's flags the low byte is the exit signal.
 */
#define JOB_FILTER_UNSHARE_NS 0x7e020080U
#define JOB_FILTER_CLONE_NS   0x7e020000U

enum job_filter_action {
	JOB_FILTER_EPERM = 0,          /* fails with EPERM */
	JOB_FILTER_ENOSYS = 1,         /* fails with ENOSYS */
	JOB_FILTER_EPERM_IF_FLAGS = 2, /* EPERM when arg 0 has a bit of mask */
};

struct job_filter_rule {
	const char *name;      /* the system call */
	uint32_t nr;           /* its number in this ABI */
	enum job_filter_action action;
	uint32_t mask;         /* JOB_FILTER_EPERM_IF_FLAGS only */
};

struct job_filter_abi {
	const char *name;      /* "x86_64", "i386", "aarch64" */
	uint32_t arch;         /* JOB_FILTER_ARCH_* */
	uint32_t nr_limit;     /* numbers >= this fail with ENOSYS (x32); 0: none */
	const struct job_filter_rule *rules;
	size_t nrules;
};

/* JOB_FILTER_ARCH_* of the machine this file was compiled for; 0 when the
 * filter does not support it (then job_filter_install fails). */
uint32_t job_filter_native_arch(void);

/*
 * The i-th ABI a filter for `native` (JOB_FILTER_ARCH_X86_64 or
 * JOB_FILTER_ARCH_AARCH64) checks, in the order it checks them; NULL past
 * the last one or for an unknown `native`.
 */
const struct job_filter_abi *job_filter_abi(uint32_t native, size_t i);

/*
 * Build the filter for `native` into out[0..max). Returns the number of
 * instructions, or -1 (with err) for an unknown architecture or a buffer
 * that is too small.
 */
int job_filter_build(uint32_t native, struct sock_filter *out, size_t max,
		     char *err, size_t errlen);

/*
 * Install the filter for this machine in the calling thread (a task that
 * has not started threads yet), for it and everything it starts; never
 * undone. Without PR_SET_NO_NEW_PRIVS when the kernel allows that (the
 * caller has CAP_SYS_ADMIN), so setuid programs keep working. Without
 * CAP_SYS_ADMIN (EACCES) it sets no_new_privs and installs it anyway,
 * saying so in `note` (empty otherwise). Returns 0, or -1 with err: the
 * filter is then not installed and the task must not run.
 * Defined in job_filter_install.c (system calls), not in job_filter.c.
 */
int job_filter_install(char *err, size_t errlen, char *note, size_t notelen);

/*
 * job_filter_install's system calls alone, for the child of a fork in a
 * multithreaded process (spank_jail.c's fork handler): no formatting, no
 * allocation, no locks. Returns 0, or the errno of the call that failed,
 * named in *what (a constant string); *nnp tells whether no_new_privs was
 * set on the way (as job_filter_install's note).
 */
int job_filter_install_raw(bool *nnp, const char **what);

#endif /* WARDEN_JOB_FILTER_H */
