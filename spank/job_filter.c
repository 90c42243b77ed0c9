/*
 * job_filter.c - the seccomp filter of ordinary users' job steps, built as a
 * classic BPF program (see job_filter.h). Pure: no system calls, no state
 * beyond the constant tables below.
 *
 * The program, for a native ABI N with compat ABIs C...:
 *
 *       ld  arch
 *       jeq N.arch, 0, len(N)    ; not N: skip N's section
 *       <section N>              ; ends with ret ALLOW
 *       jeq C.arch, 0, len(C)
 *       <section C>
 *       ret KILL_PROCESS         ; an ABI the filter does not know
 *
 *   section:
 *       ld  nr
 *       jge nr_limit, 0, 1 ; ret ERRNO(ENOSYS)        (x32 on x86_64 only)
 *       per rule, EPERM/ENOSYS:  jeq nr, 0, 1 ; ret ERRNO(e)
 *       per rule, IF_FLAGS:      jeq nr, 0, 4 ; ld arg0 (low 32 bits) ;
 *                                jset mask, 0, 1 ; ret ERRNO(EPERM) ; ret ALLOW
 *       ret ALLOW
 *
 * Every jump is forward and short. The flags are read from the low half of
 * args[0]: the kernel uses only those 32 bits of clone's flags, rejects
 * unshare flags above them (EINVAL), and all three ABIs are little-endian,
 * so the low half is at the start of the 64-bit slot.
 *
 * The numbers: x86_64 from arch/x86/entry/syscalls/syscall_64.tbl, i386 from
 * syscall_32.tbl, aarch64 from the generic table (include/uapi/asm-generic/
 * unistd.h); tests/unit/test_job_filter.py compares them with the installed
 * kernel headers. Calls added since 5.1 (424 and up) share one number on
 * all three. The policy, one line and reason per call, is syscalls.txt; the
 * unit test checks these tables against it.
 */
#include "job_filter.h"

#include <errno.h>
#include <stddef.h>

#include <linux/seccomp.h>

#include "jail_helpers.h"

#ifndef SECCOMP_RET_KILL_PROCESS
#define SECCOMP_RET_KILL_PROCESS 0x80000000U
#endif

#define RULE(n, num) { #n, num, JOB_FILTER_EPERM, 0 }
#define NOSYS(n, num) { #n, num, JOB_FILTER_ENOSYS, 0 }
#define FLAGS(n, num, m) { #n, num, JOB_FILTER_EPERM_IF_FLAGS, m }

/*
 * Calls added since 5.1, the same numbers on every ABI here: io_uring, the
 * new mount API and clone3. Every entry, with its reason, is in syscalls.txt.
 */
#define COMMON_RULES                          \
	NOSYS(clone3, 435),                   \
	RULE(io_uring_setup, 425),            \
	RULE(io_uring_enter, 426),            \
	RULE(io_uring_register, 427),         \
	RULE(open_tree, 428),                 \
	RULE(move_mount, 429),                \
	RULE(fsopen, 430),                    \
	RULE(fsconfig, 431),                  \
	RULE(fsmount, 432),                   \
	RULE(fspick, 433),                    \
	RULE(mount_setattr, 442),             \
	RULE(open_tree_attr, 467)

static const struct job_filter_rule x86_64_rules[] = {
	FLAGS(unshare, 272, JOB_FILTER_UNSHARE_NS),
	FLAGS(clone, 56, JOB_FILTER_CLONE_NS),
	RULE(setns, 308),
	RULE(mount, 165),
	RULE(umount2, 166),
	RULE(pivot_root, 155),
	RULE(bpf, 321),
	RULE(perf_event_open, 298),
	COMMON_RULES,
};

static const struct job_filter_rule i386_rules[] = {
	FLAGS(unshare, 310, JOB_FILTER_UNSHARE_NS),
	FLAGS(clone, 120, JOB_FILTER_CLONE_NS),
	RULE(setns, 346),
	RULE(mount, 21),
	RULE(umount, 22),
	RULE(umount2, 52),
	RULE(pivot_root, 217),
	RULE(bpf, 357),
	RULE(perf_event_open, 336),
	COMMON_RULES,
};

static const struct job_filter_rule aarch64_rules[] = {
	FLAGS(unshare, 97, JOB_FILTER_UNSHARE_NS),
	FLAGS(clone, 220, JOB_FILTER_CLONE_NS),
	RULE(setns, 268),
	RULE(mount, 40),
	RULE(umount2, 39),
	RULE(pivot_root, 41),
	RULE(bpf, 280),
	RULE(perf_event_open, 241),
	COMMON_RULES,
};

#define NRULES(a) (sizeof(a) / sizeof((a)[0]))

/* x86_64 first (what nearly every call is), then i386. */
static const struct job_filter_abi x86_64_abis[] = {
	{ "x86_64", JOB_FILTER_ARCH_X86_64, JOB_FILTER_X32_BIT,
	  x86_64_rules, NRULES(x86_64_rules) },
	{ "i386", JOB_FILTER_ARCH_I386, 0, i386_rules, NRULES(i386_rules) },
};

static const struct job_filter_abi aarch64_abis[] = {
	{ "aarch64", JOB_FILTER_ARCH_AARCH64, 0,
	  aarch64_rules, NRULES(aarch64_rules) },
};

uint32_t job_filter_native_arch(void)
{
#if defined(__x86_64__) && !defined(__ILP32__)
	return JOB_FILTER_ARCH_X86_64;
#elif defined(__aarch64__) && !defined(__AARCH64EB__) && !defined(__ILP32__)
	return JOB_FILTER_ARCH_AARCH64;
#else
	return 0;
#endif
}

const struct job_filter_abi *job_filter_abi(uint32_t native, size_t i)
{
	if (native == JOB_FILTER_ARCH_X86_64 && i < NRULES(x86_64_abis))
		return &x86_64_abis[i];
	if (native == JOB_FILTER_ARCH_AARCH64 && i < NRULES(aarch64_abis))
		return &aarch64_abis[i];
	return NULL;
}

struct prog {
	struct sock_filter *insns;
	size_t n;
	size_t max;
};

/* Append one instruction; past max only count (the caller checks n). */
static void emit(struct prog *p, uint16_t code, uint8_t jt, uint8_t jf,
		 uint32_t k)
{
	if (p->n < p->max) {
		p->insns[p->n].code = code;
		p->insns[p->n].jt = jt;
		p->insns[p->n].jf = jf;
		p->insns[p->n].k = k;
	}
	p->n++;
}

static uint32_t ret_errno(int e)
{
	return SECCOMP_RET_ERRNO | ((uint32_t)e & SECCOMP_RET_DATA);
}

/* Instructions of one rule, as section() emits them. */
static size_t rule_len(const struct job_filter_rule *r)
{
	return r->action == JOB_FILTER_EPERM_IF_FLAGS ? 5 : 2;
}

/* Instructions of an ABI's section, its leading arch check left out. */
static size_t section_len(const struct job_filter_abi *abi)
{
	size_t len = 2, i;  /* ld nr ... ret ALLOW */

	if (abi->nr_limit)
		len += 2;
	for (i = 0; i < abi->nrules; i++)
		len += rule_len(&abi->rules[i]);
	return len;
}

static void section(struct prog *p, const struct job_filter_abi *abi)
{
	size_t i;

	emit(p, BPF_LD | BPF_W | BPF_ABS, 0, 0,
	     (uint32_t)offsetof(struct seccomp_data, nr));
	if (abi->nr_limit) {
		emit(p, BPF_JMP | BPF_JGE | BPF_K, 0, 1, abi->nr_limit);
		emit(p, BPF_RET | BPF_K, 0, 0, ret_errno(ENOSYS));
	}
	for (i = 0; i < abi->nrules; i++) {
		const struct job_filter_rule *r = &abi->rules[i];

		switch (r->action) {
		case JOB_FILTER_EPERM_IF_FLAGS:
			emit(p, BPF_JMP | BPF_JEQ | BPF_K, 0, 4, r->nr);
			emit(p, BPF_LD | BPF_W | BPF_ABS, 0, 0,
			     (uint32_t)offsetof(struct seccomp_data, args[0]));
			emit(p, BPF_JMP | BPF_JSET | BPF_K, 0, 1, r->mask);
			emit(p, BPF_RET | BPF_K, 0, 0, ret_errno(EPERM));
			emit(p, BPF_RET | BPF_K, 0, 0, SECCOMP_RET_ALLOW);
			break;
		case JOB_FILTER_ENOSYS:
			emit(p, BPF_JMP | BPF_JEQ | BPF_K, 0, 1, r->nr);
			emit(p, BPF_RET | BPF_K, 0, 0, ret_errno(ENOSYS));
			break;
		case JOB_FILTER_EPERM:
		default:
			emit(p, BPF_JMP | BPF_JEQ | BPF_K, 0, 1, r->nr);
			emit(p, BPF_RET | BPF_K, 0, 0, ret_errno(EPERM));
			break;
		}
	}
	emit(p, BPF_RET | BPF_K, 0, 0, SECCOMP_RET_ALLOW);
}

int job_filter_build(uint32_t native, struct sock_filter *out, size_t max,
		     char *err, size_t errlen)
{
	struct prog p = { out, 0, out ? max : 0 };
	const struct job_filter_abi *abi;
	size_t i;

	if (!job_filter_abi(native, 0))
		return jail_fail(err, errlen,
			    "no seccomp filter for architecture 0x%08x "
			    "(only x86_64 and aarch64)", (unsigned int)native);

	emit(&p, BPF_LD | BPF_W | BPF_ABS, 0, 0,
	     (uint32_t)offsetof(struct seccomp_data, arch));
	for (i = 0; (abi = job_filter_abi(native, i)) != NULL; i++) {
		size_t len = section_len(abi);

		if (len > 255)  /* a conditional jump reaches 255 ahead */
			return jail_fail(err, errlen,
				    "seccomp filter: the %s section is too long (%zu)",
				    abi->name, len);
		emit(&p, BPF_JMP | BPF_JEQ | BPF_K, 0, (uint8_t)len, abi->arch);
		section(&p, abi);
	}
	emit(&p, BPF_RET | BPF_K, 0, 0, SECCOMP_RET_KILL_PROCESS);

	if (p.n > p.max || p.n > BPF_MAXINSNS)
		return jail_fail(err, errlen,
			    "seccomp filter: %zu instructions do not fit in %zu",
			    p.n, max);
	return (int)p.n;
}
