/*
 * jail_enter.h - move the calling process into the jail (mount namespace +
 * pivot_root). Needs CAP_SYS_ADMIN; does not depend on Slurm, so a plain
 * test driver (spank/tests/jail_enter_test.c) can exercise it as root.
 */
#ifndef WARDEN_JAIL_ENTER_H
#define WARDEN_JAIL_ENTER_H

#include <stddef.h>

#include "jail_helpers.h"

/*
 * Enter the jail described by cfg, then chdir to `cwd` inside it (NULL or a
 * path missing in the jail: stay at "/" and describe why in `note`).
 *
 * Returns 0 on success. On failure returns -1 with a message naming the path
 * and strerror(errno) in err; the process may then be half-way (own mount
 * namespace, old root still reachable) and must not run the task.
 */
int jail_enter(const struct jail_config *cfg, const char *cwd,
	       char *err, size_t errlen, char *note, size_t notelen);

#endif /* WARDEN_JAIL_ENTER_H */
