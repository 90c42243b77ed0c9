/*
 * ctld_guard.c - libwarden_ctld_guard.so, preloaded into slurmctld by the controller image's
 * entrypoint (LD_PRELOAD). It closes a self-deadlock of slurmctld that any ordinary user can
 * trigger (docs/security.md, "A user cannot freeze slurmctld").
 *
 * The defect, in Slurm 24.11 through 26.05 (src/common/assoc_mgr.c): a request to signal jobs
 * (REQUEST_KILL_JOBS: slurmrestd's DELETE of a job, `scancel --ctld`) takes the job write lock
 * and the association manager's user read lock, then asks, for each matching job the caller
 * does not own, whether the caller is a Slurm operator (assoc_mgr_get_admin_level_locked) or
 * coordinates the job's account (assoc_mgr_is_user_acct_coord, is_locked = true). Both are
 * "locked" variants: their caller holds the user lock. Yet when slurmctld has no user list
 * (always without accounting; with accounting, until slurmdbd first answered) both load the
 * list first, taking the user WRITE lock their caller holds for reading: the thread blocks for
 * good holding the job and node write locks, and every job, node and partition read of every
 * user waits behind it, while pings still answer.
 *
 * The guard interposes those two functions. With no user list loaded nobody has an admin
 * level or coordinates an account that Slurm knows of, so under the caller's lock they answer
 * "no" (what Slurm itself answers when loading the list fails) instead of loading it.
 * Everything else goes to Slurm's own functions unchanged. The guard keeps no state.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>

#include <slurm/slurmdb.h>

/*
 * Slurm's logging, exported by libslurmfull.so, which slurmctld links. Answers are logged at
 * debug level: without accounting, every locked operator check of an ordinary user's request
 * comes here.
 */
extern void slurm_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
extern void slurm_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

typedef bool (*acct_coord_fn)(void *db_conn, uint32_t uid, char *acct_name, bool is_locked);
typedef slurmdb_admin_level_t (*admin_level_fn)(void *db_conn, uint32_t uid);

/* The exported definitions that slurmctld's calls resolve to ahead of libslurmfull.so's. */
bool assoc_mgr_is_user_acct_coord(void *db_conn, uint32_t uid, char *acct_name, bool is_locked);
slurmdb_admin_level_t assoc_mgr_get_admin_level_locked(void *db_conn, uint32_t uid);

/* Slurm's own definition of `name` (the next one after the guard's), or NULL, said once per call. */
static void *slurms(const char *name)
{
	void *next = dlsym(RTLD_NEXT, name);

	if (!next)
		slurm_error("warden ctld guard: Slurm's %s not found: %s", name, dlerror());
	return next;
}

/*
 * Whether slurmctld holds a user list: 1 yes, 0 no, -1 unknown (the symbol is missing: the
 * caller answers "no" then too, never loading under a lock).
 */
static int user_list_loaded(void)
{
	void *const *list = dlsym(RTLD_DEFAULT, "assoc_mgr_user_list");

	if (!list) {
		slurm_error("warden ctld guard: Slurm's assoc_mgr_user_list not found: %s", dlerror());
		return -1;
	}
	return *list != NULL;
}

bool assoc_mgr_is_user_acct_coord(void *db_conn, uint32_t uid, char *acct_name, bool is_locked)
{
	acct_coord_fn real;
	void *next;

	if (is_locked && user_list_loaded() != 1) {
		slurm_debug("warden ctld guard: uid %u coordinates no account (%s): no user list is "
			   "loaded, and loading it under the caller's lock would deadlock slurmctld",
			   uid, acct_name ? acct_name : "any");
		return false;
	}
	if (!(next = slurms("assoc_mgr_is_user_acct_coord")))
		return false;
	*(void **)&real = next;
	return real(db_conn, uid, acct_name, is_locked);
}

slurmdb_admin_level_t assoc_mgr_get_admin_level_locked(void *db_conn, uint32_t uid)
{
	admin_level_fn real;
	void *next;

	if (user_list_loaded() != 1) {
		slurm_debug("warden ctld guard: uid %u has no Slurm admin level: no user list is loaded, "
			   "and loading it under the caller's lock would deadlock slurmctld", uid);
		return SLURMDB_ADMIN_NOTSET;
	}
	if (!(next = slurms("assoc_mgr_get_admin_level_locked")))
		return SLURMDB_ADMIN_NOTSET;
	*(void **)&real = next;
	return real(db_conn, uid);
}
