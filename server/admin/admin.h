/* admin.h - psdbd's administrative commands (one file each under server/admin/): token, key, gc,
 * check, job, sodb; backup and restore are in backup.h. */
#ifndef PSDBD_ADMIN_H
#define PSDBD_ADMIN_H

#include <stddef.h>

/* Each takes argv with argv[0] the command's last word; returns the exit status. */
int psdbd_cmd_token(int argc, char **argv);
int psdbd_cmd_key(int argc, char **argv);
int psdbd_cmd_gc(int argc, char **argv);
int psdbd_cmd_check(int argc, char **argv);
/* `psdbd job add`: a compile farm job, as POST /v1/jobs (job.c). */
int psdbd_cmd_job(int argc, char **argv);
/* `psdbd sodb list|retire`: the published SODBs, and retiring one as DELETE /v1/sodbs/ID
 * (sodb.c). */
int psdbd_cmd_sodb(int argc, char **argv);

/* Takes the data directory's lock (DIR/psdbd.lock, flock). Only one server may serve a data
 * directory; gc takes it too. Returns the lock fd, or -1 with err (another holder or an error). */
int psdbd_lock_data_dir(const char *dir, char *err, size_t err_size);
/* The lock of replicas that share one data directory's blob store and a PostgreSQL index: taken
 * shared, so every replica holds it at once. *alone is set when no other replica holds it now
 * (then this one may clear tmp/ of leftovers). Returns the lock fd, or -1 with err. */
int psdbd_lock_data_dir_shared(const char *dir, int *alone, char *err, size_t err_size);

/* Opens the index of the data directory whose store is open: the one place that decides whether
 * a data directory is new. When DIR/index.sqlite is absent and `may_init` is set, a new index is
 * created only if blobs/ holds no blob file; beside blobs it is refused with a message that says
 * how to restore. 0, or -1 with a one-line message in err. */
struct psdbd_store;
struct psdbd_index;
int psdbd_data_open_index(const struct psdbd_store *store, int may_init, struct psdbd_index **out,
                          char *err, size_t err_size);

/* Where the index is and how to reach it: `url` NULL or "" is DIR/index.sqlite
 * (psdbd_data_open_index); a postgresql:// URL is that database, shared by replicas
 * (psdbd_index_connect with `pool` connections and `statement_timeout_ms`). On PostgreSQL a
 * database without a psdbd schema gets one only when `may_init` is set and blobs/ holds no blob
 * file, as a new index.sqlite would. 0, or -1 with a one-line message in err. */
int psdbd_data_open_index_at(const struct psdbd_store *store, const char *url, unsigned pool,
                             unsigned statement_timeout_ms, int may_init, struct psdbd_index **out,
                             char *err, size_t err_size);

#endif
